"""One decode step over every live row of a :class:`~explorer.engine.slots.SlotCache`, signals included.

The step feeds one token per row and computes, on the device and in the same call, everything a
token's signals need: the greedy choice, the chosen token's log-probability, the entropy and the
top-5 of the RAW next-token distribution, the probed layer's head-mean attention row folded into
each row's running amax, and the captured hidden state of each requested site. Only a small
``(rows, 13)`` table comes back to the host per step; logits stay on the device for the rows
that sample.

Three ways to run the same step (:data:`MODES`):

* ``eager``: the step's Python runs every time (CPU default; any backend).
* ``graph``: on CUDA, the step is captured once per (batch bucket, capacity, signals) into a CUDA
  graph and replayed: one launch per token instead of hundreds of kernel launches from Python,
  which is what holds a batch-1 decode far below the GPU's weight-bandwidth limit. The graph
  replays exactly the kernels of the eager step, so its tokens and signals are the eager step's
  bit for bit; nothing is compiled, so the first step of a shape costs two eager passes and a
  capture (milliseconds), not minutes.
* ``compile``: ``torch.compile(fullgraph=True)`` of the same step (inductor, or the backend named
  by ``EXPLORER_COMPILE_BACKEND``); with ``fullgraph`` a step that cannot be traced as ONE graph
  fails instead of silently splitting. It is the route that runs on CPU too, which is how the
  captured step is tested without a GPU.

A step that cannot be captured (an operation that synchronises with the host, a backend that does
not allow it) falls back to ``eager`` for the rest of the engine's life, and :attr:`fallback`
says why; runs that decode afterwards carry that as a note in their trace.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from explorer.engine.hidden import HiddenCapture, HiddenSpec
from explorer.engine.signals import TOP_K_ALTERNATIVES
from explorer.engine.slots import SlotCache, SlotView

MODES = ("eager", "graph", "compile")
#: Columns of the per-row table a step returns: chosen id, its log-probability, entropy, top-5 probs, top-5 ids.
PACKED = 3 + 2 * TOP_K_ALTERNATIVES


def pack_signals(logits: torch.Tensor) -> torch.Tensor:
    """The per-row signal table of a ``(rows, vocab)`` RAW logits batch, as :func:`step_stats` computes it.

    Greedy choice on the logits as they are (argmax); the rest in float32: log-softmax, entropy
    ``-(p log p)`` with 0 log 0 = 0, and the top-5 probabilities with their ids.
    """
    chosen = torch.argmax(logits, dim=-1)
    logp = torch.log_softmax(logits.float(), dim=-1)
    p = logp.exp()
    entropy = -(p * logp).nan_to_num().sum(dim=-1)
    top = torch.topk(p, min(TOP_K_ALTERNATIVES, p.shape[-1]), dim=-1)
    picked = logp.gather(1, chosen[:, None])[:, 0]
    width = top.values.shape[1]
    out = torch.full((logits.shape[0], PACKED), -1.0, device=logits.device)
    out[:, 0] = chosen.float()
    out[:, 1] = picked
    out[:, 2] = entropy
    out[:, 3:3 + width] = top.values
    out[:, 3 + TOP_K_ALTERNATIVES:3 + TOP_K_ALTERNATIVES + width] = top.indices.float()
    return out


@dataclass(frozen=True)
class Site:
    """A hidden-state capture point: a resolved layer index and site (what :class:`HiddenSpec` names)."""

    layer: int
    site: str


def resolve_site(model: Any, spec: HiddenSpec) -> tuple[Site, HiddenCapture]:
    capture = HiddenCapture(model, spec)
    return Site(capture.layer_index, capture.site), capture


@dataclass
class StepResult:
    """What one step leaves: logits on the device (valid until the next step) and the host table."""

    logits: torch.Tensor
    packed: torch.Tensor


def default_mode(device: torch.device) -> str:
    """``EXPLORER_DECODE`` (eager, graph or compile), else graph on CUDA and eager elsewhere."""
    chosen = os.environ.get("EXPLORER_DECODE", "").strip().lower()
    if chosen in MODES:
        return chosen
    return "graph" if device.type == "cuda" else "eager"


class DecodeStep:
    """Runs the step for ``rows`` live rows of ``slots``; captures or compiles it when asked."""

    def __init__(self, engine: Any, slots: SlotCache, mode: str = "eager") -> None:
        if mode not in MODES:
            raise ValueError(f"decode mode {mode!r} is unknown; use one of {', '.join(MODES)}")
        if mode == "graph" and slots.device.type != "cuda":
            mode = "eager"
        self.engine = engine
        self.model = engine.model
        self.slots = slots
        self.mode = mode
        #: Why the step runs eagerly although another mode was asked for (None while it does not).
        self.fallback: str | None = None
        self._inputs_for = -1
        self.ids = self.positions = self.columns = None
        self._graphs: dict[tuple, tuple[Any, tuple[torch.Tensor, torch.Tensor]]] = {}
        self._pool = None
        self._compiled: Any = None
        self._sites: dict[Site, HiddenCapture] = {}
        self._hooks: list[Any] = []  # the handles of the hooks put on the model, removed by close()
        self._live_sites: frozenset[Site] = frozenset()
        self._sink = self._fold  # one bound method, so a compiled step sees the same sink every time
        self.dtype = next(self.model.parameters()).dtype
        self.steps = 0
        #: Steps run as one compiled or captured graph, whose Python-side forward hooks do not run.
        self.graph_steps = 0

    # -- inputs --------------------------------------------------------------------------------------
    def _ensure_inputs(self) -> None:
        """Static input tensors sized to the slot buffers (reallocated, and graphs dropped, when they grow)."""
        if self._inputs_for == self.slots.generation:
            return
        device = self.slots.device
        self.ids = torch.zeros(self.slots.rows, dtype=torch.long, device=device)
        self.positions = torch.zeros(self.slots.rows, dtype=torch.long, device=device)
        self.columns = torch.arange(self.slots.capacity, device=device)
        self._graphs.clear()
        self._compiled = None
        self._inputs_for = self.slots.generation

    def site(self, spec: HiddenSpec) -> Site:
        """The capture point ``spec`` names on this model (its buffer and hook are made on first use).

        The hook stays on the module for the engine's life but copies only while a step that asked
        for its site runs (:attr:`_live_sites`), so prefills and other passes are untouched, and a
        compiled step sees the same hook every time (a new hook would force a recompile).
        """
        site, capture = resolve_site(self.model, spec)
        for known in self._sites:
            if known == site:
                return known  # the same object every time, so a compiled step's guards hold
        self.slots.hidden_buffer(site, int(self.model.config.hidden_size))
        self._hooks.append(capture.module.register_forward_hook(self._keeper(site)))
        self._sites[site] = capture
        return site

    def close(self) -> None:
        """Take this step's hooks off the model and drop its graphs: the model outlives the step (an engine
        whose batching is turned off and on again, other engines on the same weights), and a hook left
        behind would keep the step alive and run, and be traced, in every later pass."""
        for handle in self._hooks:
            handle.remove()
        self._hooks.clear()
        self._sites.clear()
        self._graphs.clear()
        self._compiled = None

    def capture_of(self, site: Site) -> HiddenCapture:
        return self._sites[site]

    def _keeper(self, site: Site) -> Any:
        def keep(_module: Any, _inputs: Any, output: Any) -> None:
            if site not in self._live_sites:
                return
            tensor = output[0] if isinstance(output, (tuple, list)) else output
            self.slots.hidden[site][:tensor.shape[0]].copy_(tensor[:, -1].float())

        return keep

    def _fold(self, weights: torch.Tensor) -> None:
        """The probe's sink during a step: fold each row's head-mean attention row into its running amax.

        A position's amax only takes rows of LATER tokens (columns before the fed token's position).
        """
        batch, capacity = weights.shape[0], weights.shape[-1]
        later = self.columns[None, :capacity] >= self.positions[:batch, None]
        row = weights.float().mean(dim=1)[:, -1]
        amax = self.slots.amax
        amax[:batch] = torch.maximum(amax[:batch], row.masked_fill(later, -1.0))

    # -- the step --------------------------------------------------------------------------------------
    def _forward(self, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The step's tensor work on rows ``[:batch]``: the forward pass over the slots and the signal table."""
        slots, model = self.slots, self.model
        ids, positions = self.ids[:batch], self.positions[:batch]
        capacity = slots.capacity
        seen = self.columns[None, :capacity] <= positions[:, None]
        mask = torch.zeros(batch, 1, 1, capacity, dtype=self.dtype, device=ids.device)
        mask = mask.masked_fill(~seen[:, None, None, :], torch.finfo(self.dtype).min)
        out = model(input_ids=ids[:, None], attention_mask=mask, position_ids=positions[:, None],
                    past_key_values=SlotView(slots, batch, positions), use_cache=True, logits_to_keep=1)
        logits = out.logits[:, -1]
        return logits, pack_signals(logits)

    def _compute(self, batch: int, attention: bool, sites: tuple[Site, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`_forward` with the probe's sink and the asked hidden sites switched on around it."""
        probe = self.engine.probe
        self._live_sites = frozenset(sites)
        probe.active, probe.sink = attention, self._sink if attention else None
        try:
            if self.mode == "compile":
                return self._compiled_step()(batch)
            return self._forward(batch)
        finally:
            probe.active, probe.sink = False, None
            self._live_sites = frozenset()

    def run(self, ids: list[int], positions: list[int], *, attention: bool, sites: tuple[Site, ...]) -> StepResult:
        """Feed ``ids[i]`` at ``positions[i]`` to row ``i`` of the live rows ``[:len(ids)]``."""
        self._ensure_inputs()
        rows = len(ids)
        sites = tuple(sorted(sites, key=lambda s: (s.layer, s.site)))
        self.steps += 1
        if self.mode == "graph":
            batch = _bucket(rows, self.slots.rows)
            self._load(ids, positions, batch)
            try:
                logits, packed = self._replay(batch, attention, sites)
                self.graph_steps += 1
            except Exception as exc:  # noqa: BLE001 - any capture failure: say why, decode eagerly from now on
                self._give_up(exc)
                logits, packed = self._compute(rows, attention, sites)
        else:
            self._load(ids, positions, rows)
            try:
                logits, packed = self._compute(rows, attention, sites)
                self.graph_steps += self.mode == "compile"
            except Exception as exc:
                if self.mode != "compile":
                    raise
                self._give_up(exc)  # a step that cannot be compiled as one graph runs eagerly from now on
                logits, packed = self._compute(rows, attention, sites)
        return StepResult(logits[:rows], packed[:rows].cpu())

    def _load(self, ids: list[int], positions: list[int], batch: int) -> None:
        rows = len(ids)
        self.ids[:rows].copy_(torch.tensor(ids, dtype=torch.long))
        self.positions[:rows].copy_(torch.tensor(positions, dtype=torch.long))
        if batch > rows:  # padding rows are free rows: they write column 0 of themselves and are never read
            self.ids[rows:batch].zero_()
            self.positions[rows:batch].zero_()

    def _give_up(self, exc: Exception) -> None:
        route = "captured CUDA graph" if self.mode == "graph" else "compiled graph"
        first = str(exc).splitlines()[0][:200] if str(exc) else "no message"
        self.fallback = (f"the decode step could not run as a {route} ({type(exc).__name__}: {first}), so it runs "
                         "step by step from Python: the same tokens and signals, more slowly")
        self.mode = "eager"
        self._graphs.clear()
        self._compiled = None

    def _replay(self, batch: int, attention: bool, sites: tuple[Site, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        key = (batch, self.slots.capacity, attention, sites)
        held = self._graphs.get(key)
        if held is None:
            held = self._capture(batch, attention, sites)
            self._graphs[key] = held
        graph, outputs = held
        graph.replay()
        return outputs

    def _capture(self, batch: int, attention: bool, sites: tuple[Site, ...]) -> tuple[Any, tuple]:
        """Warm up on a side stream (lazy initialisations must not happen during capture), then capture.

        The warm-up passes write the same keys, values, amax and hidden states that the replay
        writes right after (the inputs are the same), so running them changes nothing.
        """
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                self._compute(batch, attention, sites)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        # thread_local: a run's thread touching CUDA meanwhile (outside the engine's lock) cannot spoil the capture.
        with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
            outputs = self._compute(batch, attention, sites)
        return graph, outputs

    def _compiled_step(self) -> Any:
        if self._compiled is None:
            backend = os.environ.get("EXPLORER_COMPILE_BACKEND", "").strip() or "inductor"
            options: dict[str, Any] = {"fullgraph": True, "dynamic": False, "backend": backend}
            if backend == "inductor" and self.slots.device.type == "cuda":
                options["mode"] = "reduce-overhead"
            self._compiled = torch.compile(self._forward, **options)
        return self._compiled


def _bucket(rows: int, limit: int) -> int:
    size = 1
    while size < rows:
        size *= 2
    return min(size, limit)
