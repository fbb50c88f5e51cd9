"""How a fork differs from its parent: where it diverged, and a token-level diff of what each wrote.

Read from the two traces only. The written tokens are each span's tokens up to its cut (what the
run kept), from the divergence on; the answers are diffed word by word.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any

from explorer.trace import Event, Trace

#: Spans that are the run's text; judges, filters and samples are not part of what it wrote.
_SIDE_PURPOSES = ("filter", "judge", "augment", "rerank")


@dataclass
class DiffOp:
    """One stretch of the diff: ``equal``, ``replace``, ``delete`` (parent only) or ``insert`` (fork only)."""

    tag: str
    parent: list[str]
    child: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"tag": self.tag, "parent": self.parent, "child": self.child}


@dataclass
class ForkDiff:
    """A fork against its parent: the divergence, the diff of the written tokens and of the answers."""

    parent_event: int | None
    child_event: int | None
    change: dict[str, Any]
    tokens: list[DiffOp] = field(default_factory=list)
    answer: list[DiffOp] = field(default_factory=list)
    parent_answer: str | None = None
    child_answer: str | None = None

    @property
    def same_answer(self) -> bool:
        return (self.parent_answer or "").strip() == (self.child_answer or "").strip()

    @property
    def first_difference(self) -> int | None:
        """How many written tokens after the divergence the two runs share before they differ (None: none differ)."""
        shared = 0
        for op in self.tokens:
            if op.tag != "equal":
                return shared
            shared += len(op.parent)
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"parent_event": self.parent_event, "child_event": self.child_event, "change": self.change,
                "tokens": [o.to_dict() for o in self.tokens], "answer": [o.to_dict() for o in self.answer],
                "parent_answer": self.parent_answer, "child_answer": self.child_answer,
                "same_answer": self.same_answer, "first_difference": self.first_difference}


def fork_marker(events: list[Event]) -> Event | None:
    """A fork's own ``fork`` event (the ones it inherited from the forks it descends from are skipped)."""
    return next((e for e in events if e.kind == "fork" and not e.payload.get("inherited")), None)


def divergence(child: Trace) -> tuple[int | None, int | None]:
    """(the parent's event id, the child's fork event id) where ``child`` stopped replaying."""
    event = fork_marker(child.events)
    if event is None:
        return None, None
    return int(event.payload.get("parent_event", event.id)), event.id


def written_tokens(trace: Trace, from_event: int = 0) -> list[str]:
    """The text of the tokens each span of the run kept (up to its cut), from event ``from_event`` on."""
    cuts = {e.payload.get("span"): int(e.payload.get("token_index", 0)) for e in trace.events
            if e.kind == "truncation"}
    out: list[str] = []
    for e in trace.events:
        if e.id < from_event or e.kind != "generation":
            continue
        if str(e.payload.get("purpose", "")) in _SIDE_PURPOSES:
            continue
        tokens = e.payload.get("tokens") or []
        keep = cuts.get(e.id, len(tokens))
        out.extend(str(t.get("text", "")) for t in tokens[:keep])
    return out


def _ops(a: list[str], b: list[str]) -> list[DiffOp]:
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    return [DiffOp(tag, a[i1:i2], b[j1:j2]) for tag, i1, i2, j1, j2 in matcher.get_opcodes()]


_WORDS = re.compile(r"\w+|[^\w\s]")


def diff_runs(parent: Trace, child: Trace) -> ForkDiff:
    """The diff of ``child`` (a fork of ``parent``, or any run of the same question) against ``parent``."""
    parent_event, child_event = divergence(child)
    start_parent = parent_event if parent_event is not None else 0
    start_child = child_event if child_event is not None else 0
    # Both sides start at the span the divergence sits in, so a cut inside it shows in the diff.
    span_start = _span_start(parent, start_parent)
    if span_start is not None and child_event is not None:
        start_child, start_parent = span_start, span_start
    tokens = _ops(written_tokens(parent, start_parent), written_tokens(child, start_child))
    answer = _ops(_WORDS.findall(parent.answer or ""), _WORDS.findall(child.answer or ""))
    return ForkDiff(parent_event, child_event, dict((child.fork or {}).get("change") or {}), tokens, answer,
                    parent.answer, child.answer)


def _span_start(parent: Trace, event_id: int) -> int | None:
    """The id of the generation event at or before ``event_id`` (the span a decision at ``event_id`` was about)."""
    for e in reversed(parent.events[:event_id + 1]):
        if e.kind == "generation":
            return e.id
    return None
