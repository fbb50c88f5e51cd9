"""Replaying a run's retrieval decisions at another threshold, from its recorded ``check`` events.

Every method that decides with a threshold records a ``check`` event holding each unit's value
(tokens, words or sentences), the compare direction, which units could fire at all, and the unit
that did fire. The decision rule the methods share is "the first eligible unit whose value is
over (``>``) or under (``<``) the threshold", so another threshold θ' can be tried without
running the model again.

This is a what-if on the RECORDED generation: the first decision that changes would have changed
what the model wrote next, so every later check is about text that would not exist. Results say
which decisions are still meaningful (``reliable``) and which lie beyond the first divergence.
The module is pure (plain dicts and numbers in, dataclasses out) so it is cheap to test and the
web app, the report and the CLI can all share it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from explorer import naming

COMPARES = (">", "<")


@dataclass(frozen=True)
class Decision:
    """One recorded check replayed at ``threshold``."""

    check: int
    span: int | None
    signal: str
    recorded_threshold: float
    threshold: float
    compare: str
    fired: int | None
    would_fire: int | None
    reliable: bool

    @property
    def changed(self) -> bool:
        return self.fired != self.would_fire


@dataclass(frozen=True)
class Interval:
    """Thresholds ``lo .. hi`` at which ``fires`` (a unit index, or None) is the unit that fires.

    For ``>`` the interval is ``lo <= θ < hi``; for ``<`` it is ``lo < θ <= hi`` (values equal
    to the threshold never fire, as in the methods).
    """

    lo: float
    hi: float
    fires: int | None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return None if math.isnan(value) else value


def _eligible(unit: Mapping[str, Any]) -> bool:
    return bool(unit.get("eligible", True))


def passes(value: float | None, compare: str, threshold: float) -> bool:
    """Whether one value fires at ``threshold`` under ``compare``; a missing value never fires."""
    if compare not in COMPARES:
        raise ValueError(f"compare must be one of {COMPARES}, got {compare!r}")
    if value is None:
        return False
    return value > threshold if compare == ">" else value < threshold


def first_firing(units: Sequence[Mapping[str, Any]], compare: str, threshold: float) -> int | None:
    """Index of the first eligible unit that fires at ``threshold``, or None."""
    for i, unit in enumerate(units):
        if _eligible(unit) and passes(_number(unit.get("value")), compare, threshold):
            return i
    return None


def firing_intervals(units: Sequence[Mapping[str, Any]], compare: str) -> list[Interval]:
    """Every threshold range with the unit that would fire in it, from low to high θ.

    For ``>``, unit i is the first to fire exactly when θ lies between the largest earlier
    eligible value and its own value, so only units that beat every earlier value ever fire.
    ``<`` is the mirror image. The list covers the whole real line.
    """
    if compare not in COMPARES:
        raise ValueError(f"compare must be one of {COMPARES}, got {compare!r}")
    records: list[tuple[float, int]] = []  # (value, unit) of units that beat every earlier value
    for i, unit in enumerate(units):
        value = _number(unit.get("value"))
        if value is None or not _eligible(unit):
            continue
        if not records or (value > records[-1][0] if compare == ">" else value < records[-1][0]):
            records.append((value, i))
    if not records:
        return [Interval(-math.inf, math.inf, None)]
    out: list[Interval] = []
    if compare == ">":
        lo = -math.inf
        for value, unit in records:
            out.append(Interval(lo, value, unit))
            lo = value
        out.append(Interval(lo, math.inf, None))
    else:
        hi = math.inf
        for value, unit in records:
            out.append(Interval(value, hi, unit))
            hi = value
        out.append(Interval(-math.inf, hi, None))
        out.reverse()
    return out


def _checks(events: Iterable[Any]) -> list[tuple[int, Mapping[str, Any]]]:
    out = []
    for e in events:
        kind = e.kind if hasattr(e, "kind") else e.get("kind")
        if kind != "check":
            continue
        payload = e.payload if hasattr(e, "payload") else e.get("payload", {})
        eid = e.id if hasattr(e, "id") else e.get("id", -1)
        out.append((int(eid), payload))
    return out


def signals(events: Iterable[Any]) -> list[str]:
    """The distinct signals the checks of a run decided on, in order of first use."""
    seen: list[str] = []
    for _, p in _checks(events):
        if p.get("signal") not in seen:
            seen.append(p.get("signal"))
    return seen


def replay(events: Iterable[Any], threshold: float, *, signal: str | None = None) -> list[Decision]:
    """Replay every check (of ``signal``, default: the first signal checked) at ``threshold``.

    ``events`` are a trace's events (objects with ``kind``/``payload``/``id`` or their dicts).
    Decisions after the first changed one are marked ``reliable=False``.
    """
    checks = _checks(events)
    if signal is None and checks:
        signal = checks[0][1].get("signal")
    out: list[Decision] = []
    diverged = False
    for eid, p in checks:
        if p.get("signal") != signal:
            continue
        compare = p.get("compare", ">")
        would = first_firing(p.get("units") or [], compare, threshold)
        decision = Decision(check=eid, span=p.get("span"), signal=str(signal), recorded_threshold=float(p["threshold"]),
                            threshold=float(threshold), compare=compare, fired=p.get("fired"), would_fire=would,
                            reliable=not diverged)
        out.append(decision)
        diverged = diverged or decision.changed
    return out


def divergence(decisions: Sequence[Decision]) -> Decision | None:
    """The first decision that differs from the recorded run, or None when all agree."""
    return next((d for d in decisions if d.changed), None)


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th ... 11th, 12th, 13th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def describe(decisions: Sequence[Decision], units_of: Mapping[int, Sequence[Mapping[str, Any]]] | None = None) -> str:
    """One sentence saying what changes at the new threshold, for captions and reports."""
    if not decisions:
        return "This run recorded no threshold decisions to replay."
    first = divergence(decisions)
    theta = decisions[0].threshold
    if first is None:
        return f"At θ' = {theta:g} every recorded decision stays the same."

    def name(index: int | None) -> str:
        if index is None:
            return "no retrieval"
        units = (units_of or {}).get(first.check)
        if units and 0 <= index < len(units):
            return f"a retrieval at {str(units[index].get('text', '')).strip()!r}"
        return f"a retrieval at the {ordinal(index + 1)} place it checked"

    return (f"At θ' = {theta:g} {naming.event('check', first.check)} would give {name(first.would_fire)} instead "
            f"of {name(first.fired)}; after it the model would have written different text, so later checks "
            "are not a prediction.")
