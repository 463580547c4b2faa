"""retriever: dense retrieval from a raw corpus to an evaluated, served index."""
from __future__ import annotations

__version__ = "0.1.0"
