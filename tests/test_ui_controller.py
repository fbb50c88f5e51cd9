"""Streaming runs for the app: tokens before the end, storage, exact reopening, cancel, bad input."""

from __future__ import annotations

import re

import pytest

from explorer.engine.generation import Engine
from explorer.errors import ConfigError, ExplorerError
from explorer.methods.base import method_names
from explorer.runtime import Runtime
from explorer.store import RunStore
from explorer.ui.page import controls, viewblock
from explorer.ui.runs import history
from explorer.ui.runs.controller import RunController, RuntimeHolder
from explorer.ui.serving import server


@pytest.fixture()
def controller(tiny_lm, demo_retriever, tmp_db):
    runtime = Runtime(engine=Engine(tiny_lm), retriever=demo_retriever, corpus={"name": "demo"})
    holder = RuntimeHolder(lambda: runtime, describe="tiny")
    return RunController(RunStore(tmp_db), holder)


def _spec(method: str, **settings) -> controls.RunSpec:
    values = {(method, p.name): p.default for p in controls.params(method)}
    values.update({(method, k): v for k, v in settings.items()})
    return controls.build_specs([method], {}, values, model="tiny")[0]


def test_stream_shows_tokens_live_then_stores_and_reopens_exactly(controller):
    specs = [_spec("flare", max_length=16, fewshot=1, answer_tokens=4, threshold=0.3),
             _spec("sr", max_length=8, fewshot=1, answer_tokens=2)]
    updates = list(controller.stream("Where did the Lewiston Maineiacs play?", specs, gold={"answers": ["Colisée"]},
                                     session="s1"))
    live = [u for u in updates if not u.done]
    assert any(re.search(r'class="dre-tokens">[^<]*<span class="tok', u.html) for u in live), "no token streamed"
    assert any('data-view="live"' in u.html for u in live)
    final = updates[-1]
    assert final.done and len(final.run_ids) == 2 and "Done: 2 run(s) stored" in final.status
    stored = [controller.store.get(i) for i in final.run_ids]
    assert [t.method for t in stored] == ["flare", "sr"] and all(t.status == "complete" for t in stored)
    assert stored[0].gold["answers"] == ["Colisée"]
    # The view after the run and the view reopened later come from the same stored traces.
    cache = history.TraceCache(controller.store)
    first = viewblock.render(cache, viewblock.Shown(final.run_ids).to_state(), "prob", None, None)
    again = viewblock.render(history.TraceCache(controller.store), {"ids": final.run_ids}, "prob", None, None)
    assert first == again and first == final.html


def test_methods_of_one_press_run_together_through_the_batch_as_they_would_in_turn(tiny_lm, demo_retriever,
                                                                                   tmp_path):
    """With the engine batching concurrent runs (the app's default when it admits several at once), the
    methods of one press decode together; each trace is the one it would be alone, shown in ticked order."""
    from explorer.engine import batching

    def press(engine: Engine, db: str) -> list:
        runtime = Runtime(engine=engine, retriever=demo_retriever, corpus={"name": "demo"})
        controller = RunController(RunStore(tmp_path / db), RuntimeHolder(lambda: runtime, describe="tiny"))
        specs = [_spec("flare", max_length=16, fewshot=1, answer_tokens=4, threshold=0.3),
                 _spec("wo", max_length=12, fewshot=1, answer_tokens=2),
                 _spec("fl", max_length=16, fewshot=1, answer_tokens=2),
                 _spec("sr", max_length=8, fewshot=1, answer_tokens=2),
                 _spec("probing_rag", max_length=8, fewshot=1, answer_tokens=2)]  # its own pass beside the batch
        updates = list(controller.stream("Where did the Lewiston Maineiacs play?", specs, gold=None, session="s"))
        return updates, [controller.store.get(i) for i in updates[-1].run_ids]

    _, alone = press(Engine(tiny_lm), "alone.db")
    engine = Engine(tiny_lm)
    batching.enable(engine)
    try:
        updates, together = press(engine, "together.db")
    finally:
        batching.disable(engine)
    assert any("at once" in u.status for u in updates if not u.done), "the methods did not run together"
    assert [t.method for t in together] == ["flare", "wo", "fl", "sr", "probing_rag"] == [t.method for t in alone]

    def tokens(trace) -> list[list[int]]:
        return [[tok["id"] for tok in e.payload["tokens"]] for e in trace.of_kind("generation")]

    def checks(trace) -> list[list[float]]:
        return [[round(u["value"], 4) for u in e.payload.get("units", [])] for e in trace.of_kind("check")]

    for a, b in zip(alone, together, strict=True):
        assert b.status == "complete" and tokens(a) == tokens(b) and a.answer == b.answer, a.method
        assert checks(a) == checks(b), a.method  # signals read beside the batch (the prober's pass) alike


