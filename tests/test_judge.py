"""The model as a passage judge: one prompt layout and one call, shared by BlendFilter and DR-RAG."""

from __future__ import annotations

from explorer.engine.generation import Engine
from explorer.methods import judge
from explorer.methods.blendfilter.method import FILTER_INSTRUCTION, FILTER_LEAD, filter_prompt
from explorer.methods.drrag.method import JUDGE_INSTRUCTION, JUDGE_LEAD, judge_prompt
from explorer.retrieval.base import Hit, Passage
from explorer.trace import Trace, TraceRecorder


def test_clip_words_cuts_at_a_word_count_and_says_so() -> None:
    assert judge.clip_words("one two  three\nfour", 3) == "one two three ..."
    assert judge.clip_words("one two", 3) == "one two"
    assert judge.clip_words("one two three", 3) == "one two three"


def test_both_judges_lay_out_instruction_examples_case_and_lead() -> None:
    long = Passage("p1", "Alpha", " ".join(f"w{i}" for i in range(100)))
    short = Passage("p2", "", "a short passage")
    pair = judge_prompt("  Who came first? ", long, short, words=5)
    assert pair.startswith(JUDGE_INSTRUCTION) and pair.endswith(
        "Passage A: Alpha: w0 w1 w2 w3 ...\nPassage B: a short passage\nQuestion: Who came first?\n" + JUDGE_LEAD)
    listed = filter_prompt("Which?", [Hit(long, 2.0, 1), Hit(short, 1.0, 2)])
    assert listed.startswith(FILTER_INSTRUCTION) and listed.endswith(
        "[2] a short passage\nQuestion: Which?\n" + FILTER_LEAD)


def test_ask_records_a_short_span_without_attention_signals(tiny_lm) -> None:
    engine = Engine(tiny_lm)
    rec = TraceRecorder(Trace(question="q?", method="wo", variant="paper", config={}, model={"name": "tiny"}))
    gen = judge.ask(engine, "Is this relevant? Answer:", purpose="judge", rec=rec, max_new_tokens=2,
                    meta={"pair": ["a", "b"]})
    assert 1 <= len(gen.tokens) <= 2
    spans = [e for e in rec.trace.events if e.kind == "generation"]
    assert spans and spans[-1].payload["purpose"] == "judge" and spans[-1].payload["pair"] == ["a", "b"]
    assert all(t.amax is None for t in gen.tokens)  # no attention probe: judges need no amax
