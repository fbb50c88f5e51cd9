"""The what-if replay: first eligible unit over/under θ', threshold intervals, divergence."""

from __future__ import annotations

import math

import pytest

from explorer import whatif
from explorer.engine.generation import Engine
from explorer.methods.base import run_question
from explorer.runtime import Runtime
from explorer.trace import Trace, TraceRecorder


def _units(values, eligible=None):
    eligible = eligible or [True] * len(values)
    return [{"text": f"u{i}", "value": v, "eligible": e} for i, (v, e) in enumerate(zip(values, eligible, strict=True))]


def test_first_firing_respects_direction_eligibility_and_strictness():
    units = _units([0.1, 0.9, 0.5, 1.4], [True, False, True, True])
    assert whatif.first_firing(units, ">", 0.3) == 2  # unit 1 is over but not eligible
    assert whatif.first_firing(units, ">", 0.5) == 3  # equal to θ does not fire
    assert whatif.first_firing(units, ">", 2.0) is None
    assert whatif.first_firing(units, "<", 0.2) == 0
    assert whatif.first_firing(units, "<", 0.05) is None


def test_missing_values_never_fire():
    units = [{"text": "a", "value": None}, {"text": "b", "value": float("nan")}, {"text": "c", "value": 3.0}]
    assert whatif.first_firing(units, ">", 1.0) == 2
    assert whatif.first_firing(units, "<", 10.0) == 2


def test_bad_compare_is_refused():
    with pytest.raises(ValueError):
        whatif.passes(1.0, ">=", 0.5)


@pytest.mark.parametrize("compare", [">", "<"])
def test_intervals_agree_with_first_firing_everywhere(compare):
    units = _units([0.4, 0.2, 0.9, 0.7, 1.3, 0.05], [True, True, True, False, True, True])
    intervals = whatif.firing_intervals(units, compare)
    assert intervals[0].lo == -math.inf and intervals[-1].hi == math.inf
    for a, b in zip(intervals, intervals[1:], strict=False):
        assert a.hi == b.lo  # contiguous, low to high
    for interval in intervals:
        lo = interval.lo if interval.lo != -math.inf else interval.hi - 1.0
        hi = interval.hi if interval.hi != math.inf else interval.lo + 1.0
        for theta in (lo + (hi - lo) * f for f in (0.25, 0.5, 0.75)):
            assert whatif.first_firing(units, compare, theta) == interval.fires, (compare, theta, interval)


def test_intervals_with_nothing_eligible():
    assert whatif.firing_intervals(_units([1.0], [False]), ">") == [whatif.Interval(-math.inf, math.inf, None)]


def _trace_with_checks(checks):
    trace = Trace(question="q", method="m", variant="paper", config={}, model={})
    rec = TraceRecorder(trace)
    for values, fired, compare in checks:
        rec.add("check", span=None, signal="rind", threshold=0.5, compare=compare, units=_units(values), fired=fired)
    return trace


def test_replay_marks_decisions_after_the_first_change_unreliable():
    trace = _trace_with_checks([([0.1, 0.2], None, ">"), ([0.3, 0.8], 1, ">"), ([0.9], 0, ">")])
    same = whatif.replay(trace.events, 0.5)
    assert [d.changed for d in same] == [False, False, False]
    assert whatif.divergence(same) is None
    lower = whatif.replay(trace.events, 0.15)
    assert [d.would_fire for d in lower] == [1, 0, 0]
    assert [d.reliable for d in lower] == [True, False, False]
    assert whatif.divergence(lower).check == lower[0].check
    assert "instead of" in whatif.describe(lower, {lower[0].check: trace.events[0].payload["units"]})


def test_replay_reads_event_dicts_and_filters_by_signal():
    trace = _trace_with_checks([([0.9], 0, ">")])
    trace.events[0].payload["signal"] = "prob"
    dicts = [e.to_dict() for e in trace.events]
    assert whatif.signals(dicts) == ["prob"]
    assert whatif.replay(dicts, 0.5, signal="rind") == []
    assert len(whatif.replay(dicts, 0.5)) == 1


def _replay_reproduces(trace, threshold):
    decisions = whatif.replay(trace.events, threshold)
    assert decisions, "the run recorded no checks"
    assert any(d.fired is not None for d in decisions), "no check fired, so the test would show nothing"
    assert not any(d.changed for d in decisions)
    assert all(d.reliable for d in decisions)
    return decisions


@pytest.mark.parametrize("method,variant,settings", [
    ("dragin", "reference", {"threshold": 1.0}),
    ("flare", "paper", {"threshold": 0.3}),
    ("flare", "reference", {"threshold": 0.5}),
    ("etc", "paper", {"threshold": 0.0}),
    ("targ", "paper", {"threshold": 0.5}),
    ("targ", "paper", {"threshold": 0.0, "gate": "variance", "prefixes": 3, "prefix_tokens": 6}),
    # 0.0 fires on every answer until the cap: the capped last check must replay as capped too
    ("probing_rag", "paper", {"threshold": 0.0, "max_retrievals": 2}),
])
def test_replay_at_the_recorded_threshold_reproduces_every_recorded_decision(tiny_lm, demo_retriever, method, variant,
                                                                           settings):
    """The methods' own decisions are the replay rule: at θ' = θ nothing may change."""
    runtime = Runtime(engine=Engine(tiny_lm), retriever=demo_retriever, corpus={"name": "demo"})
    config = {"max_length": 24, "fewshot": 1, "answer_tokens": 4, "max_rounds": 3, **settings}
    trace = run_question(method, "Where did the Lewiston Maineiacs play?", runtime, variant=variant, config=config)
    assert trace.status == "complete", trace.error
    _replay_reproduces(trace, settings["threshold"])


@pytest.mark.slow
def test_dragin_paper_replay_on_the_embedded_model(embedded_lm, demo_retriever):
    """Token-level RIND with stopword eligibility: θ' = θ reproduces, θ' above the fired value moves on."""
    runtime = Runtime(engine=Engine(embedded_lm), retriever=demo_retriever, corpus={"name": "demo"})
    config = {"max_length": 32, "fewshot": 2, "answer_tokens": 6, "threshold": 0.3}
    trace = run_question("dragin", "What is the seating capacity of the arena where the Lewiston Maineiacs played "
                         "their home games?", runtime, variant="paper", config=config)
    decisions = _replay_reproduces(trace, 0.3)
    first = next(d for d in decisions if d.fired is not None)
    units = trace.events[first.check].payload["units"]
    higher = whatif.replay(trace.events, units[first.fired]["value"] + 1e-9)
    moved = next(d for d in higher if d.check == first.check)
    assert moved.would_fire != first.fired
    assert moved.would_fire is None or moved.would_fire > first.fired
