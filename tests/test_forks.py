"""Forks: a run replayed up to a point of its parent, then continued live with one change.

On the tiny random model (fast, deterministic) every method's fork without a change reproduces
its parent; each intervention changes what it should and nothing before its point. On the
embedded model a forced retrieval produces the events a DRAGIN retrieval does. The family of
forks lives in the store, through reopening and export.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from explorer.engine.generation import Engine
from explorer.errors import ConfigError, ExplorerError
from explorer.forks import ForkChange, ForkPlan, ForkPoint, fork_run, resolve
from explorer.forks.diff import diff_runs, written_tokens
from explorer.journal import RunJournal
from explorer.methods.base import run_question
from explorer.runtime import Runtime, corpus_facts
from explorer.store import RunStore
from explorer.trace import Trace

QUESTION = "Which city is the birthplace of the director of the film Jaws?"
#: Settings that make each method retrieve on the tiny model within a few short spans.
CONFIGS = {
    "dragin": {"threshold": 0.02, "max_length": 40},
    "flare": {"threshold": 0.3, "max_length": 40},
    "seakr": {"delta": -100.0, "max_steps": 2, "step_tokens": 8, "k": 4, "max_length": 30},
    "sr": {"max_length": 20},
    "fl": {"max_length": 30},
    "fs": {"max_length": 30},
    "blendfilter": {"max_length": 20},
    "drrag": {"max_length": 20},
    "etc": {"threshold": 0.0, "max_rounds": 2, "max_length": 30},
    "targ": {"threshold": 0.0, "prefix_tokens": 8, "max_length": 20},
    "probing_rag": {"threshold": 0.0, "max_retrievals": 1, "max_length": 12},
}
_VOLATILE = ("seconds", "replayed", "t", "inherited")
#: Payload keys holding event ids, which shift by one after a fork's marker event.
_REFERENCES = ("span", "retrieval", "query", "uncertainty_event")


def _decisions(value):
    """A payload without event references (recursively), for comparing runs whose ids are offset."""
    if isinstance(value, dict):
        return {k: _decisions(v) for k, v in value.items() if k not in _REFERENCES and k not in _VOLATILE}
    if isinstance(value, list):
        return [_decisions(v) for v in value]
    return value


@pytest.fixture(scope="module")
def tiny_runtime(tiny_lm, demo_retriever) -> Runtime:
    return Runtime(engine=Engine(tiny_lm), retriever=demo_retriever, corpus=corpus_facts(demo_retriever, "demo"))


@pytest.fixture(scope="module")
def parents(tiny_runtime) -> dict[str, Trace]:
    return {m: run_question(m, QUESTION, tiny_runtime, config=c, raise_errors=True) for m, c in CONFIGS.items()}


def _payload(event) -> dict:
    return {k: v for k, v in event.payload.items() if k not in _VOLATILE}


def assert_same_run(parent: Trace, child: Trace) -> None:
    """Same events (the fork marker aside), same tokens, signals within 1e-5, same decisions and answer."""
    a = parent.events
    b = [e for e in child.events if e.kind != "fork" or e.payload.get("inherited")]
    assert [e.kind for e in a] == [e.kind for e in b]
    for x, y in zip(a, b, strict=True):
        if x.kind == "generation":
            assert [t["id"] for t in x.payload["tokens"]] == [t["id"] for t in y.payload["tokens"]], x.id
            for t1, t2 in zip(x.payload["tokens"], y.payload["tokens"], strict=True):
                for name, value in t1["signals"].items():
                    other = t2["signals"].get(name)
                    if isinstance(value, float) and other is not None:
                        assert abs(value - other) <= 1e-5, (x.id, name)
                    else:
                        assert value == other, (x.id, name)
        elif x.kind in ("check", "trigger", "truncation", "query", "retrieval", "answer", "rerank", "selection"):
            px, py = _decisions(x.payload), _decisions(y.payload)
            if x.kind == "check":
                assert px["fired"] == py["fired"], x.id
                continue
            assert px == py, (x.id, x.kind)
    assert child.output == parent.output and child.answer == parent.answer


def _prefix_is_parents(parent: Trace, child: Trace) -> int:
    """Every event before the fork marker is the parent's event of the same id; returns the marker's id."""
    marker = next(e for e in child.events if e.kind == "fork" and not e.payload.get("inherited"))
    for e in child.events[:marker.id]:
        assert e.kind == parent.events[e.id].kind
        assert _payload(e) == _payload(parent.events[e.id]), e.id
    return marker.id


# -- a fork without a change is its parent ------------------------------------------------------------------


@pytest.mark.parametrize("method", sorted(CONFIGS))
def test_a_fork_without_change_reproduces_its_parent(method, parents, tiny_runtime) -> None:
    parent = parents[method]
    checks = [e.payload["span"] for e in parent.events if e.kind == "check"]
    retrievals = [e.id for e in parent.events if e.kind == "retrieval"]
    points = [ForkPoint(span=s, token=0) for s in checks[:2]] + [ForkPoint(retrieval=r) for r in retrievals[-1:]]
    assert points, f"{method} made no decision and no retrieval: the settings no longer exercise it"
    for point in points:
        child = fork_run(parent, ForkPlan(parent.run_id, point), tiny_runtime, raise_errors=True)
        assert child.status == "complete"
        assert_same_run(parent, child)
        assert child.fork["parent"] == parent.run_id and child.fork["depth"] == 1
        hook, at = child.fork["divergence"]["hook"], child.fork["divergence"]["event"]
        spans = sum(1 for e in parent.events
                    if e.kind == "generation" and (e.id < at or e.id == at and hook == "check"))
        assert child.costs.replayed_spans == spans
        assert child.costs.reused_retrievals == sum(1 for e in parent.events if e.kind == "retrieval" and e.id < at)
        assert diff_runs(parent, child).first_difference is None and diff_runs(parent, child).same_answer


def test_the_replayed_part_runs_no_model(parents, tiny_runtime) -> None:
    """Before its point a fork's spans are the parent's, copied: no forward pass is spent on them."""
    parent = parents["dragin"]
    last = [e for e in parent.events if e.kind == "check"][-1].payload["span"]
    child = fork_run(parent, ForkPlan(parent.run_id, ForkPoint(span=last, token=0)), tiny_runtime, raise_errors=True)
    replayed = [e for e in child.events if e.kind == "generation" and e.payload.get("replayed")]
    assert [e.id for e in replayed] == [e.id for e in parent.events if e.kind == "generation" and e.id <= last]
    assert child.costs.replayed_tokens == sum(len(e.payload["tokens"]) for e in replayed)
    live_tokens = child.costs.generated_tokens - child.costs.replayed_tokens
    assert child.costs.forward_passes < parent.costs.forward_passes
    assert live_tokens == sum(len(e.payload["tokens"]) for e in child.events
                              if e.kind == "generation" and not e.payload.get("replayed"))


# -- each intervention ---------------------------------------------------------------------------------------


def _unfired_check(parent: Trace):
    return next(e for e in parent.events if e.kind == "check" and e.payload["fired"] is None
                and e.payload.get("unit") == "token" and len(e.payload["units"]) > 3)


def test_forcing_a_retrieval_fires_at_that_token_with_the_methods_query(parents, tiny_runtime) -> None:
    parent = parents["dragin"]
    check = _unfired_check(parent)
    span, token = check.payload["span"], 2
    child = fork_run(parent, ForkPlan(parent.run_id, ForkPoint(span=span, token=token), ForkChange("force_retrieval")),
                     tiny_runtime, raise_errors=True)
    marker = _prefix_is_parents(parent, child)
    after = child.events[marker:]
    forced = next(e for e in after if e.kind == "check")
    assert forced.payload["fired"] == token and forced.payload["fork_override"]["method_fired"] is None
    trigger = next(e for e in after if e.kind == "trigger")
    assert (trigger.payload["span"], trigger.payload["token_index"]) == (span, token)
    cut = next(e for e in after if e.kind == "truncation")
    assert cut.payload["token_index"] == token
    query = next(e for e in after if e.kind == "query")
    assert query.payload["source"] == "qfs" and "forced" not in query.payload
    retrieval = next(e for e in after if e.kind == "retrieval")
    resumed = next(e for e in after if e.kind == "continuation")
    assert resumed.payload["retrieval"] == retrieval.id
    assert child.costs.retrievals == sum(1 for e in child.events if e.kind == "retrieval")


def test_a_forced_retrieval_sends_the_users_query(parents, tiny_runtime, demo_retriever) -> None:
    parent = parents["flare"]
    check = next(e for e in parent.events if e.kind == "check")
    span = check.payload["span"]
    token = 1 if check.payload["fired"] != 1 else 2
    plan = ForkPlan(parent.run_id, ForkPoint(span=span, token=token), ForkChange("force_retrieval", query="Spielberg"))
    child = fork_run(parent, plan, tiny_runtime, raise_errors=True)
    query = next(e for e in child.events if e.kind == "query" and e.payload.get("forced"))
    assert query.payload["text"] == "Spielberg" and query.payload["method_query"] != "Spielberg"
    hits = child.events[query.id + 1].payload["hits"]
    assert [h["id"] for h in hits] == [h.passage.id for h in demo_retriever.search("Spielberg", len(hits))]


def test_suppressing_a_triggered_retrieval_lets_the_method_go_on_without_it(parents, tiny_runtime) -> None:
    parent = parents["dragin"]
    retrieval = next(e for e in parent.events if e.kind == "retrieval")
    trigger = next(e for e in parent.events if e.kind == "trigger")
    child = fork_run(parent, ForkPlan(parent.run_id, ForkPoint(retrieval=retrieval.id),
                                      ForkChange("suppress_retrieval")), tiny_runtime, raise_errors=True)
    marker = _prefix_is_parents(parent, child)
    check = next(e for e in child.events[marker:] if e.kind == "check")
    assert check.payload["span"] == trigger.payload["span"] and check.payload["fired"] is None
    assert check.payload["fork_override"]["method_fired"] == trigger.payload["token_index"]
    # No cut of that span and no retrieval for it: the whole span is kept and the method drafts on.
    assert not any(e.kind == "truncation" and e.payload["span"] == check.payload["span"] for e in child.events)
    assert written_tokens(child, check.payload["span"])[:len(parent.events[check.payload["span"]].payload["tokens"])] \
        == [t["text"] for t in parent.events[check.payload["span"]].payload["tokens"]]


def test_a_decision_on_the_whole_draft_or_answer_can_be_forced_and_suppressed(parents, tiny_runtime) -> None:
    """TARG gates once on its draft, Probing-RAG once per answer: any token of that span names the decision."""
    shut = run_question("targ", QUESTION, tiny_runtime, config={**CONFIGS["targ"], "threshold": 1.0},
                        raise_errors=True)
    gate = next(e for e in shut.events if e.kind == "check")
    assert gate.payload["fired"] is None and not shut.of_kind("retrieval")
    child = fork_run(shut, ForkPlan(shut.run_id, ForkPoint(span=gate.payload["span"], token=3),
                                    ForkChange("force_retrieval")), tiny_runtime, raise_errors=True)
    marker = _prefix_is_parents(shut, child)
    forced = next(e for e in child.events[marker:] if e.kind == "check")
    assert forced.payload["fired"] == 0 and forced.payload["fork_override"]["method_fired"] is None
    assert child.of_kind("retrieval") and child.status == "complete" and child.answer is not None

    for method in ("targ", "probing_rag"):
        parent = parents[method]
        first = next(e for e in parent.events if e.kind == "retrieval")
        child = fork_run(parent, ForkPlan(parent.run_id, ForkPoint(retrieval=first.id),
                                          ForkChange("suppress_retrieval")), tiny_runtime, raise_errors=True)
        marker = _prefix_is_parents(parent, child)
        check = next(e for e in child.events[marker:] if e.kind == "check")
        assert check.payload["fired"] is None and check.payload["fork_override"]["method_fired"] == 0, method
        assert not child.of_kind("retrieval") and child.status == "complete", method


def test_a_token_of_a_whole_word_decision_is_refused_with_what_to_do_instead(parents) -> None:
    parent = parents["etc"]
    check = next(e for e in parent.events if e.kind == "check")
    with pytest.raises(ConfigError) as err:
        resolve(parent, ForkPlan(parent.run_id, ForkPoint(span=check.payload["span"], token=0),
                                 ForkChange("force_retrieval")))
    assert "whole words" in str(err.value) and "suppress or edit" in err.value.fix
    assert "paper variant" not in err.value.fix  # it is the paper variant


def test_suppressing_a_scheduled_retrieval_gives_no_passages(parents, tiny_runtime) -> None:
    parent = parents["sr"]
    retrieval = next(e for e in parent.events if e.kind == "retrieval")
    child = fork_run(parent, ForkPlan(parent.run_id, ForkPoint(retrieval=retrieval.id),
                                      ForkChange("suppress_retrieval")), tiny_runtime, raise_errors=True)
    suppressed = next(e for e in child.events if e.kind == "retrieval")
    assert suppressed.payload["hits"] == [] and suppressed.payload["suppressed"] is True
    answer_span = next(e for e in child.events if e.kind == "generation")
    assert not any(h["text"][:40] in answer_span.payload["prompt"] for h in retrieval.payload["hits"])


def test_editing_a_query_searches_the_new_text(parents, tiny_runtime, demo_retriever) -> None:
    parent = parents["fl"]
    retrieval = [e for e in parent.events if e.kind == "retrieval"][-1]
    old = parent.events[retrieval.payload["query"]].payload["text"]
    child = fork_run(parent, ForkPlan(parent.run_id, ForkPoint(retrieval=retrieval.id),
                                      ForkChange("edit_query", query="Steven Spielberg")), tiny_runtime,
                     raise_errors=True)
    _prefix_is_parents(parent, child)
    query = next(e for e in child.events if e.kind == "query" and "edited_from" in e.payload)
    assert query.payload["text"] == "Steven Spielberg" and query.payload["edited_from"] == old
    got = [h["id"] for h in child.events[query.id + 1].payload["hits"]]
    assert got == [h.passage.id for h in demo_retriever.search("Steven Spielberg", len(got))]


def test_editing_passages_gives_the_model_exactly_those_in_that_order(parents, tiny_runtime, demo_retriever) -> None:
    parent = parents["sr"]
    retrieval = next(e for e in parent.events if e.kind == "retrieval")
    held = [h["id"] for h in retrieval.payload["hits"]]
    added = next(p.id for p in (demo_retriever.passage(f"demo-{i:04d}") for i in range(200))
                 if p is not None and p.id not in held)
    order = [held[-1], added, held[0]]
    child = fork_run(parent, ForkPlan(parent.run_id, ForkPoint(retrieval=retrieval.id),
                                      ForkChange("edit_passages", passages=tuple(order))), tiny_runtime,
                     raise_errors=True)
    edited = next(e for e in child.events if e.kind == "retrieval")
    assert [h["id"] for h in edited.payload["hits"]] == order
    assert edited.payload["edited"] == {"from": held, "to": order}
    prompt = next(e for e in child.events if e.kind == "generation").payload["prompt"]
    texts = [demo_retriever.passage(pid).text[:30] for pid in order]
    positions = [prompt.find(t) for t in texts]
    assert all(p >= 0 for p in positions) and positions == sorted(positions)


def test_a_parameter_change_applies_from_its_span_on(parents, tiny_runtime) -> None:
    parent = parents["dragin"]
    spans = [e.payload["span"] for e in parent.events if e.kind == "check"]
    span = spans[1] if len(spans) > 1 else spans[0]
    child = fork_run(parent, ForkPlan(parent.run_id, ForkPoint(span=span, token=0),
                                      ForkChange("set_params", params={"threshold": 1000.0})), tiny_runtime,
                     raise_errors=True)
    marker = _prefix_is_parents(parent, child)
    later = [e for e in child.events[marker:] if e.kind == "check"]
    assert later and all(e.payload["threshold"] == 1000.0 and e.payload["fired"] is None for e in later)
    assert child.config == parent.config  # the run started as its parent; the change is in trace.fork
    assert child.fork["change"] == {"kind": "set_params", "params": {"threshold": 1000.0}}


def test_forks_of_forks_keep_their_family(parents, tiny_runtime, tmp_db: Path) -> None:
    store = RunStore(tmp_db)
    parent = parents["dragin"]
    store.save(parent)
    check = _unfired_check(parent)
    first = fork_run(parent, ForkPlan(parent.run_id, ForkPoint(span=check.payload["span"], token=1),
                                      ForkChange("force_retrieval")), tiny_runtime, journal=RunJournal(store))
    retrieval = [e for e in first.events if e.kind == "retrieval"][-1]
    second = fork_run(first, ForkPlan(first.run_id, ForkPoint(retrieval=retrieval.id),
                                      ForkChange("edit_query", query="Jaws director")), tiny_runtime,
                      journal=RunJournal(store))
    assert second.fork["root"] == parent.run_id and second.fork["depth"] == 2 and second.fork["parent"] == first.run_id
    _prefix_is_parents(first, second)
    # The strip marks the fork's own point, not the one it inherited from its parent.
    from explorer.ui.views.view import TraceView

    assert TraceView(second).fork_at == second.fork["at"] != first.fork["at"]
    reopened = RunStore(tmp_db)
    family = reopened.family(second.run_id)
    assert [r["run_id"] for r in family] == [parent.run_id, first.run_id, second.run_id]
    assert [r["parent_run_id"] for r in family] == [None, parent.run_id, first.run_id]
    assert family[2]["change"] == {"kind": "edit_query", "query": "Jaws director"}
    assert reopened.family(parent.run_id) == family and reopened.children(parent.run_id) == [first.run_id]
    exported = Trace.from_json(reopened.get(second.run_id).to_json())
    assert exported.fork == second.fork
    rows = reopened.export_csv().splitlines()
    assert "parent_run_id" in rows[0] and any(first.run_id in r and second.run_id in r for r in rows[1:])


def test_a_schema_2_database_gains_the_family_columns(tmp_db: Path, parents) -> None:
    RunStore(tmp_db).save(parents["sr"])
    with sqlite3.connect(tmp_db) as conn:
        for index in [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND "
                                                 "sql LIKE '%_run_id%'")]:
            conn.execute(f"DROP INDEX {index}")
        conn.execute("ALTER TABLE runs DROP COLUMN parent_run_id")
        conn.execute("ALTER TABLE runs DROP COLUMN root_run_id")
        conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
        conn.execute("PRAGMA user_version = 2")
    conn.close()
    store = RunStore(tmp_db)
    assert store.backup is not None and store.backup.name.endswith(".v2-backup")
    run_id = store.list()[0]["run_id"]
    assert store.family(run_id)[0]["parent_run_id"] is None


# -- refusals ----------------------------------------------------------------------------------------------


def test_a_fork_on_another_model_or_corpus_is_refused(parents, demo_retriever, tmp_path: Path) -> None:
    from explorer.engine.loader import tiny_random_model
    from explorer.retrieval.registry import open_retriever

    parent = parents["dragin"]
    plan = ForkPlan(parent.run_id, ForkPoint(span=0, token=0))
    other_model = Runtime(engine=Engine(tiny_random_model(seed=0, layers=3)), retriever=demo_retriever,
                          corpus=corpus_facts(demo_retriever, "demo"))
    with pytest.raises(ExplorerError, match="another model") as info:
        fork_run(parent, plan, other_model)
    assert "num_layers" in info.value.what and info.value.fix
    corpus = tmp_path / "mine.jsonl"
    corpus.write_text("\n".join(json.dumps({"id": f"p{i}", "title": f"T{i}", "text": f"passage number {i} text"})
                                for i in range(5)) + "\n")
    other = open_retriever(str(corpus))
    other_corpus = Runtime(engine=Engine(tiny_random_model(seed=0)), retriever=other,
                           corpus=corpus_facts(other, str(corpus)))
    with pytest.raises(ExplorerError, match="another corpus"):
        fork_run(parent, plan, other_corpus)


@pytest.mark.parametrize("point,change,message", [
    (ForkPoint(span=999), ForkChange("force_retrieval"), "is not a generation event"),
    (ForkPoint(span=0, token=10_000), ForkChange("force_retrieval"), "outside it"),
    (ForkPoint(retrieval=0), ForkChange("edit_query", query="x"), "is not a retrieval event"),
    (ForkPoint(span=0), ForkChange("suppress_retrieval"), "acts on a retrieval"),
    (ForkPoint(span=0), ForkChange("set_params"), "no parameter"),
])
def test_bad_points_are_refused_with_a_fix(parents, point, change, message) -> None:
    parent = parents["dragin"]
    with pytest.raises(ConfigError, match=message) as info:
        resolve(parent, ForkPlan(parent.run_id, point, change))
    assert info.value.fix


def test_forcing_where_no_decision_was_made_names_the_spans_that_had_one(parents) -> None:
    parent = parents["sr"]
    span = next(e.id for e in parent.events if e.kind == "generation")
    with pytest.raises(ConfigError, match="no retrieval decision") as info:
        resolve(parent, ForkPlan(parent.run_id, ForkPoint(span=span), ForkChange("force_retrieval")))
    assert "suppress it, edit its query" in info.value.fix


def test_unknown_parameters_are_refused(parents, tiny_runtime) -> None:
    parent = parents["dragin"]
    plan = ForkPlan(parent.run_id, ForkPoint(span=0), ForkChange("set_params", params={"thresh": 1.0}))
    with pytest.raises(ConfigError, match="no parameter thresh"):
        fork_run(parent, plan, tiny_runtime)


# -- the embedded model --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_forced_retrieval_on_the_embedded_model(embedded_lm, demo_retriever) -> None:
    runtime = Runtime(engine=Engine(embedded_lm), retriever=demo_retriever, corpus=corpus_facts(demo_retriever, "demo"))
    parent = run_question("dragin", QUESTION, runtime, config={"threshold": 5.0, "max_length": 40}, raise_errors=True)
    span = next(e for e in parent.events if e.kind == "generation")
    assert not any(e.kind == "retrieval" for e in parent.events), "θ = 5 should never fire on this model"
    token = min(4, len(span.payload["tokens"]) - 1)
    child = fork_run(parent, ForkPlan(parent.run_id, ForkPoint(span=span.id, token=token),
                                      ForkChange("force_retrieval")), runtime, raise_errors=True)
    kinds = [e.kind for e in child.events]
    marker = kinds.index("fork")
    assert kinds[marker:marker + 6] == ["fork", "check", "trigger", "truncation", "query", "retrieval"]
    assert child.events[marker + 4].payload["source"] == "qfs" and child.events[marker + 5].payload["hits"]
    continuation = next(e for e in child.events[marker:] if e.kind == "continuation")
    assert continuation.payload["retrieval"] == child.events[marker + 5].id
    assert child.costs.replayed_spans == 1 and child.status == "complete"
    diff = diff_runs(parent, child)
    assert diff.parent_event == span.id and diff.first_difference is not None
    assert diff.tokens[0].tag == "equal" and len(diff.tokens[0].parent) >= token


@pytest.mark.parametrize("arch", ["mistral", "gpt2"])
def test_forks_on_a_sliding_window_and_a_learned_position_model(arch, demo_retriever) -> None:
    """The replayed span's attention row is rebuilt on a model whose window is shorter than the prompt
    (its cache cannot be rolled back) and on one with learned positions; a fork without change reproduces."""
    from explorer.engine.tiny import tiny_model

    runtime = Runtime(engine=Engine(tiny_model(arch, attn_implementation="auto")), retriever=demo_retriever,
                      corpus=corpus_facts(demo_retriever, "demo"))
    parent = run_question("dragin", QUESTION, runtime, config={"threshold": 0.02, "max_length": 30}, raise_errors=True)
    checks = [e for e in parent.events if e.kind == "check"]
    same = fork_run(parent, ForkPlan(parent.run_id, ForkPoint(span=checks[-1].payload["span"])), runtime,
                    raise_errors=True)
    assert_same_run(parent, same)
    span = checks[0].payload["span"]
    fired = checks[0].payload["fired"]
    token = 1 if fired != 1 else 2
    forced = fork_run(parent, ForkPlan(parent.run_id, ForkPoint(span=span, token=token), ForkChange("force_retrieval")),
                      runtime, raise_errors=True)
    marker = _prefix_is_parents(parent, forced)
    query = next(e for e in forced.events[marker:] if e.kind == "query")
    assert query.payload["source"] == "qfs" and query.payload["text"].strip()
    assert next(e for e in forced.events[marker:] if e.kind == "trigger").payload["token_index"] == token
