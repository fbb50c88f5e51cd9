"""What every decoding loop shares: detokenising, stop rules, end-of-sequence, cancel and cost counting.

The engine decodes two ways: one sequence at a time with attention signals
(:meth:`explorer.engine.generation.Engine.generate`) and k sampled rows in one batch
(:func:`explorer.engine.sampling.sample`). Both turn ids into text pieces, cut at stop strings,
read the same per-token statistics, stop for a user's Cancel the same way (the span ends with
``stopped_by="cancelled"``, is recorded with its costs, then :class:`~explorer.trace.Cancelled`
unwinds the run) and count costs the same way; all of that lives here so the two cannot drift.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Sequence
from typing import Any

import torch

from explorer.engine.protocols import EngineLike
from explorer.engine.signals import StepStats, step_stats, warp
from explorer.engine.token_signals import SignalSpec, TokenContext, compute_step
from explorer.trace import Cancelled, Costs, TokenSignal, TraceRecorder

#: A sentence ends at . ! or ? (with closing quotes/brackets) followed by whitespace, but not after
#: a single capital letter ("J. R. R."), so initials do not end a reasoning step.
_SENTENCE_END = re.compile(r"(?<!\b[A-Z])[.!?][\"'”’)\]]*(?=\s)")

#: Why a span stopped, in every loop.
STOP_REASONS = ("eos", "max_tokens", "stop_string", "sentence_end", "callback", "cancelled")


class Detokenizer:
    """Turns a growing list of token ids into per-token text pieces that join to the decoded whole.

    Byte-level tokenizers split one character over several tokens; until it is complete the
    decoded text ends in U+FFFD, so such a tail is held back and given to the token completing it.
    """

    def __init__(self, engine: EngineLike, *, special: bool = False) -> None:
        self.engine = engine
        self.special = special
        self.ids: list[int] = []
        self.text = ""

    def push(self, token_id: int) -> str:
        self.ids.append(token_id)
        full = self.engine.decode(self.ids, special=self.special).rstrip("\ufffd")
        if full.startswith(self.text):
            piece = full[len(self.text):]
        else:  # the tokenizer re-spelled earlier text (rare); keep the pieces joining to the whole
            piece = full[len(self.text):] if len(full) > len(self.text) else ""
        self.text += piece
        return piece


def text_end(text: str, stop_strings: Sequence[str], sentence_end: bool = False) -> tuple[int, str] | None:
    """Where a span's text ends (character offset) and why, or None while it goes on.

    A stop string ends the text right before it; a sentence end (``sentence_end``) right after
    its punctuation, and only once the sentence has some text.
    """
    hits = [(i, "stop_string") for s in stop_strings if s and (i := text.find(s)) >= 0]
    if sentence_end:
        m = _SENTENCE_END.search(text)
        if m is not None and text[:m.start()].strip():
            hits.append((m.end(), "sentence_end"))
    return min(hits) if hits else None


def drop_after(tokens: list[TokenSignal], ids: list[int], cut: int) -> tuple[list[TokenSignal], list[int]]:
    """Keep the tokens that end at or before character ``cut``; trim a token that straddles it."""
    kept: list[TokenSignal] = []
    pos = 0
    for token in tokens:
        end = pos + len(token.text)
        if end <= cut:
            kept.append(token)
        elif pos < cut:
            token.text = token.text[: cut - pos]
            kept.append(token)
            break
        else:
            break
        pos = end
    return kept, ids[: len(kept)]


def kept_tokens(pieces: list[str], cut: int) -> int:
    """How many tokens start before character ``cut`` (a token straddling the cut is kept)."""
    pos, count = 0, 0
    for piece in pieces:
        if pos >= cut:
            break
        count += 1
        pos += len(piece)
    return count


def token_signal(engine: EngineLike, logits: torch.Tensor, chosen: int, piece: str, specs: Sequence[SignalSpec],
                 entropy_warped: float | None = None, stats: StepStats | None = None) -> TokenSignal:
    """The chosen token with its ``logits`` and ``token`` signals (attention-based ones are filled in later).

    ``stats`` are the distribution's statistics when the caller already has them (a batched step
    computes them on the device for every row at once); otherwise they are computed here.
    """
    if stats is None:
        stats = step_stats(logits, chosen)
    top = [(piece_text(engine, i), p) for i, p in zip(stats.top_ids, stats.top_probs, strict=True)]
    ctx = TokenContext(engine, chosen, piece, logits=logits, stats=stats, entropy_warped=entropy_warped)
    return TokenSignal(chosen, piece, top, compute_step(specs, ctx))


#: The text of single token ids, per tokenizer: every step names its top-5 alternatives, and a batch
#: of 32 rows would otherwise call the tokenizer 160 times a step for the same few thousand ids.
_PIECES: weakref.WeakKeyDictionary[Any, dict[int, str]] = weakref.WeakKeyDictionary()


def piece_text(engine: EngineLike, token_id: int) -> str:
    """``engine.decode([token_id])``, remembered per tokenizer."""
    pieces = _PIECES.setdefault(engine.tokenizer, {})
    text = pieces.get(token_id)
    if text is None:
        text = pieces[token_id] = engine.decode([token_id])
    return text


def choose_token(logits: torch.Tensor, sampling: Any, generator: torch.Generator | None) -> tuple[int, float | None]:
    """The next token: greedy without ``sampling``, else drawn from the warped distribution (with its entropy)."""
    if sampling is None:
        return int(torch.argmax(logits)), None
    warped = warp(logits, sampling.temperature, sampling.top_k, sampling.top_p)
    probs = torch.softmax(warped, dim=-1)
    chosen = int(torch.multinomial(probs.cpu(), 1, generator=generator))
    logq = torch.log_softmax(warped, dim=-1)
    return chosen, float(-(probs * logq).nan_to_num().sum())


def cancelled(rec: TraceRecorder | None) -> bool:
    """Whether the user asked to stop: a loop then ends its span with ``stopped_by="cancelled"``."""
    return rec is not None and rec.cancel.is_set()


def raise_if_cancelled(stopped_by: str) -> None:
    """After a cancelled span is recorded (its tokens and costs kept), unwind the run."""
    if stopped_by == "cancelled":
        raise Cancelled()


def count_call(costs: Costs, *, forward_passes: int, prompt_tokens: int, generated_tokens: int,
               sampled_sequences: int = 0) -> None:
    """One LLM call's costs, counted the same for a greedy span and a sampled batch."""
    costs.llm_calls += 1
    costs.forward_passes += forward_passes
    costs.prompt_tokens += prompt_tokens
    costs.generated_tokens += generated_tokens
    costs.sampled_sequences += sampled_sequences
