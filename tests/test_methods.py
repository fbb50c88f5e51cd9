"""Every method end to end, the reference variants' behaviours, and the errors users can cause.

Behaviour tests run on the tiny random model (fast, deterministic: its near-uniform attention and
high entropy make every check fire, which is what exercising the cutting and re-querying paths
needs); the end-to-end tests run the embedded SmolLM2 on the demo corpus.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from explorer.engine.generation import Engine
from explorer.engine.language import get_language
from explorer.engine.signals import merge_words
from explorer.errors import ConfigError, ExplorerError
from explorer.methods import prompts
from explorer.methods.base import make_config, run_question
from explorer.runtime import Runtime
from explorer.trace import Trace

LEWISTON = "What is the seating capacity of the arena where the Lewiston Maineiacs played their home games?"
SAVILLE = "Who lived longer, Alejandro Jodorowsky or Philip Saville?"
ALL = [("wo", "paper"), ("sr", "paper"), ("fl", "paper"), ("fs", "paper"), ("flare", "paper"),
       ("flare", "reference"), ("dragin", "paper"), ("dragin", "reference"), ("etc", "paper"), ("targ", "paper"),
       ("probing_rag", "paper")]


@pytest.fixture(scope="module")
def tiny_runtime(tiny_lm, demo_retriever) -> Runtime:
    return Runtime(engine=Engine(tiny_lm), retriever=demo_retriever, corpus={"name": "demo"})


@pytest.fixture(scope="module")
def embedded_runtime(embedded_lm, demo_retriever) -> Runtime:
    return Runtime(engine=Engine(embedded_lm), retriever=demo_retriever, corpus={"name": "demo"})


def assert_consistent(trace: Trace) -> None:
    """The trace validates, and its costs add up to what its events show."""
    trace.validate()
    gens = trace.of_kind("generation")
    assert trace.costs.llm_calls == len(gens)
    assert trace.costs.retrievals == len(trace.of_kind("retrieval"))
    assert trace.costs.generated_tokens == sum(len(g.payload["tokens"]) for g in gens)
    discarded = 0
    for cut in trace.of_kind("truncation"):
        span = trace.event(cut.payload["span"])
        assert span.kind == "generation"
        tokens = span.payload["tokens"]
        discarded += len(tokens) - cut.payload["token_index"]
        assert "".join(t["text"] for t in tokens[: cut.payload["token_index"]]) == cut.payload["kept_text"]
    assert trace.costs.discarded_tokens == discarded
    for cont in trace.of_kind("continuation"):
        assert trace.event(cont.payload["retrieval"]).kind == "retrieval"
    assert trace.of_kind("answer"), "every complete run ends with an answer event"
    json.loads(trace.to_json())


@contextmanager
def passes_outside_the_lock(engine: Engine) -> Iterator[list[str]]:
    """The model's forward passes made without the engine's lock held, while the block runs.

    Every pass must hold it: when concurrent runs share the batch, its hidden-state and attention
    hooks sit on the model and are live only while the batch steps under that lock."""
    unlocked: list[str] = []
    handle = engine.model.register_forward_pre_hook(
        lambda module, args: None if engine.lock._is_owned() else unlocked.append(type(module).__name__))
    try:
        yield unlocked
    finally:
        handle.remove()


@pytest.mark.parametrize(("method", "variant"), ALL)
def test_every_method_writes_a_consistent_trace_on_the_tiny_model(tiny_runtime, method: str, variant: str) -> None:
    with passes_outside_the_lock(tiny_runtime.engine) as unlocked:
        trace = run_question(method, SAVILLE, tiny_runtime, variant=variant,
                             config={"max_length": 40, "answer_tokens": 4, **_low_thresholds(method)})
    assert not unlocked, f"{len(unlocked)} forward pass(es) of {method}/{variant} outside the engine's lock"
    assert trace.status == "complete", trace.error
    assert_consistent(trace)
    assert Trace.from_json(trace.to_json()).to_dict() == trace.to_dict()


#: The methods the list above leaves to their own files, each with its cheapest settings on the tiny model.
OTHERS = [("seakr", "paper", {"k": 2, "step_tokens": 5, "max_steps": 1, "candidates": 1, "max_length": 16,
                             "answer_tokens": 4, "compare_estimators": False}),
          ("seakr", "reference", {"k": 2, "step_tokens": 5, "max_steps": 1, "candidates": 1, "max_length": 16,
                                 "answer_tokens": 4, "compare_estimators": False}),
          ("blendfilter", "paper", {"top_k": 2, "max_length": 16, "internal_tokens": 8, "filter_tokens": 4,
                                    "answer_tokens": 4}),
          ("drrag", "paper", {"k": 3, "k1": 1, "k2": 3, "max_length": 16, "answer_tokens": 4}),
          ("targ", "paper", {"gate": "variance", "prefixes": 2, "prefix_tokens": 4, "max_length": 16,
                             "answer_tokens": 4})]


@pytest.mark.parametrize(("method", "variant", "config"), OTHERS)
def test_every_pass_of_the_other_methods_holds_the_engine_lock(tiny_runtime, method: str, variant: str,
                                                                config: dict) -> None:
    """A pass outside the lock could meet the batch's hooks, live while concurrent runs step together."""
    with passes_outside_the_lock(tiny_runtime.engine) as unlocked:
        trace = run_question(method, SAVILLE, tiny_runtime, variant=variant, config=config)
    assert not unlocked, f"{len(unlocked)} forward pass(es) of {method}/{variant} outside the engine's lock"
    assert trace.status == "complete", trace.error


