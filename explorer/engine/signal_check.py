"""Checking, once per kind of model, that what the engine reads step by step is what one full pass gives.

The decoding loop reads every attention signal from one-token passes over a cache, through the
attention probe. A family whose cache, positions or attention path behave differently from what the
engine assumes gives numbers that look plausible and are wrong (GPT-1, whose forward ignores the
cache, once gave amax = 0 on every token: RIND stayed 0 and DRAGIN never retrieved, on a run that
said it was complete). So before the first span that reads attention from a kind of model this
process has not checked (its class, attention implementation, probe path, probed layer, dtype and
device type), the engine feeds the prompt's last token the way its loop does (the tokens before
it prefilled into a cache, the probe active on the step) and compares that step with ONE forward
pass over the same tokens without a cache, on transformers' eager implementation with
``output_attentions``:

* the step's attention row on the probed layer, put on absolute positions (max absolute difference);
* its next-token log-probabilities on the full pass's 20 most likely tokens (max absolute difference).

Both must agree within the tolerance of the dtype (float32: 1e-4 and 1e-3; half precision, whose
cached and uncached kernels round differently, 5e-2 and 1.0, which still catches a step that lost
its context: GPT-1's row was off by 0.96 and its log-probabilities by 0.4 on a random model). A
disagreement refuses the run with what differed, and the kind stays refused in this process; an
agreement is remembered, so later spans pay nothing. The prompt is cut to its first
:data:`MAX_TOKENS` tokens for the check, which keeps the full pass's weights small.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from explorer.engine.attention import absolute_row, decoder_layers, follows_attention_interface
from explorer.engine.capabilities import attention_layer_indices
from explorer.engine.protocols import EngineLike
from explorer.errors import ModelError

#: Longest prompt prefix the check encodes.
MAX_TOKENS = 256
#: (attention row, log-probability) tolerances per dtype; others use the half-precision pair.
TOLERANCES = {"float32": (1e-4, 1e-3), "float64": (1e-6, 1e-5)}
HALF_TOLERANCES = (5e-2, 1.0)
TOP = 20
#: Outcome per kind of model: None where the step agreed with the full pass, else the refusal's message.
_CHECKED: dict[tuple[str, ...], str | None] = {}

CHECK_FIX = ("load the model with --attn eager; if the signals still disagree, this family's attention cannot be read "
             "step by step: pick a method that reads no attention (wo, sr, fl, fs, flare, seakr, drrag, blendfilter)")


def kind_of(engine: EngineLike) -> tuple[str, ...]:
    """What the check's verdict holds for: a model class read through one attention path, dtype and device type."""
    model, probe = engine.model, engine.probe
    return (f"{type(model).__module__}.{type(model).__qualname__}", probe.mode, probe.implementation,
            str(probe.layer_index), _dtype(engine), engine.device.type, str(engine.recompute is not None))


def checked(engine: EngineLike) -> bool:
    """Whether this kind of model has already been checked in this process (either way)."""
    return kind_of(engine) in _CHECKED


def check_signals(engine: EngineLike, prompt_ids: Sequence[int]) -> None:
    """Refuse, with what differs, a model whose stepwise attention signals disagree with one full eager pass."""
    key = kind_of(engine)
    if key not in _CHECKED:
        ids = list(prompt_ids)[:MAX_TOKENS]
        if len(ids) < 2:
            return  # nothing before the step to attend to: check on a later, longer prompt
        with engine.lock, torch.inference_mode():
            _CHECKED[key] = _disagreement(engine, ids)
    message = _CHECKED[key]
    if message is not None:
        raise ModelError(message, fix=CHECK_FIX)


