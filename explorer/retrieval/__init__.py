"""Corpora, passage splitting and retrieval (BM25 and the interface other backends implement)."""

from explorer.retrieval.base import Hit, Passage, Retriever

__all__ = ["Hit", "Passage", "Retriever"]
