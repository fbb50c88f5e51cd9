"""The jobs of the shared decode batch: one engine call each, applying a run's own per-token rules.

A :class:`SpanJob` is one :meth:`~explorer.engine.generation.Engine.generate` call and applies the
rules of ``Engine._loop`` to its row; a :class:`SampleJob` is one
:func:`~explorer.engine.sampling.sample` call and drives the sampler's own ``_Loop`` over its k
(+1) rows. Both start in the batcher thread (their prompt's prefill, their rows joined), advance
after every step the batch takes, and end by handing their result (or exception) to the thread
that made the call, which meanwhile runs what they post (listeners, notes). See
:mod:`explorer.engine.batching` for the batch itself.
"""

from __future__ import annotations

import math
import queue
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import torch

from explorer.engine.captured import TOP_K_ALTERNATIVES, DecodeStep, Site, pack_signals
from explorer.engine.decode import Detokenizer, cancelled, choose_token, drop_after, token_signal
from explorer.engine.hidden import HiddenCapture, note_fallback
from explorer.engine.signals import StepStats
from explorer.engine.slots import SlotCache
from explorer.engine.spans import Generation, SpanRequest, stop_after
from explorer.engine.token_signals import plan
from explorer.trace import TraceRecorder

if TYPE_CHECKING:
    from explorer.engine.generation import Engine
    from explorer.engine.sampling import _Loop

_END = object()


class NotBatched(Exception):
    """The model's cache cannot be batched; the job runs on its own instead (the reason is the message)."""


class Row:
    """One live row of the batch: its place in the slots, and the token it feeds next at ``position``."""

    __slots__ = ("job", "index", "token", "position", "attention", "site")

    def __init__(self, job: Job, index: int, attention: bool, site: Site | None) -> None:
        self.job, self.index, self.attention, self.site = job, index, attention, site
        self.token = 0
        self.position = 0


class JobHost(Protocol):
    """What a job needs of the batch it decodes in (:class:`explorer.engine.batching.Batcher`).

    Named here, below the batcher, so that the batcher can import its jobs without the jobs importing it.
    """

    engine: Engine
    slots: SlotCache
    step: DecodeStep

    def check(self, cache: Any, out: Any, prompt_ids: list[int]) -> None: ...

    def join(self, job: Job, cache: Any, length: int, *, attention: bool, site: Site | None) -> Row: ...

    def join_copy(self, job: Job, source: Row) -> Row: ...

    def leave(self, row: Row) -> None: ...

    def leave_all(self, job: Job) -> None: ...