def _disagreement(engine: EngineLike, ids: list[int]) -> str | None:
    """None when the stepwise row and log-probabilities match the full eager pass, else what differs."""
    row, logprobs = _stepwise(engine, ids)
    ref_row, ref_logprobs = _full_pass(engine, ids)
    dtype = _dtype(engine)
    name = f"{type(engine.model).__name__} (attention {engine.probe.implementation!r}, {dtype})"
    row_tol, logprob_tol = TOLERANCES.get(dtype, HALF_TOLERANCES)
    problems = []
    if ref_row is None:
        problems.append(f"the full pass returned no attention weights for layer {engine.probe.layer_index}")
    elif row.shape != ref_row.shape:
        problems.append(f"the step's attention row covers {row.shape[-1]} positions, the full pass's "
                        f"{ref_row.shape[-1]}")
    else:
        gap = float((row - ref_row).abs().max())
        if not gap <= row_tol:
            where = int((row - ref_row).abs().argmax())
            problems.append(f"the attention row of layer {engine.probe.layer_index} differs by {gap:.3g} (position "
                            f"{where}: {float(row[where]):.4g} step by step, {float(ref_row[where]):.4g} in the full "
                            f"pass; tolerance {row_tol:g})")
    top = torch.topk(ref_logprobs, min(TOP, ref_logprobs.shape[-1])).indices
    gap = float((logprobs[top] - ref_logprobs[top]).abs().max())
    if not gap <= logprob_tol:
        problems.append(f"the next-token log-probabilities differ by {gap:.3g} (tolerance {logprob_tol:g})")
    if not problems:
        return None
    return (f"the signals the engine reads step by step from {name} disagree with one full forward pass over the same "
            f"{len(ids)} tokens on the eager implementation: " + "; ".join(problems) + ", so its attention signals "
            "would be wrong and the run is refused")


def _dtype(engine: EngineLike) -> str:
    return str(next(engine.model.parameters()).dtype).replace("torch.", "")


def _stepwise(engine: EngineLike, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The last token fed as the decoding loop feeds it: its probed row (absolute positions) and log-probabilities."""
    probe = engine.probe
    cache = engine.new_cache()
    probe.active = False
    try:
        engine._forward(torch.tensor([ids[:-1]], device=engine.device), cache)
        probe.active = True
        out = engine._forward(torch.tensor([ids[-1:]], device=engine.device), cache)
        row = engine._last_row(cache, len(ids)).float()
    finally:
        probe.active = False
    return row, torch.log_softmax(out.logits[0, -1].float(), dim=-1).cpu()


def _full_pass(engine: EngineLike, ids: list[int]) -> tuple[torch.Tensor | None, torch.Tensor]:
    """One pass over ``ids`` without a cache on the eager implementation: the probed layer's last row, log-probs."""
    model = engine.model
    before = str(model.config._attn_implementation)
    switched = before != "eager" and follows_attention_interface(type(model))
    if switched:
        try:
            model.set_attn_implementation("eager")
        except (ValueError, KeyError, ImportError, AttributeError):  # no eager pass to compare with: no row
            out = model(input_ids=torch.tensor([ids], device=engine.device), use_cache=False, logits_to_keep=1)
            return None, torch.log_softmax(out.logits[0, -1].float(), dim=-1).cpu()
    try:
        out = model(input_ids=torch.tensor([ids], device=engine.device), use_cache=False, output_attentions=True,
                    logits_to_keep=1)
    finally:
        if switched:
            model.set_attn_implementation(before)
    weights = _layer_weights(engine, getattr(out, "attentions", None))
    row = None if weights is None else weights[0].float().mean(0)[-1].cpu()
    if row is not None and row.shape[-1] != len(ids):
        row = absolute_row(row, len(ids))
    return row, torch.log_softmax(out.logits[0, -1].float(), dim=-1).cpu()


def _layer_weights(engine: EngineLike, attentions: Any) -> torch.Tensor | None:
    """The probed layer's entry of an ``output_attentions`` tuple, which lists every layer or only those that attend."""
    if not attentions:
        return None
    present = [a for a in attentions if isinstance(a, torch.Tensor) and a.dim() == 4]
    index = engine.probe.layer_index
    attending = attention_layer_indices(engine.model.config)
    if len(attentions) == len(decoder_layers(engine.model)):
        found = attentions[index]
        return found if isinstance(found, torch.Tensor) and found.dim() == 4 else None
    if attending and index in attending and len(present) == len(attending):
        return present[attending.index(index)]
    return None
