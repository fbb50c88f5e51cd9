"""The store's evaluation bookkeeping: settings and status updates, resume keys with configs, discarding failures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from eval_helpers import make_trace

from explorer.errors import ExplorerError
from explorer.store import RunStore


def test_evaluation_row_settings_and_counts(tmp_db: Path) -> None:
    store = RunStore(tmp_db)
    assert store.evaluation("e") is None
    store.start_evaluation("e", {"model": "m", "arms": []})
    store.save_many([make_trace("sr", "a", ["a"], qid="1"), make_trace("sr", None, ["a"], qid="2", status="error")],
                    evaluation="e", dataset="hotpotqa", question_ids=["1", "2"])
    row = store.evaluation("e")
    assert row["settings"] == {"model": "m", "arms": []} and row["status"] == "running"
    assert row["runs"] == {"complete": 1, "error": 1}
    store.update_evaluation("e", settings={"model": "m", "arms": [1]}, status="interrupted")
    row = store.evaluation("e")
    assert row["settings"]["arms"] == [1] and row["status"] == "interrupted"
    store.start_evaluation("e", {"model": "other"})  # reopening keeps the stored settings
    assert store.evaluation("e")["settings"]["model"] == "m"
    with pytest.raises(ExplorerError, match="no evaluation named"):
        store.update_evaluation("nope", status="complete")


def test_run_configs_tell_sweep_runs_apart(tmp_db: Path) -> None:
    store = RunStore(tmp_db)
    traces = [make_trace("dragin", "a", ["a"], qid="1", config={"threshold": t}) for t in (0.5, 1.0)]
    store.save_many(traces, evaluation="s", dataset="hotpotqa", question_ids=["1", "1"])
    assert store.run_keys("s") == {("hotpotqa", "1", "dragin", "paper")}
    assert store.run_configs("s") == {("hotpotqa", "1", "dragin", "paper", json.dumps({"threshold": t}))
                                      for t in (0.5, 1.0)}


def test_discard_incomplete_removes_only_failed_runs_of_that_evaluation(tmp_db: Path) -> None:
    store = RunStore(tmp_db)
    ok, failed, other = (make_trace("sr", "a", ["a"], qid="1"), make_trace("sr", None, ["a"], qid="2", status="error"),
                         make_trace("sr", None, ["a"], qid="2", status="error"))
    store.save_many([ok, failed], evaluation="e", dataset="hotpotqa", question_ids=["1", "2"])
    store.save(other, evaluation="f", dataset="hotpotqa", question_id="2")
    store.tag(failed.run_id, "look")
    assert store.discard_incomplete("e") == 1
    assert [r["run_id"] for r in store.list(evaluation="e")] == [ok.run_id]
    assert [r["run_id"] for r in store.list(evaluation="f")] == [other.run_id]
    assert store.tags_of(failed.run_id) == []
    assert store.integrity_check() == "ok"
