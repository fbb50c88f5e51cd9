"""The reference variants decide what the DRAGIN authors' code decides: one hand-worked example per rule.

Each example is small enough to follow on paper (the words, offsets and sentences are spelled
out), and each fails on a rule the reference variants used to get wrong: the answer sentence went
unchecked, a later sentence lost its first word, a continuation kept one word of its second
sentence, the stop phrase ignored case, prompts were tokenized segment by segment, stop strings cut
the chunks, and FLARE's baseline scored sentences by its own token mapping instead of the code's.
"""

from __future__ import annotations

import pytest

from explorer.engine.generation import Engine, Generation
from explorer.methods import common, prompts
from explorer.methods import reference_rules as rules
from explorer.methods.base import run_question
from explorer.methods.resolve import resolve_config
from explorer.runtime import Runtime
from explorer.trace import TokenSignal, Trace, TraceRecorder

LEWISTON = "What is the seating capacity of the arena where the Lewiston Maineiacs played their home games?"


def generation(pieces: list[str]) -> Generation:
    """A span built by hand: tokens with these texts (signals do not matter to the cut rules)."""
    tokens = [TokenSignal(id=i, text=t, prob=0.5, entropy=1.0, top=[]) for i, t in enumerate(pieces)]
    return Generation(purpose="draft", prompt="", prompt_ids=[], segments=[], ids=list(range(len(pieces))),
                      tokens=tokens, text="".join(pieces), stopped_by="max_tokens", event_id=0)


def recorder() -> TraceRecorder:
    rec = TraceRecorder(Trace(question="q", method="dragin", variant="reference", config={}, model={}))
    rec.add("generation", purpose="draft", text="", tokens=[])
    return rec


@pytest.fixture(scope="module")
def tiny_runtime(tiny_lm, demo_retriever) -> Runtime:
    return Runtime(engine=Engine(tiny_lm), retriever=demo_retriever, corpus={"name": "demo"})


# -- 1. the sentence holding "the answer is" is checked like any other ----------------------------

def test_the_answer_sentence_can_fire(language) -> None:
    text = "Paris is big. So the answer is Lyon."
    words = ["Paris", "is", "big.", "So", "the", "answer", "is", "Lyon."]
    attention = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 5.0]
    entropy = [0.1] * 7 + [2.0]
    units, decision = rules.attention_decision(text, words, attention, entropy, 1.0, language)
    # Sentence 0: each word 1/3 x 3 x 0.1 = 0.1. Sentence 1: "Lyon." 5/9 x 5 x 2.0 = 5.56 > 1.
    assert [round(u["value"], 4) for u in units[:3]] == [0.1, 0.1, 0.1]
    assert decision is not None and decision.sentence == 1
    assert units[-1]["value"] == pytest.approx(5 / 9 * 5 * 2.0)
    assert decision.kept_text == "Paris is big."
    assert decision.hits == [False, False, False, False, True]  # only "Lyon." is over θ (and a real word)


# -- 2. the first word of a later sentence is scored ----------------------------------------------

def test_words_belong_to_the_sentence_their_text_is_found_in(language) -> None:
    # Tokens " Tom| won|.| David| lost| the| race|." -> words Tom, won., David, lost, the, race.
    # " David" starts at the space BEFORE the sentence "David lost the race." (char 8 vs 9), which
    # is how the old offset rule lost it; the authors find the sentence text in the joined words.
    text = "Tom won. David lost the race."
    words = ["Tom", "won.", "David", "lost", "the", "race."]
    assert rules.sentence_word_ranges(["Tom won.", "David lost the race."], words) == [(0, 2), (2, 6)]
    units, decision = rules.attention_decision(text, words, [1, 1, 6, 1, 1, 1], [1.0] * 6, 2.0, language)
    assert [u["sentence"] for u in units] == [0, 0, 1, 1, 1, 1]
    # Normalised over 4 words: David = 6/9 x 4 = 2.67 > 2 fires; without David nothing would.
    assert decision is not None and decision.sentence == 1 and units[2]["text"] == "David"
    assert units[2]["value"] == pytest.approx(6 / 9 * 4)
    assert decision.hits[0] and decision.kept_text == "Tom won."


def test_a_sentence_starts_at_its_first_non_space_character() -> None:
    gen = generation(["Tom", " won", ".", " David", " lost", "."])
    assert gen.text.index("David") == 9 and gen.offsets()[3] == 8
    assert common.token_at_char(gen, 9) == 3  # " David" begins where "David" does
    rec = recorder()
    assert common.cut(rec, gen, common.token_at_char(gen, 9), reason="test") == "Tom won."