class Job:
    """A call waiting in, or decoding in, the batch; its caller's thread runs what is posted to it."""

    rows_needed = 1

    def __init__(self, batcher: JobHost, rec: TraceRecorder | None, prompt_tokens: int) -> None:
        self.batcher = batcher
        self.rec = rec
        self.prompt_tokens = prompt_tokens
        self.rows: list[Row] = []
        self.finished = False
        self.abort: BaseException | None = None
        self._mail: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._result: Any = None
        self._error: BaseException | None = None

    # -- the caller's side ---------------------------------------------------------------------------
    def post(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` in the caller's thread (listeners, notes): the batcher thread never waits for it."""
        self._mail.put(fn)

    def wait(self) -> Any:
        """Block the caller until the job ends, running what the batcher posts meanwhile."""
        while True:
            item = self._mail.get()
            if item is _END:
                break
            try:
                item()
            except BaseException as exc:  # noqa: BLE001 - a listener failed: the job stops, the caller raises it
                if self.abort is None:
                    self.abort = exc
        if self.abort is not None:
            raise self.abort
        if self._error is not None:
            raise self._error
        return self._result

    # -- the batcher's side --------------------------------------------------------------------------
    def end(self, result: Any = None, error: BaseException | None = None) -> None:
        if self.finished:
            return
        self.finished = True
        self.batcher.leave_all(self)
        if self.rec is not None and self.batcher.step.fallback:
            self.post(partial(note_decode_fallback, self.rec, self.batcher.step.fallback))
        self._result, self._error = result, error
        self._mail.put(_END)

    def start(self) -> None:
        raise NotImplementedError

    def advance(self, logits: torch.Tensor, packed: torch.Tensor) -> None:
        raise NotImplementedError


class SpanJob(Job):
    """One :meth:`Engine.generate` call: the per-token rules of ``Engine._loop`` applied to one row."""

    def __init__(self, batcher: JobHost, req: SpanRequest, rec: TraceRecorder | None) -> None:
        super().__init__(batcher, rec, len(req.prompt_ids))
        self.engine = engine = batcher.engine
        self.req = req
        self.generator = None
        if req.sampling is not None:
            self.generator = torch.Generator(device="cpu").manual_seed(int(req.sampling.seed))
        self.specs = plan(req.signals, attention=req.attention)
        self.detok = Detokenizer(engine, special=req.keep_special)
        self.tokens: list[Any] = []
        self.ids: list[int] = []
        self.forward_passes = 0
        self.stopped_by = "max_tokens"
        self.cut_at: int | None = None
        self.final = False
        self.site = batcher.step.site(req.hidden) if req.hidden is not None else None
        self.prefill_hidden: torch.Tensor | None = None

    @property
    def row(self) -> Row:
        return self.rows[0]

    def start(self) -> None:
        engine, req = self.engine, self.req
        capture = HiddenCapture(engine.model, req.hidden) if req.hidden is not None else None
        if capture is not None and capture.fallback and self.rec is not None:
            self.post(partial(note_fallback, self.rec, capture))
        engine.probe.active = False
        if capture is not None:
            with capture:
                cache, out = engine._prefill(req.prompt_ids)
            if capture.last is not None:
                self.prefill_hidden = capture.last[0, -1].clone()
        else:
            cache, out = engine._prefill(req.prompt_ids)
        self.forward_passes = 1
        self.batcher.check(cache, out, req.prompt_ids)
        self.batcher.join(self, cache, len(req.prompt_ids), attention=req.attention, site=self.site)
        logits = out.logits[0, -1]
        self._consider(logits, pack_signals(logits[None]).cpu()[0])

    def advance(self, logits: torch.Tensor, packed: torch.Tensor) -> None:
        self.forward_passes += 1
        if self.final:
            self._finish()
            return
        index = self.row.index
        self._consider(logits[index], packed[index])

    def _consider(self, logits: torch.Tensor, packed: torch.Tensor) -> None:
        """What ``Engine._loop`` does with one next-token distribution: choose, record, stop or feed."""
        req, engine = self.req, self.engine
        if self.abort is not None:
            self.end()
            return
        if cancelled(self.rec):
            self.stopped_by = "cancelled"
            self._finish()
            return
        stats = None
        if req.sampling is not None:
            chosen, warped = choose_token(logits, req.sampling, self.generator)
        else:
            chosen, warped = int(packed[0]), None
            stats = unpack_stats(packed, chosen)
        at_eos = chosen in engine.eos_ids and not req.ignore_eos
        if at_eos and not req.keep_special:
            self.stopped_by = "eos"
            self._finish()
            return
        self.ids.append(chosen)
        token = token_signal(engine, logits, chosen, self.detok.push(chosen), self.specs, warped, stats=stats)
        self.tokens.append(token)
        if self.rec is not None and req.stream:
            self.post(partial(self.rec.token, req.purpose, token))
        stop = "eos" if at_eos else stop_after(req, self.detok.text, self.tokens)
        row = self.row
        row.token, row.position = chosen, len(req.prompt_ids) + len(self.tokens) - 1
        if stop is None:
            return
        self.stopped_by, self.cut_at = stop if isinstance(stop, tuple) else (stop, None)
        # As alone: the last token is fed once more when its row completes amax or its state is wanted.
        if self.stopped_by in ("max_tokens", "callback") and (req.attention or self.site is not None):
            self.final = True
            return
        self._finish()

    def _finish(self) -> None:
        engine, req, slots = self.engine, self.req, self.batcher.slots
        p, index = len(req.prompt_ids), self.row.index
        fed = self.forward_passes - 1
        hidden = self.prefill_hidden
        if self.site is not None and fed > 0:
            hidden = slots.hidden[self.site][index].cpu().clone()
        amax = None
        if req.attention:
            values = slots.amax[index, p:p + len(self.tokens)].tolist()
            amax = [None if v < 0 else v for v in values]
        cache = slots.export(index, p + fed, engine.model.config) if req.attention else None
        tokens, ids = self.tokens, self.ids
        if self.cut_at is not None:
            tokens, ids = drop_after(tokens, ids, self.cut_at)
        engine._finish_signals(tokens, self.specs, amax)
        gen: Generation = Generation(purpose=req.purpose, prompt=req.prompt, prompt_ids=req.prompt_ids,
                                     segments=req.segments, ids=ids, tokens=tokens,
                                     text="".join(t.text for t in tokens), stopped_by=self.stopped_by,
                                     _engine=engine if req.attention else None, _cache=cache)
        gen.hidden = hidden
        gen.forward_passes = self.forward_passes  # type: ignore[attr-defined]
        self.end(gen)


class SampleJob(Job):
    """One :func:`~explorer.engine.sampling.sample` call: the sampler's own rules over its k (+1) rows."""

    def __init__(self, batcher: JobHost, loop: _Loop) -> None:
        super().__init__(batcher, loop.rec, len(loop.prompt_ids))
        self.loop = loop
        self.rows_needed = len(loop.rows)
        self.site = batcher.step.site(loop.hidden) if loop.hidden is not None else None
        self.batch: list[Row] = []
        self.slot_of: dict[int, Any] = {}
        if loop.rec is not None:
            rec, purpose = loop.rec, loop.purpose
            loop.emit = lambda signal: self.post(partial(rec.token, purpose, signal))

    def start(self) -> None:
        engine, loop = self.engine, self.loop
        cache = engine.new_cache()
        out = engine.forward_batch(torch.tensor([loop.prompt_ids], device=engine.device), cache)
        self.batcher.check(cache, out, loop.prompt_ids)  # before counting: refused, the loop runs alone
        loop.forward_passes += 1
        if self.site is not None:
            capture = self.batcher.step.capture_of(self.site)
            loop.layer, loop.site = capture.layer_index, capture.site
            if capture.fallback and loop.rec is not None:
                self.post(partial(note_fallback, loop.rec, capture))
        p = len(loop.prompt_ids)
        first = self.batcher.join(self, cache, p, attention=False, site=self.site)
        for r in loop.rows:
            self.slot_of[id(r)] = first if not self.slot_of else self.batcher.join_copy(self, first)
        self.batch = list(loop.rows)
        self._iterate(out.logits[:, -1].expand(len(self.batch), -1))

    @property
    def engine(self) -> Engine:
        return self.batcher.engine

    def _iterate(self, logits: torch.Tensor) -> None:
        """The sampler's loop body: choose for the rows still sampling, drop finished rows, queue the feeds."""
        loop = self.loop
        if self.abort is not None:
            self.end()
            return
        if cancelled(loop.rec):
            loop._cancel(self.batch)
            self.end()
            return
        loop._choose(self.batch, logits, None)
        keep = []
        for r in self.batch:
            if r.done:
                self.batcher.leave(self.slot_of[id(r)])
            else:
                keep.append(r)
        self.batch = keep
        if not keep:
            self.end()
            return
        for r in keep:
            row = self.slot_of[id(r)]
            row.token, row.position = r.next_input()
            r.fed += 1

    def advance(self, logits: torch.Tensor, packed: torch.Tensor) -> None:
        loop = self.loop
        loop.forward_passes += 1
        slots = self.batcher.slots
        for r in self.batch:
            if r.feeding_end:
                if self.site is not None:
                    r.hidden = slots.hidden[self.site][self.slot_of[id(r)].index].cpu().clone()
                r.done = True
        index = torch.tensor([self.slot_of[id(r)].index for r in self.batch], device=logits.device)
        self._iterate(logits.index_select(0, index))


def unpack_stats(packed: torch.Tensor, chosen: int) -> StepStats:
    """A row of :func:`~explorer.engine.captured.pack_signals`' table as the :class:`StepStats` of ``chosen``."""
    values = packed.tolist()
    lp = values[1]
    probs = [v for v in values[3:3 + TOP_K_ALTERNATIVES] if v >= 0]
    ids = [int(v) for v in values[3 + TOP_K_ALTERNATIVES:3 + TOP_K_ALTERNATIVES + len(probs)]]
    return StepStats(prob=math.exp(lp), logprob=lp, entropy=values[2], top_ids=ids, top_probs=probs)


def note_decode_fallback(rec: TraceRecorder, reason: str) -> None:
    """Say once per run that its decode steps ran uncaptured, and why."""
    if any(e.kind == "note" and e.payload.get("decode_fallback") for e in rec.trace.events):
        return
    rec.add("note", level="info", decode_fallback=True, message=reason)


def note_unbatched(rec: TraceRecorder | None, reason: str) -> None:
    """Say once per run that its spans decoded one at a time instead of in the shared batch, and why."""
    if rec is None or any(e.kind == "note" and e.payload.get("unbatched") for e in rec.trace.events):
        return
    rec.add("note", level="info", unbatched=True,
            message=f"this run's spans were decoded one at a time, not in the batch shared with concurrent runs: "
                    f"{reason} (same tokens and signals; only slower when runs overlap)")
