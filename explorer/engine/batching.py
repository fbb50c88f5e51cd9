"""Concurrent runs share the model: their decode steps run as one batch, token by token.

Each run (an app visitor, an evaluation question, a script's call) runs its method in its own
thread, exactly as alone. When it asks the engine for a span (:meth:`Engine.generate`) or for
sampled continuations (:func:`~explorer.engine.sampling.sample`), the call becomes a *job* of the
engine's :class:`Batcher` and the run's thread waits for it. One batcher thread owns the model's
decoding: it encodes each new job's prompt on its own (the same prefill, prefix cache included,
as a run alone), copies the prompt's keys and values into free rows of a
:class:`~explorer.engine.slots.SlotCache`, and then advances EVERY live row by one token per
forward pass (:class:`~explorer.engine.captured.DecodeStep`: signals computed on the device, the
step captured as a CUDA graph on a GPU). After each step, each job applies its own rules to its
rows: the next token (greedy, or drawn with its own seeded generator), the stop strings, the
``until`` callback, end-of-sequence, Cancel. A job whose span is over leaves the batch at once and
its thread goes on; a job arriving meanwhile joins at the next step.

**Retrieval pauses a run and it rejoins.** A method retrieves between engine calls, so while a
run searches (or re-ranks, or builds its next prompt) it simply has no job in the batch; the
other runs keep decoding. Its next span is a new job that prefills its new prompt and joins the
batch wherever the others are.

**Same tokens, same signals.** A job's rows see exactly what a run alone sees: the same prompt
encoding and prefill, the same per-token rules (the code of :mod:`explorer.engine.decode`, the
sampler's own :class:`~explorer.engine.sampling._Loop`), and a decode step whose per-row math is
that of a batch-1 pass; only the batched matrix products round differently (float32: signals
agree to 1e-6; bf16: to the format's ~1e-2, where a greedy choice between two near-tied tokens
can differ). Tokens and listener calls (the UI's stream, the run journal) are handed back to the
run's own thread, so a slow listener never holds up the batch.

**Isolation.** Cancel ends only that run's job (its span stored as ``cancelled`` as alone); an
exception in one job's rules (a method's callback, a listener) ends that job with the exception
in its own thread; the rows of the others are untouched. A failure of the shared forward pass
itself is reported to every job of that step.

Models whose cache is not plain full attention (sliding windows, chunked or recurrent layers)
decode one span at a time as before, and a run says so in a note; see docs/architecture.md for why
this project batches itself instead of using a serving engine.
"""

from __future__ import annotations

import copy
import logging
import queue
import threading
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import torch

from explorer.engine.captured import DecodeStep, Site, default_mode, pack_signals
from explorer.engine.decode import Detokenizer, cancelled, choose_token, drop_after, token_signal
from explorer.engine.hidden import HiddenCapture, note_fallback
from explorer.engine.signals import StepStats
from explorer.engine.slots import SlotCache, plain_layers
from explorer.engine.token_signals import plan
from explorer.trace import TraceRecorder

if TYPE_CHECKING:
    from explorer.engine.generation import Engine, Generation, _Request
    from explorer.engine.sampling import _Loop, _Row

log = logging.getLogger(__name__)

#: Prompt tokens encoded per batcher turn before the batch takes its next step (long prompts arriving
#: together would otherwise stall everyone's decoding).
PREFILL_TOKENS_PER_TURN = 8192
_END = object()


def default_rows(device: torch.device) -> int:
    """How many rows a batch may hold: sampled continuations count one row each (a SEAKR call is k + 1)."""
    return 512 if device.type == "cuda" else 64


class NotBatched(Exception):
    """The model's cache cannot be batched; the job runs on its own instead (the reason is the message)."""


class _Row:
    """One live row of the batch: its place in the slots, and the token it feeds next at ``position``."""

    __slots__ = ("job", "index", "token", "position", "attention", "site")

    def __init__(self, job: _Job, index: int, attention: bool, site: Site | None) -> None:
        self.job, self.index, self.attention, self.site = job, index, attention, site
        self.token = 0
        self.position = 0