def test_a_sentence_never_found_gives_its_words_to_the_next() -> None:
    # A newline inside the first sentence: "in\n1921" is never a substring of the single-spaced words.
    ranges = rules.sentence_word_ranges(["Built in\n1921.", "It stands."], ["Built", "in", "1921.", "It", "stands."])
    assert ranges == [(0, 0), (0, 5)]


# -- 3. exactly the first sentence of a continuation is kept --------------------------------------

def test_exactly_the_first_sentence_is_kept(language) -> None:
    assert rules.first_sentence(" It opened in 1921. David Smith ran it.", language) == "It opened in 1921."
    gen = generation(["It", " opened", " in", " 1921", ".", " David", " Smith", " ran", " it", "."])
    rec = recorder()
    kept = common.keep_first_sentence(rec, gen)
    assert kept == "It opened in 1921."  # not "It opened in 1921. David"
    assert rec.trace.events[-1].payload["token_index"] == 5


# -- 4. the stop phrase is case-sensitive ----------------------------------------------------------

@pytest.mark.parametrize(("text", "stops"), [
    ("The answer is 4,000.", False),
    ("It seats 4,000. So the answer is 4,000.", True),
    ("THE ANSWER IS yes.", False),
])
def test_the_stop_phrase_is_matched_case_sensitively(text: str, stops: bool) -> None:
    assert rules.should_stop(text, 0, 5, max_length=100) is stops


def test_the_other_stop_rules() -> None:
    assert rules.should_stop("long text", 0, 101, max_length=100)
    assert rules.should_stop("same", len("same"), 1, max_length=100)
    assert not rules.should_stop("grew", 2, 1, max_length=100)


# -- 5. the prompt is tokenized in one call ------------------------------------------------------

def test_the_prompt_is_encoded_whole_with_segment_spans(tiny_runtime) -> None:
    engine = tiny_runtime.engine
    segments = prompts.build_prompt("What is it?", shots=prompts.exemplars("What is it?", count=2),
                                    answer_so_far="It is")
    text, ids, spans = engine.encode_segments(segments)
    assert ids == list(engine.tokenizer(text)["input_ids"])
    piecewise = [i for _, piece in segments for i in engine.tokenize(piece)]
    assert piecewise != ids  # "Question: " + "What" and "\n\n" + "Question" tokenize differently in pieces
    assert spans[0][1] == 0 and spans[-1][2] == len(ids)
    assert all(a[2] == b[1] for a, b in zip(spans, spans[1:], strict=False))
    question = next(s for s in spans if s[0] == "question")
    first = engine.tokenizer.decode(ids[question[1]:question[1] + 1])
    assert first == " What"  # the space that closes "Question: " goes with the question's first word


# -- 6. no stop strings, the end-of-turn token kept, the QFS text spaced as the code spaces it --------

def test_keep_special_keeps_the_token_that_ended_the_span(tiny_runtime) -> None:
    engine = tiny_runtime.engine
    probe = engine.generate("Question: where?\nAnswer:", max_new_tokens=3, attention=False)
    first = probe.ids[0]
    saved = engine.eos_ids
    engine.eos_ids = frozenset({first})
    try:
        kept = engine.generate("Question: where?\nAnswer:", max_new_tokens=3, attention=False, keep_special=True)
        dropped = engine.generate("Question: where?\nAnswer:", max_new_tokens=3, attention=False)
    finally:
        engine.eos_ids = saved
    assert kept.ids == [first] and kept.stopped_by == "eos" and kept.text == probe.tokens[0].text
    assert dropped.ids == [] and dropped.stopped_by == "eos"
    eos = engine.tokenizer.eos_token_id
    assert engine.token_texts([first, eos], special=True)[-1] == engine.tokenizer.eos_token
    assert engine.token_texts([first, eos])[-1] == ""


def test_reference_chunks_have_no_stop_strings_and_qfs_reads_the_code_spacing(tiny_runtime) -> None:
    trace = run_question("dragin", LEWISTON, tiny_runtime, variant="reference",
                         config={"max_length": 48, "threshold": 1.0, "answer_tokens": 2})
    drafts = [g.payload for g in trace.of_kind("generation") if g.payload["purpose"] in ("draft", "continuation")]
    assert drafts and all(g["stopped_by"] in ("max_tokens", "eos") for g in drafts)
    first_query = trace.of_kind("query")[0].payload
    cut = trace.of_kind("truncation")[0].payload
    words = " ".join(first_query["candidates"][i]["text"] for i in range(len(first_query["candidates"]))
                     if first_query["candidates"][i]["segment"] == "current")
    # Round one: nothing written yet, so question + " " + "" + " " + kept: a double space.
    assert first_query["encoded"] == LEWISTON + " " + "" + " " + cut["kept_as"] + " " + words


# -- 7. FLARE's reference: the code's token walk, its extra token, its masking ------------------------

