"""The one record every run produces.

A :class:`Trace` is versioned and JSON-serialisable. It holds the question, the method and its
full config, a fingerprint of the model, and an ordered list of :class:`Event` objects:
generated spans with their per-token signals, triggers, queries, retrievals, truncations,
continuations, uncertainty estimates, filter verdicts, classifier calls and the answer. The UI,
the store, the evaluation and the exports read traces only; nothing downstream recomputes a
signal, so everything they show must be in here.

Events are small typed dicts (``kind`` + ``payload``) rather than one class per kind so that a
new method can add a kind without touching readers that do not care about it; the required keys
of each known kind are checked by :meth:`Trace.validate`.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

#: 2: per-token signals under ``signals: {id: value}`` (version 1 had them as flat token keys;
#: :meth:`Trace.from_dict` still reads version-1 traces and converts them).
TRACE_VERSION = 2
READABLE_VERSIONS = (1, 2)

#: Required payload keys per event kind. Extra keys are allowed and kept. The kinds every method
#: shares are listed here; a method adds its own with :func:`register_event_kind` in its own module
#: (BlendFilter's ``filter``, DR-RAG's ``classifier``, SEAKR's ``choice``).
EVENT_SCHEMA: dict[str, tuple[str, ...]] = {
    # A span of model output. ``tokens`` is a list of TokenSignal dicts; ``purpose`` says what the
    # span was for (draft, continuation, lookahead, answer, pseudo, augment, filter, ...).
    "generation": ("purpose", "text", "tokens"),
    # Retrieval decided to fire. ``span`` is the id of the generation event, ``token_index`` the
    # position inside it; ``signal``/``value``/``threshold`` say what fired it.
    "trigger": ("span", "token_index", "signal", "value", "threshold"),
    # The text sent to the retriever and where it came from (question, qfs, masked, window, ...).
    # A query blended from several texts also lists ``parts`` ({source, text, and the ``generation``
    # or ``passage`` it came from}); BlendFilter adds ``set`` (original / external / internal),
    # DR-RAG ``stage`` (1 or 2) and, in stage 2, ``anchor`` (the stage-1 passage concatenated).
    "query": ("text", "source"),
    # Passages returned for a query: ``hits`` is a list of Hit.to_dict(). BlendFilter adds ``set``;
    # DR-RAG adds ``stage`` and, in stage 2, ``anchor`` and ``candidates`` (the new passages' ids).
    "retrieval": ("query", "hits"),
    # Output cut: ``span`` and ``token_index`` (first discarded token), the kept and cut text.
    "truncation": ("span", "token_index", "kept_text", "discarded_text"),
    # Generation resumed with passages in the prompt: ``span`` is the new generation event id,
    # ``retrieval`` the id of the retrieval event whose passages it was given.
    "continuation": ("span", "retrieval"),
    # An uncertainty estimate (SEAKR's U and its alternatives) of one context: ``estimator``, ``value``
    # (None when it cannot be computed), ``context`` (step, rerank, answer-...), ``span`` (the greedy
    # generation event of the same batch); the Gram one adds ``samples``, ``eigenvalues``, ``valid``,
    # ``layer`` and ``site``.
    "uncertainty": ("estimator", "value", "context"),
    # Passages re-ordered by a signal other than the search engine's score: ``candidates`` (each with
    # its search ``rank``/``score`` and the signal's ``value``), ``chosen`` (a passage id).
    "rerank": ("candidates", "chosen"),
    # One retrieval decision with every unit's signal value, so another threshold can be replayed:
    # ``units`` (tokens, words or sentences with ``value``), ``compare`` (">" or "<"), ``fired``.
    "check": ("span", "signal", "threshold", "compare", "units", "fired"),
    # A selection of passages and the reason for it. ``passages`` may give each chosen passage's own
    # ``reason`` (and stage, anchor, sets), ``dropped`` the ids left out with theirs.
    "selection": ("passage_ids", "reason"),
    # The final answer: ``text`` is the full output, ``answer`` the extracted short answer.
    "answer": ("text", "answer"),
    # Free-form remark (fallbacks, degenerate cases the user should see).
    "note": ("message",),
}

#: What each registered kind is for, shown by readers that list kinds (and checked for duplicates).
EVENT_DOCS: dict[str, str] = {}


def register_event_kind(kind: str, required: tuple[str, ...], doc: str) -> None:
    """Add an event kind with its required payload keys; a kind is registered once (same keys: no-op).

    Call it at import time of the module that emits the kind, so a trace that uses it validates
    wherever that module is loaded.
    """
    held = EVENT_SCHEMA.get(kind)
    if held is not None and tuple(held) != tuple(required):
        raise ValueError(f"event kind {kind!r} is already registered with keys {held}; choose another name")
    EVENT_SCHEMA[kind] = tuple(required)
    EVENT_DOCS[kind] = doc


def _required_keys(kind: str) -> tuple[str, ...] | None:
    """The schema of ``kind``; a kind not registered yet loads the declared modules that register kinds
    (:mod:`explorer.extensions`: the methods and the fork replay), so a trace read from disk in a
    fresh process validates its method-specific events without this module importing any method."""
    if kind not in EVENT_SCHEMA:
        from explorer import extensions

        extensions.load()
    return EVENT_SCHEMA.get(kind)


#: ``interrupted``: the process stopped mid-run (killed, crashed); the trace ends at its last checkpoint.
STATUSES = ("running", "complete", "cancelled", "error", "interrupted")


class TokenSignal:
    """One generated token and the signals the engine measured for it.

    ``signals`` maps a registered signal id (:mod:`explorer.engine.token_signals`) to its value:
    ``prob``, ``entropy`` and ``logprob`` over the RAW next-token distribution, ``entropy_warped``
    over the distribution actually sampled from (None under greedy decoding), ``amax`` the
    largest last-layer attention this token received from later tokens (None until one exists),
    DRAGIN's ``content`` and ``rind``, and whatever a method registered and asked for. Signal
    values read as attributes too (``token.entropy``); keyword arguments beyond ``id``, ``text``
    and ``top`` are signals.
    """

    __slots__ = ("id", "text", "top", "signals")

    def __init__(self, id: int, text: str, top: list[tuple[str, float]] | None = None,  # noqa: A002
                 signals: dict[str, Any] | None = None, **values: Any) -> None:
        self.id = id
        self.text = text
        self.top = list(top or [])
        self.signals: dict[str, Any] = {**(signals or {}), **values}

    def __getattr__(self, name: str) -> Any:
        try:
            return object.__getattribute__(self, "signals")[name]
        except KeyError:
            raise AttributeError(f"this token has no signal {name!r}") from None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TokenSignal) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return f"TokenSignal(id={self.id}, text={self.text!r}, signals={self.signals!r})"

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "text": self.text, "top": [[t, float(p)] for t, p in self.top],
                "signals": dict(self.signals)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TokenSignal:
        d = token_dict_v2(d)
        return cls(d["id"], d["text"], [(t, p) for t, p in d.get("top") or []], d.get("signals") or {})


#: Keys of a version-1 token dict that were not signals.
_V1_TOKEN_KEYS = ("id", "text", "top")


def token_dict_v2(d: dict[str, Any]) -> dict[str, Any]:
    """A token dict in the version-2 layout; a version-1 dict (signals as flat keys) is converted."""
    if "signals" in d:
        return d
    return {"id": d.get("id"), "text": d.get("text", ""), "top": d.get("top") or [],
            "signals": {k: v for k, v in d.items() if k not in _V1_TOKEN_KEYS}}


def upgrade_events(version: int | None, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Event dicts of a trace of ``version`` in the current layout (version-1 generation tokens converted)."""
    if version == TRACE_VERSION:
        return events
    out = []
    for e in events:
        tokens = e.get("payload", {}).get("tokens") if e.get("kind") == "generation" else None
        if isinstance(tokens, list):
            e = {**e, "payload": {**e["payload"], "tokens": [token_dict_v2(t) for t in tokens]}}
        out.append(e)
    return out


