"""The recorder's contract with its listeners: events, amendments, method-registered kinds, timed phases."""

from __future__ import annotations

import time

import pytest

from explorer.journal import RunJournal
from explorer.store import RunStore
from explorer.trace import EVENT_SCHEMA, Trace, TraceRecorder, register_event_kind


def _trace() -> Trace:
    return Trace(question="q?", method="wo", variant="paper", config={}, model={"name": "none"})


def test_an_amendment_reaches_listeners_and_listeners_hold_copies() -> None:
    seen: list[tuple[str, dict]] = []
    rec = TraceRecorder(_trace(), listeners=[lambda kind, data: seen.append((kind, data))])
    event = rec.add("query", text="a", source="question")
    rec.amend(event.id, stage=2, anchor="p1")
    assert rec.trace.events[0].payload == {"text": "a", "source": "question", "stage": 2, "anchor": "p1"}
    (k1, first), (k2, amendment) = seen
    assert (k1, k2) == ("event", "amend")
    assert "stage" not in first["payload"], "a listener must learn of the change through the amendment"
    assert amendment == {"id": 0, "kind": "query", "fields": {"stage": 2, "anchor": "p1"}}
    with pytest.raises(ValueError, match="cannot amend event 5"):
        rec.amend(5, stage=1)


def test_the_journal_stores_an_amendment_to_an_already_written_event(tmp_db) -> None:
    store = RunStore(tmp_db)
    journal = RunJournal(store, every=0.0)
    trace = _trace()
    journal.begin(trace)
    rec = TraceRecorder(trace, listeners=[journal])
    event = rec.add("query", text="a", source="question")
    rec.add("note", message="written")  # flushes the query event
    rec.amend(event.id, stage=1)
    journal.flush()
    assert store.get(trace.run_id).events[0].payload["stage"] == 1


def test_a_method_registers_its_own_event_kind_and_a_conflicting_one_is_refused() -> None:
    register_event_kind("toy_probe", ("value",), "a test-only kind")
    try:
        register_event_kind("toy_probe", ("value",), "the same keys again: fine")
        with pytest.raises(ValueError, match="already registered"):
            register_event_kind("toy_probe", ("other",), "different keys")
        trace = _trace()
        rec = TraceRecorder(trace)
        rec.add("toy_probe", value=1)
        trace.validate()
        rec.add("toy_probe", nothing=1)
        with pytest.raises(ValueError, match=r"lacks \['value'\]"):
            trace.validate()
    finally:
        EVENT_SCHEMA.pop("toy_probe", None)


def test_method_kinds_validate_without_importing_the_method_first() -> None:
    # "filter" is BlendFilter's kind: validating a trace that holds one loads the methods that define it.
    trace = Trace.from_dict({**_trace().to_dict(), "events": [
        {"id": 0, "kind": "filter", "step": 0, "t": 0.0,
         "payload": {"passage_ids": [], "kept": [], "dropped": [], "raw_answer": "", "status": "none"}}]})
    trace.validate()
    assert "filter" in EVENT_SCHEMA


def test_phases_add_up_and_report_their_duration() -> None:
    rec = TraceRecorder(_trace())
    with rec.phase("retrieval") as timer:
        time.sleep(0.01)
    with rec.phase("retrieval"):
        pass
    assert timer.seconds >= 0.01
    assert rec.costs.wall_time["retrieval"] >= timer.seconds
