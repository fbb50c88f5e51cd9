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


def test_the_trace_imports_no_method_module() -> None:
    """The layering: in a fresh interpreter, importing the trace leaves the methods out; and neither the trace
    nor any engine module (the signal registry included) names explorer.methods in an import at all."""
    import ast
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    code = ("import sys, explorer.trace, explorer.extensions as x; "
            "print(sorted(m for m in sys.modules if m.startswith('explorer.methods')), x.declared())")
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(root)}, cwd=root,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[] ['explorer.methods', 'explorer.forks.replay']"
    for path in [root / "explorer" / "trace.py", *sorted((root / "explorer" / "engine").glob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.startswith("explorer.methods") for n in names), f"{path.name} imports {names}"


def test_a_kind_unknown_to_the_reader_is_registered_by_loading_its_declared_module(tmp_path, monkeypatch) -> None:
    """A trace read from disk before anything imported the module of its kind still validates: the trace
    loads the declared modules by name, which register their kinds (a toy plugin here, written by the test)."""
    from explorer import extensions

    (tmp_path / "toy_plugin_kinds.py").write_text(
        "from explorer.trace import register_event_kind\n"
        "register_event_kind('toy_plugin_mark', ('where',), 'a kind only the plugin knows')\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(extensions, "_declared", [*extensions._declared, "toy_plugin_kinds"])
    trace = Trace.from_dict({**_trace().to_dict(), "events": [
        {"id": 0, "kind": "toy_plugin_mark", "step": 0, "t": 0.0, "payload": {"where": 3}},
        {"id": 1, "kind": "filter", "step": 0, "t": 0.0,
         "payload": {"passage_ids": [], "kept": [], "dropped": [], "raw_answer": "", "status": "none"}}]})
    try:
        assert "toy_plugin_mark" not in EVENT_SCHEMA
        trace.validate()
        assert EVENT_SCHEMA["toy_plugin_mark"] == ("where",)
        trace.events[0].payload = {}
        with pytest.raises(ValueError, match=r"lacks \['where'\]"):
            trace.validate()
        trace.events[0].kind = "nobody_registers_this"
        with pytest.raises(ValueError, match="unknown kind 'nobody_registers_this'"):
            trace.validate()
    finally:
        EVENT_SCHEMA.pop("toy_plugin_mark", None)
        extensions._loaded.discard("toy_plugin_kinds")
        import sys

        sys.modules.pop("toy_plugin_kinds", None)


def test_phases_add_up_and_report_their_duration() -> None:
    rec = TraceRecorder(_trace())
    with rec.phase("retrieval") as timer:
        time.sleep(0.01)
    with rec.phase("retrieval"):
        pass
    assert timer.seconds >= 0.01
    assert rec.costs.wall_time["retrieval"] >= timer.seconds
