"""k sampled continuations of one prompt in one batched loop, each with the hidden state at its end.

SEAKR's uncertainty needs, for one context, k sampled continuations and one hidden state per
continuation; its authors get them from a patched vLLM in one batched call. Here the prompt is
pre-filled ONCE with batch size 1 (through the engine's prefix cache when it has one), and all rows
then advance together, one token per forward pass. On plain key/value caches the rows read the
prompt's states once and keep only their own tokens (:mod:`explorer.engine.shared_prefix`);
otherwise the prompt's cache is repeated to one row per sample
(``DynamicCache.batch_repeat_interleave``; on a cache with recurrent state-space layers, an index
selection of row 0, which those layers support). Rows stop on their own (end-of-sequence, a stop
string, the end of a sentence, the token limit); a finished row leaves the batch
(``batch_select_indices``), so late steps get cheaper.

Where "the end" is. The paper reads the hidden state of the ⟨EOS⟩ token and argues that "⟨EOS⟩
attends to all previous tokens", which only an input position does; the authors' vLLM patch
makes that concrete: when a sequence stops for ANY reason, its final sampled token is replaced by
EOS, the sequence runs one more step so EOS is fed to the model, and the hidden state of that
pass is kept. This loop does the same: the end state of a sample is the chosen layer's state at
the position of an EOS token fed right after the sample's KEPT tokens, i.e. the last token the
model is fed for that row, computed over exactly ``prompt + kept tokens + [EOS]``. Tokens a stop
string made us cut after they had been fed are masked out of that row's attention, and the EOS
gets the position id right after the last kept token, so the state equals that of one forward
pass over ``prompt + sample + EOS`` (tests check this against ``output_hidden_states``). One
deviation from the patch: a sample cut by the token limit keeps all its tokens and EOS follows
them (the patch overwrote the last token with EOS). ``end_state="replace_last"`` follows the patch
itself instead (SEAKR's reference variant): a row stopped by a stop string or the token limit
feeds EOS in place of its LAST sampled token and keeps every earlier one, a stop string's first
tokens included; a row that sampled EOS is the same under both rules.

Sampling draws from the RAW next-token distribution warped by temperature, top-k and top-p
(:func:`explorer.engine.signals.warp`, applied to the top-k candidates only, which is the same
distribution without sorting the whole vocabulary). Each row has its own seeded generator, so a
sample depends only on (seed, row) and not on how many other rows there are. Optionally one extra
row decodes greedily (SEAKR's pseudo-generation), sharing the same prefill and passes.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from explorer.engine import shared_prefix
from explorer.engine.capabilities import holds_recurrent_state, repeat_rows, select_rows
from explorer.engine.decode import (
    Detokenizer,
    cancelled,
    count_call,
    drop_after,
    kept_tokens,
    raise_if_cancelled,
    text_end,
    token_signal,
)
from explorer.engine.hidden import HiddenCapture, HiddenSpec, note_fallback
from explorer.engine.protocols import EngineLike, PromptLike
from explorer.engine.signals import warp
from explorer.engine.spans import Generation, Sampling
from explorer.engine.token_signals import plan
from explorer.errors import ConfigError, ExplorerError, ModelError
from explorer.trace import TokenSignal, TraceRecorder, phase

#: Where a sample's end state is read: after its kept tokens, or in place of its last sampled token.
END_STATES = ("kept", "replace_last")


@dataclass
class Sample:
    """One sampled continuation: its kept tokens, their signals, why it stopped and its end state.

    ``logprobs``, ``entropies`` and ``energies`` are per kept token and read from the RAW
    distribution the token was drawn from (log p of the token, Shannon entropy, logsumexp of
    the logits). ``hidden`` is the end state described in the module docstring.
    """

    row: int
    ids: list[int]
    text: str
    stopped_by: str
    logprobs: list[float]
    entropies: list[float]
    energies: list[float]
    hidden: torch.Tensor | None = None


@dataclass
class SampleBatch:
    """What one batched sampling call produced.

    ``samples`` holds the non-empty samples in row order; ``empty`` counts the rows dropped
    because they produced no text (an immediate EOS or stop string). ``greedy`` is the greedy
    row's span when one was asked for, with ``greedy_energies`` per token.
    """

    prompt: str
    prompt_ids: list[int]
    segments: list[tuple[str, int, int]]
    k: int
    seed: int
    samples: list[Sample]
    empty: int
    greedy: Generation | None
    greedy_energies: list[float]
    layer: int | None
    site: str | None
    forward_passes: int
    seconds: float
    event_id: int | None = None


@dataclass
class _Row:
    """Book-keeping of one row while the batch runs."""

    row: int  # sample index; -1 for the greedy row
    generator: torch.Generator | None
    detok: Detokenizer
    ids: list[int] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)
    tokens: list[TokenSignal] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    entropies: list[float] = field(default_factory=list)
    energies: list[float] = field(default_factory=list)
    fed: int = 0  # generated tokens fed so far (the row's t-th feed sits at cache column prompt_len + t)
    position: int = 0  # position id of the next token fed
    pending: list[int] | None = None  # tokens still to feed after the row stopped; None while it samples
    kept: int = 0
    text: str = ""
    stopped_by: str = ""
    hidden: torch.Tensor | None = None
    done: bool = False
    feeding_end: bool = False
    alone: bool = False  # its end state is computed in a pass of its own (a recurrent cache cannot mask)

    @property
    def greedy(self) -> bool:
        return self.generator is None

    def next_input(self) -> tuple[int, int]:
        """The token this row feeds next and its position id (its last sample, or the next of the tokens it
        still feeds after stopping), advancing past it."""
        if self.pending is None:
            token = self.ids[-1]
        else:
            token = self.pending.pop(0)
            self.feeding_end = not self.pending
        position = self.position
        self.position += 1
        return token, position


def row_seed(seed: int, row: int) -> int:
    """The seed of row ``row``: distinct for every (seed, row) with row < 1,000,003."""
    return (int(seed) * 1_000_003 + row) % (2**63)


def sample(engine: EngineLike, prompt: PromptLike, *, k: int, max_new_tokens: int, sampling: Sampling | None = None,
           stop_strings: Sequence[str] = (), sentence_end: bool = False, hidden: HiddenSpec | None = None,
           greedy: bool = False, rec: TraceRecorder | None = None, purpose: str = "samples",
           meta: dict[str, Any] | None = None, end_state: str = "kept") -> SampleBatch:
    """Sample ``k`` continuations of ``prompt`` in one batched loop (plus a greedy row if ``greedy``).

    Each row stops at an end-of-sequence token, at the first ``stop_strings`` match (the match
    and what follows are dropped), at the end of its first sentence when ``sentence_end`` (the
    punctuation is kept), or after ``max_new_tokens``. With ``hidden`` every sample gets the end
    state of that layer and site (``end_state``: ``kept`` reads it after the kept tokens,
    ``replace_last`` where the last sampled token was, as the SEAKR authors' patch does; see the
    module docstring). With ``rec`` the call counts as ONE LLM call, ``k`` sampled
    sequences and its forward passes, and the greedy row (if any) is written as a ``generation``
    event.
    """
    if k < 1:
        raise ConfigError(f"k must be at least 1, got {k}", where="k", fix="sample at least one continuation")
    if max_new_tokens < 1:
        raise ConfigError(f"max_new_tokens must be at least 1, got {max_new_tokens}", where="max_new_tokens")
    if end_state not in END_STATES:
        raise ConfigError(f"end_state {end_state!r} is unknown", where="end_state", fix=f"use one of {END_STATES}")
    sampling = sampling or Sampling()
    text, prompt_ids, segments = engine.encode_prompt(prompt)
    if not prompt_ids:
        raise ExplorerError("the prompt is empty", where="prompt", fix="give the model some text to continue")
    engine.check_fits(len(prompt_ids), max_new_tokens + 2)
    loop = _Loop(engine, prompt_ids, k, max_new_tokens, sampling, tuple(s for s in stop_strings if s),
                 sentence_end, hidden, greedy, rec, purpose, end_state)
    with phase(rec, "sampling") as timer:
        batcher = engine.batcher
        if batcher is None or not batcher.sample(loop):
            with engine.lock, torch.inference_mode():
                loop.run()
    batch = loop.result(text, segments, timer.seconds)
    if rec is not None:
        _record(batch, loop, rec, meta or {})
        # The partial batch is in the trace (and its costs counted) before the run unwinds.
        raise_if_cancelled("cancelled" if loop.cancelled else "")
    return batch


class _Loop:
    def __init__(self, engine: EngineLike, prompt_ids: list[int], k: int, max_new: int, sampling: Sampling,
                 stop_strings: tuple[str, ...], sentence_end: bool, hidden: HiddenSpec | None, greedy: bool,
                 rec: TraceRecorder | None, purpose: str, end_state: str = "kept") -> None:
        self.engine, self.prompt_ids, self.k, self.max_new = engine, prompt_ids, k, max_new
        self.end_state = end_state
        self.sampling, self.stop_strings, self.sentence_end = sampling, stop_strings, sentence_end
        self.hidden, self.rec, self.purpose = hidden, rec, purpose
        self.end_token = _end_token(engine)
        p = len(prompt_ids)
        rows = [_Row(-1, None, Detokenizer(engine), position=p)] if greedy else []
        for i in range(k):
            gen = torch.Generator(device="cpu").manual_seed(row_seed(sampling.seed, i))
            rows.append(_Row(i, gen, Detokenizer(engine), position=p))
        self.rows = rows
        self.forward_passes = 0
        self.cancelled = False
        # The greedy row's tokens carry the logit and token signals; no attention is read here, so
        # attention and derived signals keep the layout with None.
        self.specs = plan(attention=False)
        self.layer: int | None = None
        self.site: str | None = None
        self._positions = "position_ids" in inspect.signature(engine.model.forward).parameters
        self.recurrent = False  # set once the cache exists: a state-space layer's state cannot mask a cut token
        #: Where the greedy row's tokens stream to (a batched run hands them to its own thread).
        self.emit = (lambda signal: rec.token(purpose, signal)) if rec is not None else None

    # -- the loop ---------------------------------------------------------------------------------
    def run(self) -> None:
        engine, model, device = self.engine, self.engine.model, self.engine.device
        p = len(self.prompt_ids)
        engine.probe.active = False
        # The prompt's pass, through the engine's prefix cache when it has one (the contexts of a run share
        # their instruction and exemplars, and its re-rank contexts their question and rationales too).
        cache, out = engine._prefill(self.prompt_ids)
        self.recurrent = holds_recurrent_state(cache)
        self.forward_passes += 1
        batch = list(self.rows)
        shared = shared_prefix.for_rows(engine, cache, len(batch), self._positions)
        if shared is not None:  # the rows read the prompt's states once; their cache holds only their own tokens
            cache = engine.new_cache()
        elif len(batch) > 1:
            repeat_rows(cache, len(batch))
        logits = out.logits[:, -1].expand(len(batch), -1)
        # Columns of the prompt and of every feed; the rows' own cache sees only the feeds' (from column p on).
        mask = torch.ones(len(batch), p, dtype=torch.long, device=device)
        own = p if shared is not None else 0
        capture = HiddenCapture(model, self.hidden) if self.hidden is not None else None
        if capture is not None:
            self.layer, self.site = capture.layer_index, capture.site
            note_fallback(self.rec, capture)
            capture.__enter__()
        if shared is not None:
            shared.__enter__()
        try:
            while batch:
                if cancelled(self.rec):
                    self._cancel(batch)
                    break
                self._choose(batch, logits, mask)
                keep = [i for i, r in enumerate(batch) if not r.done]
                if not keep:
                    break
                if len(keep) < len(batch):
                    index = torch.tensor(keep, device=device)
                    select_rows(cache, index)
                    mask = mask[index]
                    batch = [batch[i] for i in keep]
                inputs, positions = [], []
                for r in batch:
                    token, position = r.next_input()
                    inputs.append(token)
                    positions.append(position)
                    r.fed += 1
                mask = torch.cat([mask, torch.ones(len(batch), 1, dtype=mask.dtype, device=device)], dim=1)
                # A recurrent cache never masks (its rows recompute instead), and Mamba mixers would read a
                # mask longer than the step as padding; without one every row sees all it was fed.
                out = engine.forward_batch(torch.tensor(inputs, device=device)[:, None], cache,
                                           attention_mask=None if self.recurrent else mask[:, own:],
                                           position_ids=torch.tensor(positions, device=device)[:, None]
                                           if self._positions else None)
                self.forward_passes += 1
                logits = out.logits[:, -1]
                for i, r in enumerate(batch):
                    if r.feeding_end:
                        if capture is not None and capture.last is not None:
                            r.hidden = capture.last[i, -1].clone()
                        r.done = True
        finally:
            if shared is not None:
                shared.__exit__(None, None, None)
            if capture is not None:
                capture.__exit__(None, None, None)
        for r in self.rows:
            if r.alone and not self.cancelled:
                self._end_state_alone(r)

    def _end_state_alone(self, r: _Row) -> None:
        """A row whose fed tokens a stop string cut, on a recurrent cache: its state already holds them and no mask
        takes them out, so its end state comes from one pass over ``prompt + kept tokens + EOS``."""
        ids = [*self.prompt_ids, *r.ids[:r.kept], self.end_token]
        with HiddenCapture(self.engine.model, self.hidden) as capture:  # type: ignore[arg-type]
            self.engine.forward_batch(torch.tensor([ids], device=self.engine.device), self.engine.new_cache())
        self.forward_passes += 1
        if capture.last is not None:
            r.hidden = capture.last[0, -1].clone()

    def _choose(self, batch: list[_Row], logits: torch.Tensor, mask: torch.Tensor | None) -> None:
        """Pick the next token of every row still sampling, record its signals, and apply stop rules."""
        live = [i for i, r in enumerate(batch) if r.pending is None and not r.done]
        if not live:
            return
        raw = logits[live].float()
        logp = torch.log_softmax(raw, dim=-1)
        chosen = self._draw(raw, [batch[i] for i in live])
        # One transfer per step for the three per-row signals (a device sync each on a GPU otherwise).
        entropy, energy, picked = torch.stack([
            -(logp.exp() * logp).nan_to_num().sum(dim=-1),
            torch.logsumexp(raw, dim=-1),
            logp.gather(1, torch.tensor(chosen, device=raw.device)[:, None])[:, 0],
        ]).tolist()
        for j, i in enumerate(live):
            r, token = batch[i], chosen[j]
            if token in self.engine.eos_ids:
                self._stop(r, "eos", len(r.ids), mask, i)
                continue
            r.ids.append(token)
            r.logprobs.append(picked[j])
            r.entropies.append(entropy[j])
            r.energies.append(energy[j])
            piece = r.detok.push(token)
            r.pieces.append(piece)
            if r.greedy:
                signal = token_signal(self.engine, raw[j], token, piece, self.specs)
                r.tokens.append(signal)
                if self.emit is not None:
                    self.emit(signal)
            cut = text_end(r.detok.text, self.stop_strings, self.sentence_end)
            if cut is not None:
                self._stop(r, cut[1], kept_tokens(r.pieces, cut[0]), mask, i, text=r.detok.text[:cut[0]])
            elif len(r.ids) >= self.max_new:
                self._stop(r, "max_tokens", len(r.ids), mask, i)

    def _cancel(self, batch: list[_Row]) -> None:
        """The user pressed Cancel: every row still going ends here with what it has."""
        self.cancelled = True
        for r in batch:
            if not r.stopped_by:
                r.stopped_by, r.kept, r.text = "cancelled", len(r.ids), r.detok.text
            r.done = True

    def _draw(self, raw: torch.Tensor, rows: list[_Row]) -> list[int]:
        s = self.sampling
        sampled = [j for j, r in enumerate(rows) if not r.greedy]
        out = [int(torch.argmax(raw[j])) if r.greedy else -1 for j, r in enumerate(rows)]
        if not sampled:
            return out
        x = raw[sampled]
        top_k = s.top_k if s.top_k and 0 < s.top_k < x.shape[-1] else None
        if top_k is not None:
            values, index = torch.topk(x, top_k, dim=-1)
        else:
            values, index = x, None
        probs = torch.softmax(warp(values, s.temperature, None, s.top_p), dim=-1).cpu()
        index = index.cpu() if index is not None else None
        for n, j in enumerate(sampled):
            c = int(torch.multinomial(probs[n], 1, generator=rows[j].generator))
            out[j] = int(index[n, c]) if index is not None else c
        return out

    def _stop(self, r: _Row, reason: str, kept: int, mask: torch.Tensor | None, index: int,
              text: str | None = None) -> None:
        """End a row: fix its kept tokens, mask any cut token already fed, and queue the EOS to feed.

        ``index`` is the row's place in the current batch (the row of ``mask`` and of the cache).
        Without a ``mask`` (a row of the shared batch, whose slot holds only its own tokens) the
        cut is its position going back: what it feeds next overwrites the cut tokens, and the step
        attends to positions up to the one fed.
        """
        p = len(self.prompt_ids)
        r.stopped_by, r.kept = reason, kept
        r.text = r.detok.text if text is None else text
        if self.end_state == "replace_last" and reason != "eos":
            kept = len(r.ids) - 1  # the end state: EOS takes the last sampled token's place
        fed_kept = min(r.fed, kept)
        if r.fed > kept and self.recurrent:  # a recurrent state cannot forget them: the end state is recomputed
            r.done, r.alone = True, bool(r.text.strip()) and self.hidden is not None and not r.greedy
            return
        if r.fed > kept and mask is not None:  # cut tokens were already fed: hide them from later positions
            mask[index, p + kept:p + r.fed] = 0
        r.position = p + fed_kept
        if r.greedy or not r.text.strip() or self.hidden is None:
            r.done = True
            return
        r.pending = r.ids[fed_kept:kept] + [self.end_token]

    # -- results ----------------------------------------------------------------------------------
    def result(self, prompt: str, segments: list[tuple[str, int, int]], seconds: float) -> SampleBatch:
        samples, empty = [], 0
        greedy: Generation | None = None
        greedy_energies: list[float] = []
        for r in self.rows:
            if not r.stopped_by:  # cannot happen: every row ends by a stop rule
                r.stopped_by, r.kept, r.text = "max_tokens", len(r.ids), r.detok.text
            ids = r.ids[:r.kept]
            if r.greedy:
                tokens, ids = drop_after(r.tokens[:r.kept], ids, len(r.text))
                greedy = Generation(purpose=self.purpose, prompt=prompt, prompt_ids=self.prompt_ids,
                                    segments=segments, ids=ids, tokens=tokens, text="".join(t.text for t in tokens),
                                    stopped_by=r.stopped_by)
                greedy_energies = r.energies[:len(ids)]
                continue
            if not r.text.strip():
                empty += 1
                continue
            n = len(ids)
            samples.append(Sample(row=r.row, ids=ids, text=r.text, stopped_by=r.stopped_by, logprobs=r.logprobs[:n],
                                  entropies=r.entropies[:n], energies=r.energies[:n], hidden=r.hidden))
        return SampleBatch(prompt=prompt, prompt_ids=self.prompt_ids, segments=segments, k=self.k,
                           seed=self.sampling.seed, samples=samples, empty=empty, greedy=greedy,
                           greedy_energies=greedy_energies, layer=self.layer, site=self.site,
                           forward_passes=self.forward_passes, seconds=seconds)


def _end_token(engine: EngineLike) -> int:
    eos = engine.tokenizer.eos_token_id
    if eos is None and engine.eos_ids:
        eos = min(engine.eos_ids)
    if eos is None:
        raise ModelError("the model has no end-of-sequence token, so samples have no end state to read",
                         fix="use a model whose tokenizer or generation config defines eos_token_id")
    return int(eos)


def _record(batch: SampleBatch, loop: _Loop, rec: TraceRecorder, meta: dict[str, Any]) -> None:
    """One LLM call, k sampled sequences, its passes and tokens; the greedy row as a generation event."""
    count_call(rec.costs, forward_passes=batch.forward_passes, prompt_tokens=len(batch.prompt_ids),
               generated_tokens=sum(len(r.ids) for r in loop.rows), sampled_sequences=batch.k)
    gen = batch.greedy
    if gen is not None:
        event = rec.add("generation", purpose=gen.purpose, text=gen.text, tokens=[t.to_dict() for t in gen.tokens],
                        prompt=gen.prompt, prompt_tokens=len(gen.prompt_ids),
                        prompt_segments=[list(s) for s in gen.segments], stopped_by=gen.stopped_by,
                        decoding="greedy", batch={"k": batch.k, "seed": batch.seed},
                        seconds=round(batch.seconds, 4), **meta)
        gen.event_id = event.id
        batch.event_id = event.id
