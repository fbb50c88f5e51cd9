"""SEAKR's self-aware reasoning: answer from the rationales and from the kept passages, keep the surer one.

(a) Rationales: the rationales (without any answer sentence they already hold) are followed by
"So the answer is" and the model completes it. (b) Knowledge: every kept passage goes into the
context block and the model reasons from scratch with chain-of-thought. Each context's U is
computed with the same sampler as the steps; the answer whose context has the lower U wins. As in
the authors' code, an option with no answer (or "unknown") loses to one that has an answer, and
one without a score loses to one with a score.
"""

from __future__ import annotations

from typing import Any

from explorer.engine.language import get_language
from explorer.methods import prompts
from explorer.methods.seakr.contexts import context, measure_context
from explorer.retrieval.base import Hit
from explorer.trace import TraceRecorder, register_event_kind

register_event_kind(
    "choice", ("options", "chosen", "reason"),
    "a choice between alternative outputs (the answer from the rationales vs from the passages): options (each "
    "with strategy, answer, value), chosen (a strategy), reason")

ANSWER_STOPS = ("\n", *prompts.STOP_STRINGS)


def without_answer(rationales: list[str]) -> list[str]:
    """The rationales with every sentence that states the answer removed (empty rationales dropped)."""
    lang = get_language()
    out = []
    for r in rationales:
        kept = " ".join(s.text.strip() for s in lang.sentences(r) if "the answer is" not in s.text.lower())
        if kept.strip():
            out.append(kept)
    return out


def _usable(answer: str | None) -> bool:
    return bool(answer) and "unknown" not in answer.lower()


def conclude(engine: Any, cfg: Any, rec: TraceRecorder, question: str, shots: str, rationales: list[str],
             knowledge: list[Hit]) -> None:
    """Answer both ways, record the choice, and set the trace's output and answer (``cfg``: SEAKR's config)."""
    rec.step += 1
    # (a) from the rationales
    body = without_answer(rationales)
    lead = prompts.join_text(*body, prompts.ANSWER_PHRASE)
    ma = measure_context(engine, cfg, rec, context(question, shots, body, [], prompts.ANSWER_PHRASE),
                            purpose="answer-rationales", context="answer-rationales",
                            max_new_tokens=cfg.answer_tokens, stops=ANSWER_STOPS, sentence_end=True)
    text_a = lead + ma.greedy.text.rstrip()
    # (b) from the kept passages, with chain-of-thought
    segments = prompts.build_prompt(question, shots=shots, hits=knowledge)
    mb = measure_context(engine, cfg, rec, segments, purpose="answer-knowledge", context="answer-knowledge",
                            max_new_tokens=cfg.max_length, stops=prompts.STOP_STRINGS, sentence_end=False,
                            meta={"passages": [h.passage.id for h in knowledge]})
    text_b, completed = mb.greedy.text.strip(), False
    if not prompts.has_answer(text_b):
        lead_b = prompts.join_text(text_b, prompts.ANSWER_PHRASE)
        gen = engine.generate(prompts.build_prompt(question, shots=shots, hits=knowledge, answer_so_far=lead_b),
                              max_new_tokens=cfg.answer_tokens, purpose="answer", rec=rec, attention=False,
                              stop_strings=("\n",), meta={"appended": prompts.ANSWER_PHRASE})
        text_b, completed = lead_b + gen.text.rstrip(), True
    options: list[dict[str, Any]] = [
        {"strategy": "rationales", "text": text_a, "answer": prompts.extract_answer(text_a), "value": ma.value,
         "span": ma.batch.event_id, "uncertainty_event": ma.event_ids.get(cfg.estimator), "completed_phrase": True},
        {"strategy": "knowledge", "text": text_b, "answer": prompts.extract_answer(text_b), "value": mb.value,
         "span": mb.batch.event_id, "uncertainty_event": mb.event_ids.get(cfg.estimator),
         "completed_phrase": completed, "passages": [h.passage.id for h in knowledge]},
    ]
    chosen, reason = _choose(options)
    rec.add("choice", options=options, chosen=chosen["strategy"], signal=f"U({cfg.estimator})", reason=reason)
    rec.trace.output = chosen["text"]
    rec.trace.answer = chosen["answer"]
    rec.add("answer", text=chosen["text"], answer=chosen["answer"], completed_phrase=chosen["completed_phrase"],
            strategy=chosen["strategy"])


def _choose(options: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
    a, b = options
    if _usable(a["answer"]) != _usable(b["answer"]):
        winner = a if _usable(a["answer"]) else b
        return winner, f"only the {winner['strategy']} answer states a usable answer"
    if (a["value"] is None) != (b["value"] is None):
        winner = a if a["value"] is not None else b
        return winner, f"only the {winner['strategy']} context has an uncertainty score"
    if a["value"] is None:
        return a, "neither context has an uncertainty score; the rationales' answer is kept"
    winner = a if a["value"] <= b["value"] else b
    return winner, f"the {winner['strategy']} context is less uncertain ({min(a['value'], b['value']):.3f} vs " \
                   f"{max(a['value'], b['value']):.3f})"