@dataclass
class Event:
    """One step of a run, in order. ``id`` is the index in the trace's event list."""

    kind: str
    payload: dict[str, Any]
    id: int = -1
    step: int = 0
    t: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "step": self.step, "t": self.t, "payload": self.payload}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Event:
        return cls(kind=d["kind"], payload=d["payload"], id=d["id"], step=d.get("step", 0), t=d.get("t", 0.0))


@dataclass
class Costs:
    """What a run spent, in the units the papers report (their 'retrieval' and 'LLM call' columns)."""

    retrievals: int = 0
    llm_calls: int = 0
    forward_passes: int = 0
    generated_tokens: int = 0
    discarded_tokens: int = 0
    sampled_sequences: int = 0
    prompt_tokens: int = 0
    #: A fork's spans and searches served from its parent's trace (counted above too, but not run).
    replayed_spans: int = 0
    replayed_tokens: int = 0
    reused_retrievals: int = 0
    wall_time: dict[str, float] = field(default_factory=dict)

    @property
    def total_time(self) -> float:
        return float(sum(self.wall_time.values()))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["total_time"] = self.total_time
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Costs:
        d = {k: v for k, v in d.items() if k != "total_time"}
        return cls(**d)


@dataclass
class Trace:
    """A complete, self-describing record of one method run on one question."""

    question: str
    method: str
    variant: str
    config: dict[str, Any]
    model: dict[str, Any]
    corpus: dict[str, Any] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    answer: str | None = None
    output: str = ""
    costs: Costs = field(default_factory=Costs)
    status: str = "running"
    error: str | None = None
    gold: dict[str, Any] = field(default_factory=dict)
    #: Where each config value came from: "paper", "variant", "preset" or "user".
    config_sources: dict[str, str] = field(default_factory=dict)
    #: A fork's origin: ``parent`` (run id), ``root`` (the first run of its family), ``depth``,
    #: ``at`` (the point) and ``change`` (the intervention); None for a run that is not a fork.
    fork: dict[str, Any] | None = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    version: int = TRACE_VERSION

    # -- access ---------------------------------------------------------------------------
    def of_kind(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.kind == kind]

    def event(self, event_id: int) -> Event:
        return self.events[event_id]

    # -- (de)serialisation ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "run_id": self.run_id,
            "created_at": self.created_at,
            "question": self.question,
            "method": self.method,
            "variant": self.variant,
            "config": self.config,
            "config_sources": self.config_sources,
            "model": self.model,
            "corpus": self.corpus,
            "gold": self.gold,
            "status": self.status,
            "error": self.error,
            "answer": self.answer,
            "output": self.output,
            "costs": self.costs.to_dict(),
            "events": [e.to_dict() for e in self.events],
            **({"fork": self.fork} if self.fork is not None else {}),
        }

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trace:
        version = d.get("version")
        if version not in READABLE_VERSIONS:
            raise ValueError(f"trace version {version!r} is not supported "
                             f"(this explorer reads versions {', '.join(map(str, READABLE_VERSIONS))})")
        events = upgrade_events(version, d["events"])
        return cls(
            question=d["question"],
            method=d["method"],
            variant=d["variant"],
            config=d["config"],
            config_sources=d.get("config_sources", {}),
            model=d["model"],
            corpus=d.get("corpus", {}),
            events=[Event.from_dict(e) for e in events],
            answer=d.get("answer"),
            output=d.get("output", ""),
            costs=Costs.from_dict(d.get("costs", {})),
            status=d.get("status", "complete"),
            error=d.get("error"),
            gold=d.get("gold", {}),
            fork=d.get("fork"),
            run_id=d["run_id"],
            created_at=d["created_at"],
        )

    @classmethod
    def from_json(cls, text: str) -> Trace:
        return cls.from_dict(json.loads(text))

    def validate(self) -> None:
        """Raise ValueError naming the first event that breaks the schema."""
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {STATUSES}")
        for i, e in enumerate(self.events):
            if e.id != i:
                raise ValueError(f"event {i} has id {e.id}; ids must equal list positions")
            required = _required_keys(e.kind)
            if required is None:
                raise ValueError(f"event {i} has unknown kind {e.kind!r}")
            missing = [k for k in required if k not in e.payload]
            if missing:
                raise ValueError(f"event {i} ({e.kind}) lacks {missing}")
            for key in ("span", "retrieval"):
                ref = e.payload.get(key) if e.kind in ("trigger", "truncation", "continuation") else None
                if isinstance(ref, int) and not 0 <= ref < i + (1 if key == "span" else 0):
                    raise ValueError(f"event {i} ({e.kind}) refers to {key} {ref}, which is not an earlier event")
        json.dumps(self.to_dict())  # must serialise