class _Job:
    """A call waiting in, or decoding in, the batch; its caller's thread runs what is posted to it."""

    rows_needed = 1

    def __init__(self, batcher: Batcher, rec: TraceRecorder | None, prompt_tokens: int) -> None:
        self.batcher = batcher
        self.rec = rec
        self.prompt_tokens = prompt_tokens
        self.rows: list[_Row] = []
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


class SpanJob(_Job):
    """One :meth:`Engine.generate` call: the per-token rules of ``Engine._loop`` applied to one row."""

    def __init__(self, batcher: Batcher, req: _Request, rec: TraceRecorder | None) -> None:
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
    def row(self) -> _Row:
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
        from explorer.engine.generation import _stop_after

        stop = "eos" if at_eos else _stop_after(req, self.detok.text, self.tokens)
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
        from explorer.engine.generation import Generation

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


class SampleJob(_Job):
    """One :func:`~explorer.engine.sampling.sample` call: the sampler's own rules over its k (+1) rows."""

    def __init__(self, batcher: Batcher, loop: _Loop) -> None:
        super().__init__(batcher, loop.rec, len(loop.prompt_ids))
        self.loop = loop
        self.rows_needed = len(loop.rows)
        self.site = batcher.step.site(loop.hidden) if loop.hidden is not None else None
        self.batch: list[_Row] = []
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
            if r.pending is None:
                token = r.ids[-1]
            else:
                token = r.pending.pop(0)
                r.feeding_end = not r.pending
            row = self.slot_of[id(r)]
            row.token, row.position = token, r.position
            r.position += 1
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
    from explorer.engine.captured import TOP_K_ALTERNATIVES

    values = packed.tolist()
    lp = values[1]
    probs = [v for v in values[3:3 + TOP_K_ALTERNATIVES] if v >= 0]
    ids = [int(v) for v in values[3 + TOP_K_ALTERNATIVES:3 + TOP_K_ALTERNATIVES + len(probs)]]
    import math

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


