"""What a fork changes and where: a point in the parent's trace and one intervention.

A fork replays its parent's trace exactly up to a point and then continues live with one
change. The point is a generated token (a generation event id and a token index in it) or a
retrieval (its retrieval event id). :func:`resolve` checks the plan against the parent and
turns it into a :class:`Divergence`: the call of the method (a check, a generation or a search)
at which the fork stops replaying, and what it does differently there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from explorer import naming
from explorer.errors import ConfigError
from explorer.trace import Event, Trace

#: The interventions, in the order the UI offers them.
CHANGES = ("force_retrieval", "suppress_retrieval", "edit_query", "edit_passages", "set_params", "none")

#: Which changes take a token and which a retrieval as their point.
TOKEN_CHANGES = ("force_retrieval", "set_params", "none")
RETRIEVAL_CHANGES = ("suppress_retrieval", "edit_query", "edit_passages", "none")

#: Checks on whole words or sentences built by the authors' rules (DRAGIN's reference variant, ETC): the
#: query is built from the words that crossed the threshold, so a token cannot be forced into them
#: (their retrievals can still be suppressed or edited).
_UNFORCEABLE_UNITS = ("word", "sentence")


@dataclass(frozen=True)
class ForkPoint:
    """Where a fork diverges: ``span`` + ``token`` (a generated token) or ``retrieval`` (an event id)."""

    span: int | None = None
    token: int = 0
    retrieval: int | None = None

    def to_dict(self) -> dict[str, Any]:
        if self.retrieval is not None:
            return {"retrieval": self.retrieval}
        return {"span": self.span, "token": self.token}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ForkPoint:
        if d.get("retrieval") is not None:
            return cls(retrieval=int(d["retrieval"]))
        if d.get("span") is None:
            raise ConfigError("a fork point needs a span (generation event id) or a retrieval event id",
                              where="fork point", fix="give --at SPAN:TOKEN or --retrieval ID")
        return cls(span=int(d["span"]), token=int(d.get("token") or 0))

    def describe(self) -> str:
        return naming.event("retrieval", self.retrieval) if self.retrieval is not None else \
            naming.token(self.span, self.token)


@dataclass(frozen=True)
class ForkChange:
    """One intervention. ``query`` is the forced or edited query (a forced retrieval without one uses
    the method's own query rule); ``passages`` the passage ids the model is given instead of the
    retrieval's, in order; ``params`` the config values changed from the point on."""

    kind: str = "none"
    query: str | None = None
    passages: tuple[str, ...] | None = None
    params: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind}
        if self.query is not None:
            d["query"] = self.query
        if self.passages is not None:
            d["passages"] = list(self.passages)
        if self.params:
            d["params"] = dict(self.params)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ForkChange:
        kind = str(d.get("kind") or "none")
        if kind not in CHANGES:
            raise ConfigError(f"unknown fork change {kind!r}", where="fork change",
                              fix=f"use one of {', '.join(CHANGES)}")
        passages = d.get("passages")
        return cls(kind=kind, query=d.get("query"),
                   passages=tuple(str(p) for p in passages) if passages is not None else None,
                   params=dict(d.get("params") or {}))

    def describe(self) -> str:
        if self.kind == "force_retrieval":
            return "retrieval forced" + (f" with the query {self.query!r}" if self.query else "")
        if self.kind == "suppress_retrieval":
            return "retrieval suppressed"
        if self.kind == "edit_query":
            return f"query edited to {self.query!r}"
        if self.kind == "edit_passages":
            return f"passages set to {', '.join(self.passages or ()) or 'none'}"
        if self.kind == "set_params":
            return "parameters set: " + ", ".join(f"{k}={v}" for k, v in self.params.items())
        return "no change"