def test_flare_reference_walk_scores_one_extra_token(language) -> None:
    text = "Tom won. He lost."
    tokens = ["Tom", " won", ".", " He", " lost", "."]
    # The walk through "Tom won." reaches 3 tokens; the mean runs over 4 (" He" too); sentence 2's
    # walk starts after " He" and reaches " lost" and ".".
    assert rules.sentence_token_end("Tom won.", tokens, 0) == 3
    logprobs = [-0.01, -0.01, -0.01, -4.6, -0.01, -0.01]  # " He" has p = 0.01
    units, decision = rules.token_decision(text, tokens, logprobs, 0.2, language)
    assert [u["tokens"] for u in units] == [[0, 4], [4, 6]]
    assert units[0]["value"] == pytest.approx((3 * (1 - 0.99005) + (1 - 0.01005)) / 4, abs=1e-4)
    assert decision is not None and decision.sentence == 0 and decision.kept_text == ""
    # " He" is not in "Tom won." from pos 8: find gives -1, so the code masks one character early.
    assert decision.masked_sentence == "Tom won[xxx]"
    assert decision.masked_tokens == [" He"]


def test_flare_reference_tokens_with_a_leading_space_miss_a_later_sentence(language) -> None:
    assert rules.sentence_token_end("He lost.", [" He", " lost", "."], 0) == 0


def test_flare_reference_starts_without_passages(tiny_runtime) -> None:
    trace = run_question("flare", LEWISTON, tiny_runtime, variant="reference",
                         config={"max_length": 32, "threshold": 0.5, "answer_tokens": 2})
    first_draft = trace.of_kind("generation")[0].id
    assert trace.of_kind("query") and all(q.id > first_draft for q in trace.of_kind("query"))
    assert trace.config["initial_retrieval"] is False and trace.config_sources["initial_retrieval"] == "variant"
    drafts = [g.payload for g in trace.of_kind("generation") if g.payload["purpose"] == "draft"]
    assert drafts and all("context" not in [s[0] for s in g["prompt_segments"]] for g in drafts)
    assert any(c.payload["retrieval"] for c in trace.of_kind("continuation"))


# -- one configuration resolution --------------------------------------------------------------

def test_config_layers_and_their_sources() -> None:
    smol = "SmolLM2-135M-Instruct"
    paper = resolve_config("dragin", "paper", smol, {})
    assert paper.config.threshold == 0.3 and paper.sources["threshold"] == "preset"
    assert paper.sources["top_n"] == "paper"
    given = resolve_config("dragin", "paper", smol, {"threshold": "0.9"})
    assert given.config.threshold == 0.9 and given.sources["threshold"] == "user"
    other = resolve_config("dragin", "paper", "another-model", {})
    assert other.config.threshold == 1.2 and other.sources["threshold"] == "paper"
    flare = resolve_config("flare", "reference", None, {})
    assert flare.config.initial_retrieval is False and flare.sources["initial_retrieval"] == "variant"
    assert resolve_config("flare", "paper", None, {}).config.initial_retrieval is True


def test_a_search_that_finds_nothing_keeps_the_context_line_and_its_instruction(tiny_lm, tmp_path) -> None:
    """The authors' prompt after a search always holds ``Context:`` and ``Answer in the same format as before.``
    (their retriever pads the list with empty passages); the reference variants keep both when nothing is found,
    leaving out the empty entries; the paper variant drops the block."""
    import json

    from explorer.retrieval.bm25 import BM25Retriever
    from explorer.retrieval.corpora import load_corpus

    corpus = tmp_path / "nothing.jsonl"
    corpus.write_text(json.dumps({"id": "z", "title": "Qwxzv", "text": "Vzxwq qzvxw."}) + "\n", encoding="utf-8")
    runtime = Runtime(engine=Engine(tiny_lm), retriever=BM25Retriever(load_corpus(corpus), use_cache=False),
                      corpus={"name": "nothing"})
    small = {"max_length": 14, "fewshot": 1, "max_rounds": 1, "threshold": 0.0}
    for method, variant in (("dragin", "reference"), ("flare", "reference"), ("dragin", "paper")):
        trace = run_question(method, "Who lived longer, Alejandro Jodorowsky or Philip Saville?", runtime,
                             variant=variant, config=small)
        assert trace.status == "complete", trace.error
        assert [e.payload["hits"] for e in trace.of_kind("retrieval")] == [[]], (method, variant)
        searched = trace.of_kind("retrieval")[0].id
        prompt = next(e.payload["prompt"] for e in trace.of_kind("generation") if e.id > searched)  # written after
        block = f"Context:\n{prompts.CONTEXT_INSTRUCTION}\n"
        assert (block in prompt) == (variant == "reference"), (method, variant)
        assert ("Context:" in prompt) == (variant == "reference")
