"""SEAKR: retrieve when the model's own hidden states disagree, keep the passage that makes them agree.

Per reasoning step the context (exemplars, question, the rationales so far) gets an uncertainty
U(c) from k sampled continuations (:mod:`explorer.engine.uncertainty`); the same batched call
decodes the greedy pseudo-rationale. U ≤ δ: the pseudo-rationale is the step. U > δ: the sure
words of the pseudo-rationale become the query, each of the N passages found is tried as
knowledge evidence, and the one whose context has the LOWEST U is kept; the greedy rationale of
that context is the step. The loop ends at the answer phrase, after ``max_steps`` steps or
``max_docs`` kept passages. Then the question is answered twice, from the rationales and from all
kept passages with chain-of-thought, and the answer whose context is less uncertain wins.

The paper's schematic cue "For question: [q] Next Rationale:" is realised in the shared prompt
format, which is also what its appendix B shows: "Question: q / Answer:" followed by the
rationales so far, so the sentence the model writes next is the next rationale; passages appear
as the numbered context block ("Answer in the same format as before."). Variants:

* ``paper``: a step's context holds the question and rationales only; a candidate passage is the
  one piece of knowledge evidence in its re-ranking context (section 3).
* ``reference`` (the authors' code, :mod:`explorer.methods.seakr.reference_loop`): the authors'
  prompt template, stop strings, end-state rule, query, re-ranking and answer choice; every
  context also carries all passages kept so far, and a retrieval that brings no new passage (or
  repeats an earlier query) ends the reasoning. docs/reference-departures.md lists each rule.
"""

from __future__ import annotations

from typing import Any

from explorer.engine.generation import Generation
from explorer.engine.uncertainty import Measurement
from explorer.methods import common, prompts
from explorer.methods.base import Method, register
from explorer.methods.seakr.answer import conclude
from explorer.methods.seakr.config import SeakrConfig
from explorer.methods.seakr.contexts import context, measure_context
from explorer.methods.seakr.query import build_query
from explorer.methods.seakr.reference_loop import run as run_reference
from explorer.retrieval.base import Hit
from explorer.trace import TraceRecorder

#: A step is one sentence: it ends at the sentence's end, a newline, or the start of a new exemplar.
STEP_STOPS = ("\n", *prompts.STOP_STRINGS)


@register
class Seakr(Method, name="seakr", config=SeakrConfig, variants=("paper", "reference"),
            title="SEAKR (self-aware retrieval from hidden-state consistency)"):
    def run(self, question: str, rec: TraceRecorder) -> None:
        if self.variant == "reference":
            run_reference(self.config, self.engine, self.retriever, question, rec)
            return
        cfg = self.config
        shots = common.shots(cfg, question)
        rationales: list[str] = []
        knowledge: list[Hit] = []
        for step in range(cfg.max_steps):
            rec.step = step
            m = self.uncertainty(rec, context(question, shots, rationales, []),
                                 purpose="pseudo", context="step", max_new_tokens=cfg.step_tokens, stops=STEP_STOPS,
                                 sentence_end=True)
            gen = m.greedy
            if self._check(rec, m):
                found = self._retrieve(rec, question, shots, rationales, knowledge, m)
                if found is not None:
                    knowledge.append(found[0])
                    gen = found[1]
            rationale = gen.text.strip()
            if not rationale or rationale in rationales:
                rec.add("note", message="the next step is empty or repeats an earlier one; reasoning stops here")
                break
            rationales.append(rationale)
            if prompts.has_answer(rationale) or len(knowledge) >= cfg.max_docs:
                break
        conclude(self.engine, cfg, rec, question, shots, rationales, knowledge)

    def uncertainty(self, rec: TraceRecorder, segments: prompts.Segments, **kwargs: Any) -> Measurement:
        """U(c) of one context with this run's configured sampler, layer and estimators."""
        return measure_context(self.engine, self.config, rec, segments, **kwargs)

    # -- self-aware retrieval and re-ranking --------------------------------------------------------
    def _check(self, rec: TraceRecorder, m: Measurement) -> bool:
        cfg, u = self.config, m.value
        fired = u is not None and u > cfg.delta
        unit = {"text": m.greedy.text, "value": u, "eligible": u is not None,
                "estimates": {n: e.value for n, e in m.estimates.items()},
                "uncertainty_event": m.event_ids.get(cfg.estimator)}
        fired = common.check(rec, span=m.batch.event_id, signal=f"U({cfg.estimator})", threshold=cfg.delta,
                             compare=">", units=[unit], fired=0 if fired else None, unit="step",
                             rule="retrieve before this step when the uncertainty U(c) of its context exceeds δ"
                             ) is not None
        if fired:
            rec.add("trigger", span=m.batch.event_id, token_index=0, signal=f"U({cfg.estimator})", value=u,
                    threshold=cfg.delta, token=m.greedy.text, unit="step")
        return fired

    def _retrieve(self, rec: TraceRecorder, question: str, shots: str, rationales: list[str], knowledge: list[Hit],
                  m: Measurement) -> tuple[Hit, Generation] | None:
        cfg = self.config
        query = build_query(m.greedy, question, rationales[-1] if rationales else "", cfg.query_threshold)
        hits, retrieval = common.search(rec, self.retriever, query.text, cfg.candidates, source="pseudo-rationale",
                                        pseudo=m.greedy.text, **query.details())
        held = {h.passage.id for h in knowledge}
        fresh = [h for h in hits if h.passage.id not in held]
        if not fresh:
            if hits:
                rec.add("note", message="every passage found is already kept; the step goes on without new knowledge")
            return None
        tried: list[tuple[Hit, Measurement]] = []
        for hit in fresh:
            segments = context(question, shots, rationales, [hit])
            tried.append((hit, self.uncertainty(rec, segments, purpose="rerank", context="rerank",
                                                max_new_tokens=cfg.step_tokens, stops=STEP_STOPS, sentence_end=True,
                                                meta={"passage": hit.passage.id, "retrieval": retrieval})))
        # Lowest U first; a candidate without a score or whose rationale is empty comes last.
        best_hit, best = min(tried, key=lambda t: (t[1].value is None or not t[1].greedy.text.strip(),
                                                   t[1].value if t[1].value is not None else 0.0, t[0].rank))
        rec.add("rerank", retrieval=retrieval, signal=f"U({cfg.estimator})", chosen=best_hit.passage.id,
                candidates=[{"id": h.passage.id, "title": h.passage.title, "rank": h.rank, "score": h.score,
                             "value": mh.value, "rationale": mh.greedy.text, "span": mh.batch.event_id,
                             "uncertainty_event": mh.event_ids.get(cfg.estimator)} for h, mh in tried],
                skipped=[h.passage.id for h in hits if h.passage.id in held])
        common.continuation(rec, best.greedy, retrieval)
        return best_hit, best.greedy