@dataclass(frozen=True)
class ForkPlan:
    """A fork of run ``parent`` at ``point`` with ``change``."""

    parent: str
    point: ForkPoint
    change: ForkChange = field(default_factory=ForkChange)

    def to_dict(self) -> dict[str, Any]:
        return {"parent": self.parent, "at": self.point.to_dict(), "change": self.change.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ForkPlan:
        return cls(parent=str(d["parent"]), point=ForkPoint.from_dict(d.get("at") or {}),
                   change=ForkChange.from_dict(d.get("change") or {}))

    def describe(self) -> str:
        return f"{self.change.describe()} at {self.point.describe()}"


@dataclass(frozen=True)
class Divergence:
    """Where the replay stops and what happens there.

    ``hook`` is the method's call that diverges: ``check`` (the retrieval decision on generation
    event ``event``), ``generate`` (the generation that would be event ``event``) or ``search``
    (the search whose retrieval event would be ``event``). ``fired`` is the unit a forced check
    fires at (None: suppressed); ``override`` says whether the check's decision is replaced.
    """

    hook: str
    event: int
    override: bool = False
    fired: int | None = None


_AT = re.compile(r"^\s*(\d+)\s*(?::\s*(\d+)\s*)?$")


def parse_at(text: str) -> ForkPoint:
    """``SPAN:TOKEN`` (or ``SPAN``) as typed on the command line."""
    m = _AT.match(text or "")
    if not m:
        raise ConfigError(f"{text!r} is not SPAN:TOKEN", where="--at",
                          fix="give the generation event id and the token index in it, e.g. --at 7:12")
    return ForkPoint(span=int(m.group(1)), token=int(m.group(2) or 0))


def _event(parent: Trace, event_id: int, kind: str, what: str) -> Event:
    if not 0 <= event_id < len(parent.events) or parent.events[event_id].kind != kind:
        ids = [e.id for e in parent.events if e.kind == kind]
        shown = ", ".join(map(str, ids[:20])) + (" ..." if len(ids) > 20 else "")
        raise ConfigError(f"event {event_id} of run {parent.run_id[:12]} is not a {kind} event", where=what,
                          fix=f"choose one of its {kind} events: {shown or 'it has none'}")
    return parent.events[event_id]


def _check_of(parent: Trace, span: int) -> Event | None:
    return next((e for e in parent.events if e.kind == "check" and e.payload.get("span") == span), None)


def _unit_of(check: Event, token: int) -> int:
    """The index of the check's unit holding ``token`` (a token unit, a ranged unit, or the step)."""
    p = check.payload
    units = p.get("units") or []
    unit = p.get("unit", "token")
    if unit == "step":
        return 0
    if len(units) == 1 and not isinstance(units[0].get("tokens"), list):
        return 0  # one decision on the whole span (TARG's draft, Probing-RAG's answer): any of its tokens
    for i, u in enumerate(units):
        rng = u.get("tokens")
        if isinstance(rng, list) and len(rng) == 2 and int(rng[0]) <= token < int(rng[1]):
            return i
    if unit == "token" and token < len(units):
        return token
    raise ConfigError(f"token {token} of span {p.get('span')} is not among the {len(units)} units its check decided on",
                      where="fork point", fix="choose a token the method checked (the look-ahead sentence for FLARE)")


def _decision_before(parent: Trace, query_id: int) -> Event | None:
    """The check that led to the search whose query event is ``query_id`` (none for scheduled searches).

    Its trigger names it where the method records one; otherwise (Probing-RAG) it is the last check
    since the previous retrieval that fired."""
    fired_check = None
    for e in reversed(parent.events[:query_id]):
        if e.kind == "retrieval":
            break
        if e.kind == "trigger":
            return _check_of(parent, e.payload.get("span"))
        if e.kind == "check" and e.payload.get("fired") is not None and fired_check is None:
            fired_check = e
    return fired_check


def resolve(parent: Trace, plan: ForkPlan) -> Divergence:
    """Check ``plan`` against ``parent``; the divergence it makes. Every refusal says what to choose instead."""
    point, change = plan.point, plan.change
    if point.retrieval is not None:
        if change.kind not in RETRIEVAL_CHANGES:
            raise ConfigError(f"{change.kind} takes a token, not a retrieval", where="fork point",
                              fix="give --at SPAN:TOKEN")
        _event(parent, point.retrieval, "retrieval", "fork point")
        if change.kind in ("edit_query",) and not (change.query or "").strip():
            raise ConfigError("the edited query is empty", where="query", fix="type the query to search with")
        if change.kind == "suppress_retrieval":
            check = _decision_before(parent, point.retrieval - 1)
            if check is not None:
                return Divergence("check", check.payload["span"], override=True, fired=None)
        return Divergence("search", point.retrieval)
    if change.kind not in TOKEN_CHANGES:
        raise ConfigError(f"{change.kind} acts on a retrieval, not a token", where="fork point",
                          fix="give --retrieval with the retrieval event id")
    span = _event(parent, int(point.span if point.span is not None else -1), "generation", "fork point")
    n = len(span.payload.get("tokens") or [])
    if not 0 <= point.token < max(n, 1):
        raise ConfigError(f"span {span.id} has {n} tokens; token {point.token} is outside it", where="fork point",
                          fix=f"choose a token from 0 to {max(n - 1, 0)}")
    if change.kind == "set_params":
        if not change.params:
            raise ConfigError("no parameter to change", where="params", fix="give NAME=VALUE, e.g. threshold=0.8")
        return Divergence("generate", span.id)
    check = _check_of(parent, span.id)
    if change.kind == "none":
        return Divergence("check", span.id) if check is not None else Divergence("generate", span.id)
    if check is None:
        decided = sorted({e.payload.get("span") for e in parent.events if e.kind == "check"})
        raise ConfigError(f"no retrieval decision was made on span {span.id}, so none can be forced there",
                          where="fork point",
                          fix=("choose a token of a span the method checked: " + ", ".join(map(str, decided)))
                          if decided else f"{parent.method} decides no retrieval while it writes; fork one of its "
                                          "retrievals instead (suppress it, edit its query or its passages)")
    if check.payload.get("unit", "token") in _UNFORCEABLE_UNITS:
        unit_name = check.payload.get("unit")
        other = ", or fork a run of its paper variant" if parent.variant != "paper" else ""
        raise ConfigError(f"{parent.method} ({parent.variant} variant) decides on whole {unit_name}s with the "
                          "authors' rules, so a single token cannot be forced", where="fork point",
                          fix=f"suppress or edit one of this run's retrievals{other}")
    unit = _unit_of(check, point.token)
    if check.payload.get("fired") == unit and not change.query:
        raise ConfigError(f"retrieval already fired at this point of span {span.id}", where="fork point",
                          fix="choose another token, or force it with your own query (--query)")
    return Divergence("check", span.id, override=True, fired=unit)
