"""DRAGIN: retrieve when a content word's entropy x attention (RIND) is high; query from the model's attention.

``method`` is the strategy, ``qfs`` builds the query from the attention the last token pays,
``signals`` registers the content mask and RIND.
"""

from explorer.methods.dragin import signals  # noqa: F401  (registers content and rind)
from explorer.methods.dragin.method import Dragin

__all__ = ["Dragin"]