def _low_thresholds(method: str) -> dict:
    return {"dragin": {"threshold": 0.01}, "flare": {"threshold": 0.5},
            "etc": {"threshold": 0.0, "max_rounds": 3}}.get(method, {})


#: The embedded-model runs' budgets beside ``max_length``. DRAGIN's reference variant gets one round:
#: on this question its check can fire in every round and each round is a 64-token draft and a 64-token
#: continuation over a ~600-token prompt: run on its own outside the suite, its default 12 rounds ran
#: five (178 s of CPU), and the test took 189 s in the last full run. One round still drafts, fires,
#: searches and continues; the variant's check and query on the embedded model are compared with the
#: authors' rules by test_reference_oracle.py::test_three_embedded_model_prompts_decide_alike, and the
#: loop's keeping and stopping rules are checked by the tiny-model tests below and
#: tests/test_reference_rules.py.
EMBEDDED_BUDGETS = {("dragin", "reference"): {"max_rounds": 1}}


@pytest.mark.slow
@pytest.mark.parametrize(("method", "variant"), ALL)
def test_every_method_runs_on_the_embedded_model(embedded_runtime, method: str, variant: str) -> None:
    budget = EMBEDDED_BUDGETS.get((method, variant), {})
    trace = run_question(method, SAVILLE, embedded_runtime, variant=variant, config={"max_length": 64, **budget})
    assert trace.status == "complete", trace.error
    assert_consistent(trace)
    assert trace.answer, trace.output
    if method != "wo":
        assert trace.corpus["name"] == "demo"
    if budget:  # a shortened run must still reach the step it is there to exercise
        assert trace.of_kind("retrieval") and trace.of_kind("continuation"), trace.output


@pytest.mark.slow
def test_dragin_finds_the_arena_passage_for_the_lewiston_question(embedded_runtime) -> None:
    trace = run_question("dragin", LEWISTON, embedded_runtime, variant="paper", config={"max_length": 64})
    assert trace.status == "complete", trace.error
    triggers = trace.of_kind("trigger")
    assert triggers, "RIND never fired at the model's preset threshold"
    retrieved = {h["id"] for r in trace.of_kind("retrieval") for h in r.payload["hits"]}
    assert "demo-0002" in retrieved, retrieved
    query = trace.of_kind("query")[0].payload
    assert query["source"] == "qfs" and query["chosen"], "QFS must record the words it chose"
    assert all(c["eligible"] for c in query["candidates"] if c["chosen"])


# -- DRAGIN reference behaviours -------------------------------------------------------------------

def test_words_merge_at_space_markers_and_newlines() -> None:
    words = merge_words([" The", " Lew", "iston", " Maine", "iac", "s", ".", "\n", "So", " the"])
    assert [w.text for w in words] == ["The", "Lewiston", "Maineiacs.", "So", "the"]
    assert [(w.start, w.end) for w in words] == [(0, 1), (1, 3), (3, 7), (7, 9), (9, 10)]


