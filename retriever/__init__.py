"""retriever: dense retrieval from a raw corpus to an evaluated, served index.

The CLI is a thin layer over these (README, "Library API"): ``retriever.encoder.Encoder`` and
``EncoderSettings.for_model``, ``retriever.indexing.encode_and_index`` / ``build_index`` with ``IndexParams``,
``retriever.searching.Searcher`` (``search``, ``run``), ``retriever.runs.write_run`` / ``read_run``,
``retriever.metrics.evaluate_run``; errors a caller can act on are ``retriever.errors.RetrieverError``.
"""
from __future__ import annotations

__version__ = "0.1.0"
