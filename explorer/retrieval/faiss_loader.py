"""faiss is optional: the dense index and its shards ask this one place whether it is installed."""

from __future__ import annotations

from typing import Any


def faiss_module() -> Any | None:
    """faiss if it is installed, else None (exact search still works for small corpora)."""
    try:
        import faiss
    except ImportError:
        return None
    return faiss
