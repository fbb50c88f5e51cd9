"""The last rows of a text's attention matrix, without building the whole matrix.

The reference DRAGIN's query ("real words") re-encodes the question, the answer so far and the
flagged sentence, and reads the attention of the sentence's tokens over everything before them.
Building the whole (n, n) matrix for that (what ``output_attentions`` and
:meth:`~explorer.engine.generation.Engine.attention_matrix` give) costs memory quadratic in the
text: at 4k tokens the eager weights of one layer and their softmax copies alone are over a
gigabyte. Only the sentence's rows are read, so the text before them is encoded by the model's
fast kernel into a cache and just the sentence's tokens go through the probe's eager attention:
``rows x n`` weights instead of ``n x n``. The rows are the same computation (equal to float
rounding); a probed layer with a sliding window falls back to the whole matrix, whose rows it
already maps to absolute positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from explorer.errors import ExplorerError, ModelError

if TYPE_CHECKING:
    from explorer.engine.generation import Engine


def attention_rows(engine: Engine, ids: Sequence[int], start: int) -> torch.Tensor:
    """Rows ``start`` to the end of the probed layer's head-mean attention over ``ids``: ``(n - start, n)``."""
    ids = list(ids)
    n = len(ids)
    if not 0 <= start < n:
        raise ExplorerError(f"row {start} is outside a text of {n} tokens", where="attention_rows",
                            fix="ask for rows of the text that was encoded")
    if start == 0 or (engine.window is not None and n > engine.window.size):
        return engine.attention_matrix(ids)[start:]
    engine.probe.require("reading attention rows")
    engine.check_fits(n, 0, where="text to encode")
    with engine.lock, torch.inference_mode():
        engine.probe.active = False
        cache = engine.new_cache()
        engine.forward_batch(torch.tensor([ids[:start]], device=engine.device), cache)
        engine.probe.active = True
        try:
            engine._forward(torch.tensor([ids[start:]], device=engine.device), cache, logits=False)
        finally:
            engine.probe.active = False
        rows = engine.probe.last_mean[0]
    if tuple(rows.shape) != (n - start, n):
        raise ModelError(f"the attention rows have shape {tuple(rows.shape)} for rows {start}..{n} of {n} tokens",
                         fix="report this model; --attn eager may help")
    return rows
