"""DR-RAG: two-stage retrieval with a small relevance classifier over (query, passage, passage) pairs.

``method`` is the strategy, ``selection`` the classifier-driven picks (CIS, CFS, QDC), and
``pair_classifier`` / ``pair_weights`` the classifier itself and its pickle-free weight files.
"""

from explorer.methods.drrag.method import DrRag

__all__ = ["DrRag"]
