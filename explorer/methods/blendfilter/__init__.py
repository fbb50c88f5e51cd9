"""BlendFilter: blend three queries, then let the model filter the passages.

``method`` is the strategy and ``filter_parse`` reads the model's filter verdicts.
"""

from explorer.methods.blendfilter.method import BlendFilter

__all__ = ["BlendFilter"]