@pytest.fixture(scope="module")
def dragin_reference(tiny_runtime) -> Trace:
    return run_question("dragin", LEWISTON, tiny_runtime, variant="reference",
                        config={"max_length": 48, "threshold": 1.0, "answer_tokens": 4})


@pytest.mark.parametrize(("text", "answer"), [
    ("Its arena is the Colisee. So the answer is: 3,677.", "3,677"),
    ("So the answer is J. R. R. Tolkien.", "J. R. R. Tolkien"),
    ("First guess. So the answer is London. Then more text", "London"),
    ("Green So the answer is:", None),  # the model stopped right after the colon
    ("So the answer is \"...\"", None),
    ("No answer phrase here.", None),
])
def test_answer_extraction(text: str, answer: str | None) -> None:
    assert prompts.extract_answer(text) == answer


def test_reference_scores_are_normalised_per_sentence(dragin_reference: Trace) -> None:
    check = dragin_reference.of_kind("check")[0].payload
    assert check["unit"] == "word" and check["units"]
    by_sentence: dict[int, list[dict]] = {}
    for unit in check["units"]:
        by_sentence.setdefault(unit["sentence"], []).append(unit)
    for units in by_sentence.values():
        # attention normalised to sum 1, times the number of words: the values / entropy sum to n.
        assert sum(u["value"] / u["entropy"] for u in units) == pytest.approx(len(units), rel=1e-6)


def test_reference_cuts_at_the_start_of_the_flagged_sentence(dragin_reference: Trace) -> None:
    from explorer.methods.reference_rules import split_sentences

    trigger = dragin_reference.of_kind("trigger")[0].payload
    cut = next(c.payload for c in dragin_reference.of_kind("truncation") if c.payload["span"] == trigger["span"])
    span = dragin_reference.event(trigger["span"]).payload
    sentences = split_sentences(span["text"], get_language())
    flagged = sentences[trigger["sentence"]]
    # The raw cut ends right before the flagged sentence's first token; the reference keeps the
    # earlier sentences re-joined by single spaces.
    assert span["text"][len(cut["kept_text"]):].strip().startswith(flagged.text[:10])
    assert len(cut["kept_text"].rstrip()) <= flagged.start
    assert cut["kept_as"] == " ".join(s.text for s in sentences[: trigger["sentence"]])


def test_reference_keeps_exactly_the_first_sentence_after_retrieval(dragin_reference: Trace) -> None:
    from explorer.methods.reference_rules import split_sentences

    conts = [c.payload for c in dragin_reference.of_kind("continuation")]
    assert conts, "the reference run must retrieve at least once on the tiny model"
    for cont in conts:
        span = dragin_reference.event(cont["span"]).payload
        sentences = split_sentences(span["text"], get_language())
        cuts = [c.payload for c in dragin_reference.of_kind("truncation") if c.payload["span"] == cont["span"]]
        if cuts:
            assert cuts[0]["reason"] == "only the first sentence is kept"
            assert cuts[0]["kept_as"] == sentences[0].text
            assert cuts[0]["kept_text"].strip().endswith(sentences[0].text[-5:])
        else:
            assert len(sentences) <= 1


def test_reference_stopping_rule_over_the_recorded_chunks(tiny_runtime) -> None:
    from explorer.methods import reference_rules as rules

    trace = run_question("dragin", LEWISTON, tiny_runtime, variant="reference",
                         config={"max_length": 16, "threshold": 1000.0, "answer_tokens": 2})
    drafts = [g.payload["text"] for g in trace.of_kind("generation") if g.payload["purpose"] == "draft"]
    assert not trace.of_kind("trigger"), "θ is so high that nothing may fire"
    # Chunks are appended until the rule says stop, and not one chunk longer.
    engine = tiny_runtime.engine
    text, decisions = "", []
    for draft in drafts:
        old = len(text)
        text = rules.append_text(text, draft)
        decisions.append(rules.should_stop(text, old, engine.count_tokens(text, special=True), 16))
    assert decisions[-1] and not any(decisions[:-1])


