"""Serving loaded indexes over HTTP: the FastAPI app, the micro-batcher and the search page.

Typical use is the CLI (``retriever serve INDEX``); in code::

    app = create_app({"scifact": Searcher("indexes/scifact")})
    uvicorn.run(app)
"""
from __future__ import annotations

from retriever.serving.app import create_app
from retriever.serving.served import BatchSettings, valid_index_name
from retriever.serving.inputs import Limits
from retriever.serving.batcher import MicroBatcher
from retriever.serving.threads import configure_threads

__all__ = ["BatchSettings", "Limits", "MicroBatcher", "configure_threads", "create_app", "valid_index_name"]
