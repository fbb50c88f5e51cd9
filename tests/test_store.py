"""The SQLite run store: round trips, search, tags, batches, CSV, and survival of a killed writer."""

from __future__ import annotations

import csv
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from explorer.methods.base import run_question
from explorer.runtime import Runtime
from explorer.store import RunStore
from explorer.trace import Trace


@pytest.fixture(scope="module")
def traces(tiny_lm, demo_retriever) -> list[Trace]:
    from explorer.engine.generation import Engine

    runtime = Runtime(engine=Engine(tiny_lm), retriever=demo_retriever, corpus={"name": "demo"})
    out = []
    for method, q in (("sr", "Who lived longer, Alejandro Jodorowsky or Philip Saville?"),
                      ("fs", "Which actress from SuperMansion had a recurring role on Workaholics?"),
                      ("dragin", "Who is the spouse of the Green performer?")):
        out.append(run_question(method, q, runtime, config={"max_length": 24}))
    return out


def test_round_trip_keeps_the_trace_exactly(tmp_db: Path, traces: list[Trace]) -> None:
    store = RunStore(tmp_db)
    for t in traces:
        store.save(t)
    for t in traces:
        assert store.get(t.run_id).to_dict() == t.to_dict()
    with store._db() as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_list_filters_search_tags_rename_delete(tmp_db: Path, traces: list[Trace]) -> None:
    store = RunStore(tmp_db)
    store.save_many(traces)
    assert {r["method"] for r in store.list()} == {"sr", "fs", "dragin"}
    assert [r["method"] for r in store.list(method="fs")] == ["fs"]
    assert [r["method"] for r in store.list(search="SuperMansion")] == ["fs"]
    assert store.list(search="no such words anywhere") == []
    assert [r["method"] for r in store.list(search="superman")] == ["fs"]  # a word's start, any case
    assert store.list(search='NEAR(" OR *') == []  # FTS5 syntax in user text is plain words
    first = traces[0].run_id
    store.tag(first, "case-study", "seakr")
    store.rename(first, "Jodorowsky vs Saville")
    assert [r["run_id"] for r in store.list(tag="case-study")] == [first]
    assert store.list(search="vs Saville")[0]["name"] == "Jodorowsky vs Saville"
    store.save(traces[0])  # saving again keeps the given name
    assert store.list(search="vs Saville")[0]["name"] == "Jodorowsky vs Saville"
    assert store.list(search="Jodorowsky")[0]["tags"] == ["case-study", "seakr"]
    store.untag(first, "seakr")
    assert store.tags_of(first) == ["case-study"]
    store.delete(traces[1].run_id)
    assert {r["method"] for r in store.list()} == {"sr", "dragin"}
    with pytest.raises(Exception, match="no run with id"):
        store.get(traces[1].run_id)


def test_csv_export_has_every_run(tmp_db: Path, traces: list[Trace]) -> None:
    store = RunStore(tmp_db)
    store.save_many(traces)
    rows = list(csv.DictReader(io.StringIO(store.export_csv())))
    assert sorted(r["run_id"] for r in rows) == sorted(t.run_id for t in traces)
    assert all(r["question"] for r in rows)


def test_a_killed_writer_leaves_earlier_runs_intact(tmp_db: Path, traces: list[Trace]) -> None:
    store = RunStore(tmp_db)
    store.save_many(traces)
    # A second process writes runs in a tight loop and is killed with SIGKILL mid-write.
    script = (
        "import sys, uuid\n"
        "from explorer.store import RunStore\n"
        "from explorer.trace import Trace\n"
        f"t = RunStore({str(tmp_db)!r}).get({traces[0].run_id!r})\n"
        "s = RunStore(sys.argv[1])\n"
        "print('ready', flush=True)\n"
        "while True:\n"
        "    t.run_id = uuid.uuid4().hex\n"
        "    s.save(t)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_db)], stdout=subprocess.PIPE,
                            cwd=Path(__file__).resolve().parent.parent, env={**os.environ})
    assert proc.stdout.readline().strip() == b"ready"
    time.sleep(1.0)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    store = RunStore(tmp_db)
    assert store.integrity_check() == "ok"
    for t in traces:
        assert store.get(t.run_id).to_dict() == t.to_dict()
    assert len(store.list(limit=100000)) > len(traces)


def test_unwritable_database_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-db.sqlite"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(Exception, match="cannot open the run database"):
        RunStore(bad)
