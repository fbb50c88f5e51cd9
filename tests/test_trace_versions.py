"""Version-2 traces (signals under ``signals``) and the version-1 traces stored before them.

``data/trace_v1_dragin_tiny.json`` is a DRAGIN run on the tiny random model written by the
explorer before the signal registry (trace version 1: signals as flat token keys). It must still
load, validate and render; and the same run today must decide exactly the same, token for token,
with only the version and the signal layout changed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from explorer.engine.generation import Engine
from explorer.engine.loader import tiny_random_model
from explorer.methods.base import run_question
from explorer.runtime import Runtime
from explorer.trace import TRACE_VERSION, Trace, token_dict_v2
from explorer.ui.views.render import render_runs

FIXTURE = Path(__file__).parent / "data" / "trace_v1_dragin_tiny.json"
VOLATILE = {"run_id", "created_at", "t", "seconds", "wall_time", "total_time", "version"}
#: Fields traces gained after the fixture was written (additive: readers of older traces go without them).
ADDED_SINCE = {"max_new_tokens", "replayed_spans", "replayed_tokens", "reused_retrievals"}


def _stable(value, approx: bool = False):
    """The trace without what differs run to run (ids, clocks); ``approx`` floats compare to 1e-5 relative."""
    if isinstance(value, dict):
        return {k: _stable(v, approx) for k, v in value.items() if k not in VOLATILE | ADDED_SINCE}
    if isinstance(value, list):
        return [_stable(v, approx) for v in value]
    if isinstance(value, float) and approx:
        return pytest.approx(value, rel=1e-5, abs=1e-7)
    return value


def test_a_version_1_trace_loads_in_the_version_2_layout() -> None:
    raw = json.loads(FIXTURE.read_text(encoding="utf-8"))
    assert raw["version"] == 1
    trace = Trace.from_dict(raw)
    trace.validate()
    assert trace.version == TRACE_VERSION == 2
    old = raw["events"][0]["payload"]["tokens"][0]
    new = trace.events[0].payload["tokens"][0]
    assert set(new) == {"id", "text", "top", "signals"}
    assert new["signals"]["rind"] == old["rind"] and new["signals"]["entropy"] == old["entropy"]
    assert Trace.from_json(trace.to_json()).to_dict() == trace.to_dict()  # v2 round-trips
    assert "RIND" in render_runs([trace], signal="rind")


def test_an_unknown_version_is_refused_with_the_readable_ones() -> None:
    raw = json.loads(FIXTURE.read_text(encoding="utf-8"))
    with pytest.raises(ValueError, match="reads versions 1, 2"):
        Trace.from_dict({**raw, "version": 7})


def test_the_same_run_today_decides_exactly_as_the_version_1_trace(demo_retriever) -> None:
    old = Trace.from_dict(json.loads(FIXTURE.read_text(encoding="utf-8")))
    # A model of its own: the session's tiny model may have been switched to another attention
    # backend by other tests, which moves signals in the last digits.
    runtime = Runtime(engine=Engine(tiny_random_model(seed=0)), retriever=demo_retriever, corpus=old.corpus)
    chosen = {k: old.config[k] for k, source in old.config_sources.items() if source == "user"}
    now = run_question(old.method, old.question, runtime, variant=old.variant, config=chosen)
    assert _stable(now.to_dict()) == _stable(old.to_dict(), approx=True)


def test_token_dicts_convert_once() -> None:
    flat = {"id": 3, "text": " a", "top": [], "prob": 0.5, "amax": None}
    once = token_dict_v2(flat)
    assert once == {"id": 3, "text": " a", "top": [], "signals": {"prob": 0.5, "amax": None}}
    assert token_dict_v2(once) is once