def test_paper_cut_is_right_before_the_trigger_token(tiny_runtime) -> None:
    trace = run_question("dragin", LEWISTON, tiny_runtime, variant="paper",
                         config={"max_length": 32, "threshold": 0.01, "answer_tokens": 2})
    trigger = trace.of_kind("trigger")[0].payload
    cut = next(c.payload for c in trace.of_kind("truncation") if c.payload["span"] == trigger["span"])
    assert cut["token_index"] == trigger["token_index"]
    tokens = [t["signals"] for t in trace.event(trigger["span"]).payload["tokens"]]
    assert tokens[trigger["token_index"]]["rind"] == pytest.approx(trigger["value"])
    assert trigger["value"] > trigger["threshold"]
    assert all(t["rind"] is None or t["rind"] <= trigger["threshold"] or not t["content"]
               for t in tokens[: trigger["token_index"]])


def test_flare_paper_masks_the_unsure_words(tiny_runtime) -> None:
    trace = run_question("flare", SAVILLE, tiny_runtime, variant="paper",
                         config={"max_length": 32, "threshold": 0.5, "initial_retrieval": False, "answer_tokens": 2})
    query = next(q.payload for q in trace.of_kind("query") if q.payload["source"] == "masked-sentence")
    for word in query["masked"]:
        assert word not in query["text"].split()


# -- user errors ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("method", "values", "message"), [
    ("dragin", {"threshold": -1}, r"out of range.*\[0, 1000\]"),
    ("dragin", {"top_n": "many"}, "not a valid int"),
    ("flare", {"threshold": 1.5}, r"\[0, 1\]"),
    ("sr", {"top_k": 0}, "out of range"),
    ("wo", {"exemplars": "poetry"}, "use one of"),
    ("fl", {"windw": 8}, "unknown parameter"),
])
def test_bad_config_values_are_rejected_with_the_allowed_range(method: str, values: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make_config(method, values)


def test_unknown_method_and_variant(tiny_runtime) -> None:
    with pytest.raises(ConfigError, match="unknown method"):
        run_question("dragon", SAVILLE, tiny_runtime)
    with pytest.raises(ConfigError, match="no variant"):
        run_question("sr", SAVILLE, tiny_runtime, variant="reference")


def test_empty_and_overlong_questions(tiny_runtime) -> None:
    with pytest.raises(ExplorerError, match="question is empty"):
        run_question("wo", "   ", tiny_runtime)
    trace = run_question("sr", "why " * 3000, tiny_runtime)
    assert trace.status == "error"
    assert "context holds" in trace.error and "shorten the question" in trace.error


@pytest.mark.slow
def test_run_command_prints_the_story_and_writes_the_trace(tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    proc = subprocess.run([sys.executable, "-m", "explorer", "run", "--method", "sr", "--question", SAVILLE,
                           "--set", "max_length=32", "--json", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=Path(__file__).resolve().parent.parent)
    assert proc.returncode == 0, proc.stderr
    assert "? query 0 (question)" in proc.stdout and "Answer:" in proc.stdout
    trace = Trace.from_json(out.read_text())
    assert trace.method == "sr" and trace.question == SAVILLE
    bad = subprocess.run([sys.executable, "-m", "explorer", "run", "--method", "dragin", "--question", SAVILLE,
                          "--set", "threshold=abc"], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parent.parent)
    assert bad.returncode == 1 and "not a valid float" in bad.stderr and "Traceback" not in bad.stderr


def test_model_presets_fill_only_unset_values_and_say_so(tiny_lm, demo_retriever) -> None:
    import dataclasses

    from explorer.methods.presets import preset_for

    preset = preset_for("SmolLM2-135M-Instruct", "dragin", "paper")
    assert preset and preset_for("SmolLM2-135M-Instruct", "dragin", "reference") == {}
    named = dataclasses.replace(tiny_lm, name="SmolLM2-135M-Instruct")
    runtime = Runtime(engine=Engine(named), retriever=demo_retriever, corpus={"name": "demo"})
    trace = run_question("dragin", SAVILLE, runtime, variant="paper", config={"max_length": 8, "answer_tokens": 2})
    assert trace.config["threshold"] == preset["threshold"]
    note = trace.of_kind("note")[0].payload
    assert note["preset"] == preset and note["paper_defaults"] == {"threshold": 1.2}
    given = run_question("dragin", SAVILLE, runtime, variant="paper",
                         config={"max_length": 8, "answer_tokens": 2, "threshold": 0.9})
    assert given.config["threshold"] == 0.9
    assert not [n for n in given.of_kind("note") if "preset" in n.payload]
