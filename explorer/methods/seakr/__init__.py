"""SEAKR: retrieve when sampled answers' hidden states disagree; re-rank passages by how much they calm it.

``method`` is the step loop, ``contexts`` measures a context's uncertainty, ``query`` builds the
search query from the pseudo-rationale and ``answer`` chooses between the two final answers.
"""

from explorer.methods.seakr.method import Seakr

__all__ = ["Seakr"]
