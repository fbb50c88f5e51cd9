"""ETC: retrieve at the onset of a rise in the token entropies (``trend`` holds the series, ``method`` the strategy)."""

from explorer.methods.etc.method import Etc

__all__ = ["Etc"]