def test_cancel_stops_within_tokens_and_stores_the_partial_run(controller):
    spec = _spec("wo", max_length=400, fewshot=0, answer_tokens=2)
    stream = controller.stream("Tell me everything about Maine.", [spec, _spec("sr", max_length=8)], gold=None,
                               session="s2")
    for update in stream:
        if 'class="tok' in update.html:
            assert controller.cancel("s2")
            break
    rest = list(stream)
    final = rest[-1]
    assert final.done and "Cancelled" in final.status
    assert len(final.run_ids) == 1  # the second method never started
    trace = controller.store.get(final.run_ids[0])
    assert trace.status == "cancelled" and trace.error == "cancelled by the user"
    # The engine stops between tokens and records no generation event for the span it was in.
    assert trace.costs.generated_tokens < 400 and not trace.of_kind("answer")
    assert not controller.cancel("s2")  # nothing left running for that session


def test_a_run_cancelled_while_it_waits_says_so_and_leaves_the_line(controller):
    """The page's Cancel while its run waits for the model: the line it showed ("number 1 in line") is replaced by
    what happened, and its place goes to the next caller."""
    held = controller.gate.enter("session:another-page")  # every place the model has, taken
    for _ in range(controller.gate.capacity - 1):
        controller.gate.enter("session:other")
    stream = controller.stream("Who wrote Hamlet?", [_spec("wo", max_length=8)], gold=None, session="s-wait")
    first = next(stream)
    assert "number 1 in line" in first.status and controller.gate.waiting == 1
    assert controller.cancel("s-wait")
    rest = list(stream)
    assert rest and "in line" not in rest[-1].status and "in line" not in rest[-1].html
    assert "Cancelled while waiting for the model; nothing ran" in rest[-1].status
    assert controller.gate.waiting == 0 and not rest[-1].run_ids
    held.release()


def test_empty_question_and_bad_values_are_refused_with_the_configs_message(controller):
    with pytest.raises(ExplorerError, match="the question is empty"):
        list(controller.stream("   ", [_spec("wo")], gold=None, session="s3"))
    with pytest.raises(ConfigError, match=r"DraginConfig\.threshold: -1\.0 is out of range"):
        _spec("dragin", threshold=-1)
    with pytest.raises(ConfigError, match=r"top_k: 2\.5 is not a valid int"):
        _spec("dragin", top_k=2.5)
    with pytest.raises(ConfigError, match=r"exemplars: 'nope' is not allowed"):
        _spec("dragin", exemplars="nope")
    with pytest.raises(ExplorerError, match="no method is selected"):
        controls.build_specs([], {}, {})
    with pytest.raises(ConfigError, match="has no variant"):
        controls.build_specs(["dragin"], {"dragin": "imaginary"}, {})


def test_only_changed_values_are_passed_so_the_model_preset_applies_and_is_recorded():
    embedded = controls.model_name("embedded")
    threshold = next(p for p in controls.params("dragin") if p.name == "threshold")
    shown = controls.shown_default(threshold, "paper", embedded)
    assert shown != threshold.default and "preset for" in controls.preset_note(threshold, "paper", embedded)
    assert controls.shown_default(threshold, "reference", embedded) == threshold.default
    values = {("dragin", p.name): controls.shown_default(p, "paper", embedded) for p in controls.params("dragin")}
    assert controls.build_specs(["dragin"], {"dragin": "paper"}, values, model=embedded)[0].config == {}
    values[("dragin", "top_k")] = 5
    assert controls.build_specs(["dragin"], {}, values, model=embedded)[0].config == {"top_k": 5}


def test_controls_come_from_the_config_description():
    dragin = {p.name: p for p in controls.params("dragin")}
    assert dragin["threshold"].default == 1.2 and dragin["threshold"].lo == 0.0
    assert "range [0, 1000]" in dragin["threshold"].info and "default 1.2" in dragin["threshold"].info
    assert dragin["exemplars"].choices and "choices:" in dragin["exemplars"].info
    assert method_names()[:2] == ["wo", "sr"] and "dragin" in method_names()


