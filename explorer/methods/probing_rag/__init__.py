"""Probing-RAG: a prober on an intermediate layer's hidden states decides whether to retrieve."""

from explorer.methods.probing_rag.method import ProbingRAG

__all__ = ["ProbingRAG"]