class Timer:
    """A timed block whose duration is added to ``wall_time[name]`` (when given) as it ends."""

    def __init__(self, wall_time: dict[str, float] | None = None, name: str = "") -> None:
        self.wall_time, self.name = wall_time, name
        self.seconds = 0.0
        self._start = 0.0

    def __enter__(self) -> Timer:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._start
        if self.wall_time is not None:
            self.wall_time[self.name] = self.wall_time.get(self.name, 0.0) + self.seconds


def phase(rec: TraceRecorder | None, name: str) -> Timer:
    """``rec.phase(name)``, or an untracked timer for work done without a recorder."""
    return rec.phase(name) if rec is not None else Timer()


class Cancelled(Exception):
    """Raised inside a run when the user pressed Cancel; the partial trace is kept."""


Listener = Callable[[str, dict[str, Any]], None]


class TraceRecorder:
    """Builds a trace while a method runs, and tells listeners (the UI) as things happen.

    Listeners receive ``("event", event_dict)`` for every event, ``("amend", {"id", "kind",
    "fields"})`` when a method adds to an event it recorded earlier (:meth:`amend`), and
    ``("token", {...})`` for every token while it streams, so a browser can show tokens before a
    span is complete. Listeners get copies: what they see changes only through these messages.
    ``cancel`` is checked by the engine between tokens.
    """

    def __init__(self, trace: Trace, listeners: list[Listener] | None = None,
                 cancel: threading.Event | None = None) -> None:
        self.trace = trace
        self.listeners = list(listeners or [])
        self.cancel = cancel or threading.Event()
        self.step = 0
        #: A fork's :class:`~explorer.forks.replay.Replay` (the parent's trace served until the fork point).
        self.replay: Any = None
        self._t0 = time.perf_counter()

    @property
    def costs(self) -> Costs:
        return self.trace.costs

    def add(self, kind: str, **payload: Any) -> Event:
        """Append an event of ``kind`` and notify listeners; returns it (its ``id`` is set)."""
        event = Event(kind=kind, payload=payload, id=len(self.trace.events), step=self.step,
                      t=round(time.perf_counter() - self._t0, 6))
        self.trace.events.append(event)
        self._notify("event", {**event.to_dict(), "payload": dict(payload)})
        return event

    def amend(self, event_id: int, **fields: Any) -> Event:
        """Add or replace payload ``fields`` of an earlier event and tell listeners; returns the event.

        For facts known only after the event was recorded (which stage a retrieval belonged to,
        which query set it answered): the stored trace, the journal and the streaming view all
        receive the change.
        """
        if not 0 <= event_id < len(self.trace.events):
            raise ValueError(f"cannot amend event {event_id}: the trace has {len(self.trace.events)} events")
        event = self.trace.events[event_id]
        event.payload.update(fields)
        self._notify("amend", {"id": event.id, "kind": event.kind, "fields": dict(fields)})
        return event

    def token(self, span_purpose: str, token: TokenSignal) -> None:
        """Stream one token to listeners (not stored here; the generation event stores it)."""
        self._notify("token", {"purpose": span_purpose, "step": self.step, **token.to_dict()})

    def check_cancel(self) -> None:
        if self.cancel.is_set():
            raise Cancelled()

    def phase(self, name: str) -> Timer:
        """Time a phase (generation, retrieval, ...) into ``costs.wall_time[name]``; the one way costs are timed.

        ``with rec.phase("retrieval") as timer:`` ... ``timer.seconds`` is the block's duration.
        """
        return Timer(self.trace.costs.wall_time, name)

    def _notify(self, kind: str, data: dict[str, Any]) -> None:
        for listener in self.listeners:
            listener(kind, data)