def test_benchmark_questions_are_offered_only_when_the_data_is_there(monkeypatch, tmp_path):
    from explorer.ui.runs import questions

    questions._load.cache_clear()
    monkeypatch.setenv("EXPLORER_DATA", str(tmp_path / "absent"))
    assert questions.sources() == [questions.TYPED, questions.DEMO, questions.CASES]
    assert "not offered" in questions.data_note() and "EXPLORER_DATA" in questions.data_note()
    assert str(tmp_path) not in questions.data_note()  # the server's folders are not the visitor's business
    cases = questions.choices(questions.CASES)
    assert len(cases) == 4 and cases[0][0].startswith("[dragin] ")
    picked = questions.find(questions.CASES, cases[0][1])
    assert questions.gold_of(picked)["gold_passages"] == ["demo-0001", "demo-0002"]


@pytest.mark.shared_data
def test_benchmark_questions_carry_their_gold(shared_data):
    from explorer.ui.runs import questions

    assert questions.DATASET_PREFIX + "hotpotqa" in questions.sources() and questions.data_note() == ""
    source = questions.DATASET_PREFIX + "hotpotqa"
    key = questions.choices(source)[0][1]
    gold = questions.gold_of(questions.find(source, key))
    assert gold["answers"] and gold["gold_passages"] and gold["dataset"] == "hotpotqa"


def test_history_helpers(tmp_db):
    store = RunStore(tmp_db)
    with pytest.raises(ExplorerError, match="is not a date"):
        history.rows(store, since="yesterday")
    with pytest.raises(ExplorerError, match="select at least 2 runs to compare"):
        history.require(["a"], at_least=2, action="compare")
    assert history.parse_date("2026-01-02", "until", end=True) == "2026-01-02T23:59:59"


def test_server_options_and_exposure_warning(monkeypatch, tmp_path):
    monkeypatch.setenv("EXPLORER_PORT", "9123")
    monkeypatch.setenv("EXPLORER_HOST", "0.0.0.0")
    monkeypatch.setenv("EXPLORER_DB", str(tmp_path / "x.sqlite"))
    monkeypatch.setenv("EXPLORER_CORPUS", "/some/corpus")
    args = server.parse_args([])
    assert (args.port, args.host, args.db, args.corpus, args.model) == (9123, "0.0.0.0", str(tmp_path / "x.sqlite"),
                                                                         "/some/corpus", "embedded")
    assert server.parse_args(["--port", "7000"]).port == 7000
    assert "WARNING" in server.exposure_warning("0.0.0.0", None)
    assert server.exposure_warning("0.0.0.0", ("a", "b")) is None
    assert server.exposure_warning("127.0.0.1", None) is None
    with pytest.raises(ExplorerError, match="USER:PASSWORD"):
        server.parse_auth("nocolon")
    monkeypatch.setenv("EXPLORER_PORT", "eighty")
    with pytest.raises(ExplorerError, match="not a port number"):
        server.parse_args([])
    with pytest.raises(ExplorerError, match="does not download"):
        server.check_model_offline("org/some-hub-model")


def test_a_finished_run_is_drawn_once_while_the_next_streams(controller, monkeypatch):
    """While later methods stream, the finished runs above them are not drawn again at every refresh."""
    from explorer.ui.views import render

    drawn: list[tuple[str, str]] = []
    real = render.render_run

    def counting(trace, options=None, **kwargs):
        drawn.append((trace.run_id, repr(options)))
        return real(trace, options, **kwargs)

    monkeypatch.setattr(render, "render_run", counting)
    specs = [_spec("wo", max_length=8, fewshot=0, answer_tokens=2),
             _spec("flare", max_length=24, fewshot=1, answer_tokens=4, threshold=0.3)]
    updates = list(controller.stream("Where did the Lewiston Maineiacs play?", specs, gold=None, session="s"))
    first = updates[-1].run_ids[0]
    assert sum(1 for u in updates if not u.done and first in u.run_ids) > 3, "the second run hardly streamed"
    stored = [d for d in drawn if d[0] != "live"]
    assert stored and len(stored) == len(set(stored)), "a stored run was drawn again with the same options"
