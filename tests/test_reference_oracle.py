"""Differential tests: the reference variants and an independent oracle of the authors' code agree.

The oracle (tests/reference_oracle.py) follows the authors' algorithm step by step with its own
code; both it and the methods' decision functions are driven from the same recorded model
outputs (tokens, entropies, log-probabilities, last-layer attention), captured straight from the
model with ``model.generate`` and a forward pass, and every decision must be identical: whether a
chunk fires, which sentence, the kept text, the flagged words, the re-encoded QFS text and the
query; for FLARE's baseline the sentence, the kept text and the masked sentence. Twenty prompts run
on the tiny random model, three on the embedded model, at two thresholds each (benchmarks/
bench_reference_agreement.py compares many more prompts of the embedded model).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from explorer.engine.generation import Engine
from explorer.engine.language import get_language
from explorer.engine.signals import merge_words
from explorer.methods import common, prompts
from explorer.methods import reference_rules as rules
from explorer.methods.dragin import qfs
from explorer.methods.dragin.method import reference_word_scores
from tests import reference_oracle as oracle

QUESTIONS = [json.loads(line)["question"] for line in
             (Path(__file__).resolve().parent.parent / "corpora/demo/questions.jsonl").read_text().splitlines()
             if line.strip()]


def prompt_text(question: str) -> str:
    shots = prompts.exemplars(question, "auto", 6, separator="\n")
    return "".join(text for _, text in prompts.build_prompt(question, shots=shots, answer_raw=""))


def compare_dragin(engine: Engine, model, question: str, rec: oracle.Recording, threshold: float) -> bool:
    """Both decide on ``rec``; returns whether it fired (after asserting every decision matches)."""
    lang = get_language()
    words, attns, ents = oracle.generate_attn(rec)
    expected = oracle.modifier(rec.text, words, attns, ents, threshold)
    pieces = engine.token_texts(rec.ids, special=True)
    assert pieces == rec.pieces
    scores = reference_word_scores(pieces, [i in engine.special_ids for i in rec.ids], rec.entropies, rec.heads)
    assert [w.text for w in scores.words] == words
    _units, decision = rules.attention_decision(rec.text, [w.text for w in scores.words], scores.attention,
                                                scores.entropy, threshold, lang)
    assert (decision is not None) == expected.fired, (question, threshold)
    if decision is None:
        return False
    assert decision.sentence == expected.sentence
    assert decision.kept_text == expected.prev
    assert decision.word_texts == expected.curr_words
    assert [int(h) for h in decision.hits] == expected.curr_hit
    all_text = oracle.qfs_text(question, "", expected.prev, expected.curr_words)
    assert question + " " + "" + " " + decision.kept_text + " " + " ".join(decision.word_texts) == all_text
    ids, attention = oracle.qfs_attention(model, engine.tokenizer, all_text)
    assert engine.tokenize(all_text, special=True) == ids
    qwords = merge_words(engine.token_texts(ids, special=True), [i in engine.special_ids for i in ids])
    found = rules.real_words_query([(w.start, w.end, w.text) for w in qwords], attention.double().numpy(),
                                   len(decision.word_texts), decision.hits, 35, rules.real_words(all_text, lang))
    assert found.query == oracle.keep_real_words(engine.tokenizer, ids, attention, all_text, expected.curr_words,
                                                 expected.curr_hit, 35)
    # The method computes only the sentence's attention rows (memory linear in the text): same query.
    made = qfs.reference_query(engine, question + " " + "" + " " + decision.kept_text, decision.word_texts,
                               decision.hits, 35)
    assert made.query == common.truncate_query(engine, found.query, 64)
    return True


def compare_flare(engine: Engine, rec: oracle.Recording, threshold: float) -> bool:
    expected = oracle.token_modifier(rec.text, rec.single, rec.logprobs, threshold)
    tokens = [engine.decode([i], special=True) for i in rec.ids]
    assert tokens == rec.single
    _units, decision = rules.token_decision(rec.text, tokens, rec.logprobs, threshold, get_language())
    assert (decision is not None) == expected.fired
    if decision is None:
        return False
    assert (decision.sentence, decision.kept_text, decision.masked_sentence) == \
        (expected.sentence, expected.prev, expected.curr)
    return True


def run_matrix(engine: Engine, model, questions: list[str], max_new: int, dragin_thresholds: tuple[float, float],
               flare_thresholds: tuple[float, float]) -> tuple[list[bool], list[bool]]:
    fired_dragin, fired_flare = [], []
    for question in questions:
        rec = oracle.record(model, engine.tokenizer, prompt_text(question), max_new)
        assert rec.text == engine.decode(rec.ids, special=True)
        for threshold in dragin_thresholds:
            fired_dragin.append(compare_dragin(engine, model, question, rec, threshold))
        for threshold in flare_thresholds:
            fired_flare.append(compare_flare(engine, rec, threshold))
    return fired_dragin, fired_flare


def test_twenty_tiny_model_prompts_decide_alike(tiny_lm) -> None:
    from explorer.engine.loader import tiny_random_model

    model = tiny_random_model(seed=0).model  # the oracle's own copy, plain eager attention
    engine = Engine(tiny_lm)
    dragin, flare = run_matrix(engine, model, QUESTIONS[:20], 40, (40.0, 75.0), (0.5, 1.0))
    # Both thresholds must exercise both outcomes somewhere, or the comparison proves little.
    assert any(dragin) and not all(dragin)
    assert any(flare) and not all(flare)


#: Demo questions 21, 22 and 27: on the first two DRAGIN fires at the low threshold only (its query
#: step is compared) and FLARE at both; on the third neither DRAGIN threshold fires and FLARE fires at
#: the low one only, so every outcome of both rules is met at ~17 s a prompt.
EMBEDDED_QUESTIONS = [QUESTIONS[20], QUESTIONS[21], QUESTIONS[26]]


@pytest.mark.slow
def test_three_embedded_model_prompts_decide_alike(embedded_lm) -> None:
    from explorer.engine.loader import load_model

    model = load_model("embedded", attn_implementation="eager").model
    engine = Engine(embedded_lm)
    dragin, flare = run_matrix(engine, model, EMBEDDED_QUESTIONS, 48, (4.0, 12.0), (0.15, 0.4))
    assert any(dragin) and not all(dragin)
    assert any(flare) and not all(flare)


def test_query_truncation_matches_the_tokenizer_left_truncation(tiny_lm) -> None:
    from explorer.methods.common import truncate_query

    engine = Engine(tiny_lm)
    long_query = " ".join(f"word{i}" for i in range(80))
    assert truncate_query(engine, long_query, 64) == oracle.truncate_query(engine.tokenizer, long_query, 64)
    assert truncate_query(engine, "short query", 64) == oracle.truncate_query(engine.tokenizer, "short query", 64)
