"""TARG: one retrieval gate per question from a short no-context draft (``signals`` registers the margin,
``variance`` scores sampled prefixes)."""

from explorer.methods.targ import signals  # noqa: F401  (registers margin)
from explorer.methods.targ.method import Targ

__all__ = ["Targ"]
