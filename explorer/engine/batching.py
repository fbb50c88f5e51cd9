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
import threading
from collections import deque
from typing import TYPE_CHECKING, Any

import torch

from explorer.engine.batch_jobs import Job, NotBatched, Row, SampleJob, SpanJob, note_unbatched
from explorer.engine.captured import DecodeStep, Site, default_mode
from explorer.engine.slots import SlotCache, plain_layers
from explorer.trace import TraceRecorder

if TYPE_CHECKING:
    from explorer.engine.generation import Engine
    from explorer.engine.sampling import _Loop
    from explorer.engine.spans import Generation, SpanRequest

__all__ = ["Batcher", "NotBatched", "default_rows", "disable", "enable"]

log = logging.getLogger(__name__)

#: Prompt tokens encoded per batcher turn before the batch takes its next step (long prompts arriving
#: together would otherwise stall everyone's decoding).
PREFILL_TOKENS_PER_TURN = 8192


def default_rows(device: torch.device) -> int:
    """How many rows a batch may hold: sampled continuations count one row each (a SEAKR call is k + 1)."""
    return 512 if device.type == "cuda" else 64


class Batcher:
    """The engine's shared decoding batch and the thread that steps it.

    ``max_rows`` bounds the rows decoding at once (a job that would exceed it waits; one larger
    than it runs when the batch is empty). ``mode`` is the decode step's (:data:`~explorer.engine.captured.MODES`).
    """

    def __init__(self, engine: Engine, *, max_rows: int | None = None, mode: str | None = None,
                 samples: bool | None = None) -> None:
        self.engine = engine
        #: Whether sampled continuations join the shared batch. On a CPU they decode alone by default:
        #: the sampler already decodes its k + 1 rows as one batch that reads the shared prompt once
        #: (and takes it from the prefix cache), which the shared batch would copy into every row.
        self.samples = samples if samples is not None else engine.device.type == "cuda"
        self.slots = SlotCache(engine.device)
        self.step = DecodeStep(engine, self.slots, mode or default_mode(engine.device))
        self.max_rows = max_rows or default_rows(engine.device)
        #: Why this model cannot decode in a shared batch (None: it can, or it is not known yet).
        self.unsupported: str | None = None
        self._verified = False
        self._cv = threading.Condition()
        self._pending: deque[Job] = deque()
        self._live: list[Row] = []
        self._leaving: list[Row] = []
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

    def generate(self, req: SpanRequest, rec: TraceRecorder | None) -> Generation | None:
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
        if not self.samples:
            return False  # its own batch is the faster way here, not a limitation: nothing to note
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
        self.step.close()

    @property
    def live_rows(self) -> int:
        """Rows still decoding. A finished job's rows are marked leaving before its caller wakes and compacted
        after the turn, so they are not counted from the moment they are marked."""
        return len(self._live) - len(self._leaving)

    @property
    def waiting(self) -> int:
        return len(self._pending)

    def _submit(self, job: Job) -> Job:
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

    def join(self, job: Job, cache: Any, length: int, *, attention: bool, site: Site | None) -> Row:
        """A new row for ``job`` holding the prefilled ``cache`` (its first ``length`` positions)."""
        index = len(self._live)
        self.slots.ensure(index + 1, length + 1, like=cache)
        self.slots.load(index, cache, length)
        row = Row(job, index, attention, site)
        self._live.append(row)
        job.rows.append(row)
        return row

    def join_copy(self, job: Job, source: Row) -> Row:
        """A new row for ``job`` holding what ``source`` holds (samples sharing one prompt)."""
        index = len(self._live)
        self.slots.ensure(index + 1, 1)
        self.slots.copy_row(source.index, index)
        row = Row(job, index, source.attention, source.site)
        self._live.append(row)
        job.rows.append(row)
        return row

    def leave(self, row: Row) -> None:
        """Free ``row``. Rows are only marked here and compacted after the turn (:meth:`_compact`): the
        step's outputs are indexed by the rows' places during it."""
        if row.index < 0 or row in self._leaving:
            return
        self._leaving.append(row)
        if row in row.job.rows:
            row.job.rows.remove(row)

    def leave_all(self, job: Job) -> None:
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

    def _admit(self) -> list[Job]:
        """Jobs to start this turn, in arrival order: as many as fit, and one alone when nothing runs."""
        taken: list[Job] = []
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

    def _start(self, job: Job) -> None:
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


def enable(engine: Engine, *, max_rows: int | None = None, mode: str | None = None,
           samples: bool | None = None) -> Batcher:
    """Give ``engine`` a batcher (the one it has, if any): concurrent runs then share its decode steps.

    ``samples``: whether sampled continuations join the batch (default: on CUDA only, :attr:`Batcher.samples`)."""
    if engine.batcher is None:
        engine.batcher = Batcher(engine, max_rows=max_rows, mode=mode, samples=samples)
    else:
        if max_rows is not None:
            engine.batcher.max_rows = max_rows
        if samples is not None:
            engine.batcher.samples = samples
    return engine.batcher


def disable(engine: Engine) -> None:
    """Stop ``engine``'s batcher; spans decode one at a time again."""
    batcher, engine.batcher = engine.batcher, None
    if batcher is not None:
        batcher.close()