class Batcher:
    """The engine's shared decoding batch and the thread that steps it.

    ``max_rows`` bounds the rows decoding at once (a job that would exceed it waits; one larger
    than it runs when the batch is empty). ``mode`` is the decode step's (:data:`~explorer.engine.captured.MODES`).
    """

    def __init__(self, engine: Engine, *, max_rows: int | None = None, mode: str | None = None) -> None:
        self.engine = engine
        self.slots = SlotCache(engine.device)
        self.step = DecodeStep(engine, self.slots, mode or default_mode(engine.device))
        self.max_rows = max_rows or default_rows(engine.device)
        #: Why this model cannot decode in a shared batch (None: it can, or it is not known yet).
        self.unsupported: str | None = None
        self._verified = False
        self._cv = threading.Condition()
        self._pending: deque[_Job] = deque()
        self._live: list[_Row] = []
        self._leaving: list[_Row] = []
        self._thread: threading.Thread | None = None
        self._closed = False
        #: Counters for benchmarks and the status line: steps taken, row-steps, the largest batch.
        self.steps = 0
        self.row_steps = 0
        self.largest = 0

    # -- what callers use ------------------------------------------------------------------------------
    def accepts(self, attention: bool) -> str | None:
        """Why a call cannot join the batch (None: it can)."""
        if self.unsupported:
            return self.unsupported
        if attention and not self.engine.probe.mode.startswith("probe:"):
            return "the model's attention weights are read through output_attentions, not the probe a batch needs"
        return None

    def generate(self, req: _Request, rec: TraceRecorder | None) -> Generation | None:
        """The span ``req`` decoded in the batch, or None when it must decode alone (a note says why)."""
        reason = self.accepts(req.attention)
        if reason is None:
            try:
                return self._submit(SpanJob(self, req, rec)).wait()
            except NotBatched as exc:
                reason = str(exc)
        note_unbatched(rec, reason)
        return None

    def sample(self, loop: _Loop) -> bool:
        """Run a sampler's rows in the batch; False when they must run alone (a note says why)."""
        reason = self.accepts(False)
        if reason is None:
            try:
                self._submit(SampleJob(self, loop)).wait()
                return True
            except NotBatched as exc:
                reason = str(exc)
        note_unbatched(loop.rec, reason)
        return False

    def close(self) -> None:
        """Stop the batcher thread once the jobs it holds are done."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join()

    @property
    def live_rows(self) -> int:
        return len(self._live)

    @property
    def waiting(self) -> int:
        return len(self._pending)

    def _submit(self, job: _Job) -> _Job:
        with self._cv:
            if self._closed:
                raise NotBatched("the engine's batch is closed")
            self._pending.append(job)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="decode-batch", daemon=True)
                self._thread.start()
            self._cv.notify_all()
        return job

    # -- rows --------------------------------------------------------------------------------------------
    def check(self, cache: Any, out: Any, prompt_ids: list[int]) -> None:
        """Refuse (once and for all) a model whose cache the slots cannot hold or whose step disagrees.

        The first prompt also checks the slot step numerically against the model's own cached step
        (one token fed both ways), so a family whose attention does not use the cache as assumed is
        caught before any run depends on it.
        """
        reason = plain_layers(cache)
        if reason is None and not self._verified:
            reason = self._verify(cache, out, prompt_ids)
        if reason is not None:
            self.unsupported = reason
            raise NotBatched(reason)

    def _verify(self, cache: Any, out: Any, prompt_ids: list[int]) -> str | None:
        engine = self.engine
        token = int(torch.argmax(out.logits[0, -1]))
        p = len(prompt_ids)
        try:
            reference = engine.forward_batch(torch.tensor([[token]], device=engine.device), copy.deepcopy(cache))
            expected = reference.logits[0, -1].float()
            self.slots.ensure(max(1, len(self._live) + 1), p + 1, like=cache)
            index = len(self._live)
            self.slots.load(index, cache, p)
            saved = self.step.mode
            self.step.mode = "eager"
            try:
                ids = [r.token for r in self._live] + [token]
                positions = [r.position for r in self._live] + [p]
                got = self.step.run(ids, positions, attention=False, sites=()).logits[index].float()
            finally:
                self.step.mode = saved
        except Exception as exc:  # noqa: BLE001 - any failure means this family cannot use the slots
            return f"the model does not decode over a shared slot cache ({type(exc).__name__}: {exc})"
        scale = 1.0 + float(expected.abs().max())
        tolerance = 1e-3 if expected.dtype == torch.float32 and engine.model.dtype == torch.float32 else 5e-2
        gap = float((got - expected).abs().max())
        if gap > tolerance * scale:
            return f"its logits over a shared slot cache differ from its own cached step by {gap:.3g}"
        self._verified = True
        return None

    def join(self, job: _Job, cache: Any, length: int, *, attention: bool, site: Site | None) -> _Row:
        """A new row for ``job`` holding the prefilled ``cache`` (its first ``length`` positions)."""
        index = len(self._live)
        self.slots.ensure(index + 1, length + 1, like=cache)
        self.slots.load(index, cache, length)
        row = _Row(job, index, attention, site)
        self._live.append(row)
        job.rows.append(row)
        return row

    def join_copy(self, job: _Job, source: _Row) -> _Row:
        """A new row for ``job`` holding what ``source`` holds (samples sharing one prompt)."""
        index = len(self._live)
        self.slots.ensure(index + 1, 1)
        self.slots.copy_row(source.index, index)
        row = _Row(job, index, source.attention, source.site)
        self._live.append(row)
        job.rows.append(row)
        return row

    def leave(self, row: _Row) -> None:
        """Free ``row``. Rows are only marked here and compacted after the turn (:meth:`_compact`): the
        step's outputs are indexed by the rows' places during it."""
        if row.index < 0 or row in self._leaving:
            return
        self._leaving.append(row)
        if row in row.job.rows:
            row.job.rows.remove(row)

    def leave_all(self, job: _Job) -> None:
        for row in list(job.rows):
            self.leave(row)

    def _compact(self) -> None:
        """Fill the places of the rows that left with the last live rows, so live rows are ``[:n]`` again."""
        if not self._leaving:
            return
        holes = sorted(r.index for r in self._leaving)
        for row in self._leaving:
            row.index = -1
        self._leaving.clear()
        live = [r for r in self._live if r.index >= 0]
        n = len(live)
        movers = [r for r in live if r.index >= n]
        for hole, row in zip((h for h in holes if h < n), movers, strict=True):
            self.slots.move(row.index, hole)
            row.index = hole
        self._live = sorted(live, key=lambda r: r.index)

    # -- the batcher thread -------------------------------------------------------------------------
    def _serve(self) -> None:
        with torch.inference_mode():
            while True:
                with self._cv:
                    while not self._pending and not self._live and not self._closed:
                        self._cv.wait()
                    if self._closed and not self._pending and not self._live:
                        return
                    admitted = self._admit()
                try:
                    for job in admitted:
                        self._start(job)
                    if self._live:
                        self._step()
                except Exception as exc:  # noqa: BLE001 - never leave a caller waiting on a dead thread
                    log.exception("the decode batch failed")
                    for job in {id(r.job): r.job for r in self._live}.values():
                        job.end(error=exc)
                    self._compact()

    def _admit(self) -> list[_Job]:
        """Jobs to start this turn, in arrival order: as many as fit, and one alone when nothing runs."""
        taken: list[_Job] = []
        rows, tokens = len(self._live), 0
        while self._pending:
            job = self._pending[0]
            fits = rows + job.rows_needed <= self.max_rows and tokens + job.prompt_tokens <= PREFILL_TOKENS_PER_TURN
            if not fits and (rows or taken):
                break
            taken.append(self._pending.popleft())
            rows += job.rows_needed
            tokens += job.prompt_tokens
        return taken

    def _start(self, job: _Job) -> None:
        try:
            with self.engine.lock:
                job.start()
        except BaseException as exc:  # noqa: BLE001 - this job fails alone
            job.end(error=exc)
        self._compact()

    def _step(self) -> None:
        rows = list(self._live)
        needed = max(r.position for r in rows) + 1
        self.slots.ensure(len(rows), needed)
        attention = any(r.attention for r in rows)
        sites = tuple({r.site for r in rows if r.site is not None})
        try:
            with self.engine.lock:
                result = self.step.run([r.token for r in rows], [r.position for r in rows], attention=attention,
                                       sites=sites)
        except Exception as exc:  # noqa: BLE001 - the shared pass failed: every job in it learns why
            log.exception("a batched decode step failed")
            for job in {id(r.job): r.job for r in rows}.values():
                job.end(error=exc)
            self._compact()
            return
        self.steps += 1
        self.row_steps += len(rows)
        self.largest = max(self.largest, len(rows))
        jobs = list({id(r.job): r.job for r in rows}.values())
        for job in jobs:
            if job.finished:
                continue
            try:
                job.advance(result.logits, result.packed)
            except BaseException as exc:  # noqa: BLE001 - one job's rules failed: that job alone ends
                job.end(error=exc)
        self._compact()


def enable(engine: Engine, *, max_rows: int | None = None, mode: str | None = None) -> Batcher:
    """Give ``engine`` a batcher (the one it has, if any): concurrent runs then share its decode steps."""
    if engine.batcher is None:
        engine.batcher = Batcher(engine, max_rows=max_rows, mode=mode)
    elif max_rows is not None:
        engine.batcher.max_rows = max_rows
    return engine.batcher


def disable(engine: Engine) -> None:
    """Stop ``engine``'s batcher; spans decode one at a time again."""
    batcher, engine.batcher = engine.batcher, None
    if batcher is not None:
        batcher.close()
