"""SEAKR's reference variant: the authors' reasoning loop (``MultiHopReasoner.solve``) on the project's engine.

Each step measures its context (greedy step plus k samples, the authors' stop strings, end states
read where the last sampled token was); a step that states an answer ends the reasoning before any
retrieval decision; otherwise an empty step or U > δ retrieves. Retrieval takes the step's sure
words as the query, tries each new passage beside the kept ones, and a stable sort by U keeps one.
The reasoning ends at an answer, a repeated query, a retrieval without new passages, or the step
or passage limit. Then the question is answered from the steps (as numbered passages) and from the
kept passages, and the answer whose context is less uncertain wins (a tie goes to the passages).
The rules are in :mod:`explorer.methods.seakr.reference`; this module only drives them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from explorer.engine.attention import decoder_layers
from explorer.engine.language import get_language
from explorer.engine.uncertainty import Measurement
from explorer.methods import common, prompts
from explorer.methods.seakr import reference as rules
from explorer.methods.seakr.config import SeakrConfig
from explorer.methods.seakr.contexts import measure_context
from explorer.retrieval.base import Hit, Retriever
from explorer.trace import TraceRecorder


def reference_layer(model: Any) -> int:
    """The layer just below the middle, L // 2 - 1: the authors' index 15 of Llama-2-7B's 32 layers."""
    return max(len(decoder_layers(model)) // 2 - 1, 0)


@dataclass
class _Step:
    text: str
    u: float


@dataclass
class AuthorsLoop:
    """One question's run: the steps so far, the kept passages and the queries searched."""

    cfg: SeakrConfig
    engine: Any
    retriever: Retriever
    rec: TraceRecorder
    question: str
    shots: str
    steps: list[_Step] = field(default_factory=list)
    docs: list[Hit] = field(default_factory=list)
    searched: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.lang = get_language()
        self.layer = self.cfg.layer if self.cfg.layer is not None else reference_layer(self.engine.model)

    # -- calls ------------------------------------------------------------------------------------
    def segments(self, docs: list[Hit], steps: list[str] | None = None, force: bool = False) -> prompts.Segments:
        texts = [prompts.passage_text(h.passage) for h in docs]
        return rules.prompt_segments(self.question, self.shots, steps or [], texts, force)

    def measure(self, segments: prompts.Segments, *, purpose: str, context: str, stops: tuple[str, ...],
                max_new_tokens: int, meta: dict[str, Any] | None = None) -> Measurement:
        return measure_context(self.engine, self.cfg, self.rec, segments, purpose=purpose, context=context,
                               max_new_tokens=max_new_tokens, stops=stops, sentence_end=False,
                               meta={"stops": list(stops), **(meta or {})}, end_state="replace_last",
                               gram_min_samples=1, layer=self.layer)

    # -- the loop ---------------------------------------------------------------------------------
    def solve(self) -> None:
        cfg, rec = self.cfg, self.rec
        while True:  # every round adds a step or ends, so max_steps bounds it
            rec.step = len(self.steps)
            contents = [s.text for s in self.steps]
            m = self.measure(self.segments(self.docs, contents), purpose="pseudo", context="step",
                             stops=rules.step_stops(bool(contents)), max_new_tokens=cfg.step_tokens)
            text, u = m.greedy.text, rules.read_u(m.value)
            answered = bool(rules.final_answer(text))
            retrieve = self._check(m, u, answered)
            if answered and not retrieve:
                self.steps.append(_Step(text, u))
                rec.add("note", message="the step states an answer; the reasoning ends here")
                break
            if retrieve:
                found = self._retrieve(m)
                if found is None:
                    break
                self.docs.append(found[0])
                self.steps.append(found[1])
                if rules.final_answer(found[1].text):
                    rec.add("note", message="the step written with the kept passage states an answer")
                    break
            else:
                self.steps.append(_Step(text, u))
            if len(self.steps) >= cfg.max_steps or len(self.docs) >= cfg.max_docs:
                break
        self.conclude()

    def _check(self, m: Measurement, u: float, answered: bool) -> bool:
        cfg, text = self.cfg, m.greedy.text
        failed = rules.direct_failed(text, u, cfg.delta)
        wanted = failed and not answered
        unit = {"text": text, "value": u, "eligible": True, "estimate": m.value,
                "estimates": {n: e.value for n, e in m.estimates.items()},
                "uncertainty_event": m.event_ids.get(cfg.estimator)}
        fired = common.check(self.rec, span=m.batch.event_id, signal=f"U({cfg.estimator})", threshold=cfg.delta,
                             compare=">", units=[unit], fired=0 if wanted else None, unit="step",
                             rule="retrieve before this step when its greedy text is empty or U(c) exceeds δ, "
                                  "unless the text already states an answer (no score reads as 0)",
                             empty=not text.strip(), answered=answered) is not None
        if fired:
            self.rec.add("trigger", span=m.batch.event_id, token_index=0, signal=f"U({cfg.estimator})", value=u,
                         threshold=cfg.delta, token=text, unit="step")
        return fired

    def _retrieve(self, m: Measurement) -> tuple[Hit, _Step] | None:
        cfg, rec, greedy = self.cfg, self.rec, m.greedy
        last = self.steps[-1].text if self.steps else ""
        built = rules.build_query(greedy.text, [t.text for t in greedy.tokens], [t.prob for t in greedy.tokens],
                                  self.question, last, cfg.query_threshold, self.lang)
        if built.query in self.searched:
            rec.add("note", message=f"the query {built.query!r} was searched before; the reasoning ends here")
            return None
        self.searched.add(built.query)
        hits, retrieval = common.search(rec, self.retriever,
                                        common.truncate_query(self.engine, built.query, rules.MAX_QUERY_TOKENS),
                                        cfg.candidates, source="pseudo-rationale", pseudo=greedy.text,
                                        words=built.words, built=built.raw, filtered=built.query,
                                        fallback_to_question=built.fallback)
        held = {h.passage.id for h in self.docs}
        fresh = [h for h in hits if h.passage.id not in held]
        if not fresh:
            rec.add("note", message="the retrieval brought no new passage; the reasoning ends here")
            return None
        contents = [s.text for s in self.steps]
        tried: list[tuple[Hit, Measurement]] = []
        for hit in fresh:
            tried.append((hit, self.measure(self.segments([*self.docs, hit], contents), purpose="rerank",
                                            context="rerank", stops=rules.step_stops(bool(contents)),
                                            max_new_tokens=cfg.step_tokens,
                                            meta={"passage": hit.passage.id, "retrieval": retrieval})))
        order = rules.rerank_order([(mh.greedy.text, rules.read_u(mh.value)) for _h, mh in tried])
        best_hit, best = tried[order[0]]
        rec.add("rerank", retrieval=retrieval, signal=f"U({cfg.estimator})", chosen=best_hit.passage.id,
                order=[tried[i][0].passage.id for i in order],
                candidates=[{"id": h.passage.id, "title": h.passage.title, "rank": h.rank, "score": h.score,
                             "value": rules.read_u(mh.value), "rationale": mh.greedy.text,
                             "span": mh.batch.event_id, "uncertainty_event": mh.event_ids.get(cfg.estimator)}
                            for h, mh in tried],
                skipped=[h.passage.id for h in hits if h.passage.id in held])
        common.continuation(rec, best.greedy, retrieval)
        return best_hit, _Step(best.greedy.text, rules.read_u(best.value))

    # -- the two answers --------------------------------------------------------------------------
    def conclude(self) -> None:
        cfg, rec = self.cfg, self.rec
        rec.step = len(self.steps) + 1
        contents = [s.text for s in self.steps]
        if contents:
            last = rules.filter_last_step(contents[-1], self.lang)
            contents = contents[:-1] + ([last] if last.strip() else [])
        # (a) the steps, given as numbered passages
        seg_a = rules.prompt_segments(self.question, self.shots, [], contents)
        stops_a = rules.read_steps_stops()
        ma = self.measure(seg_a, purpose="answer-rationales", context="answer-rationales", stops=stops_a,
                          max_new_tokens=cfg.max_length, meta={"steps": contents})
        text_a, answer_a, forced_a = ma.greedy.text, rules.final_answer(ma.greedy.text), False
        if not answer_a:
            gen = self.engine.generate(rules.prompt_segments(self.question, self.shots, [], contents, force=True),
                                       max_new_tokens=cfg.answer_tokens, purpose="answer", rec=rec, attention=False,
                                       stop_strings=stops_a, meta={"appended": rules.FORCE, "stops": list(stops_a)})
            answer_a, forced_a = gen.text, True
            text_a = text_a + rules.FORCE.rstrip() + " " + gen.text
        u_a = rules.read_u(ma.value)
        # (b) the kept passages
        seg_b = self.segments(self.docs)
        mb = self.measure(seg_b, purpose="answer-knowledge", context="answer-knowledge",
                          stops=rules.read_docs_stops(False), max_new_tokens=cfg.max_length,
                          meta={"passages": [h.passage.id for h in self.docs]})
        text_b, answer_b, forced_b, scored_b = mb.greedy.text, rules.final_answer(mb.greedy.text), False, mb
        if answer_b is None:
            scored_b = self.measure(self.segments(self.docs, force=True), purpose="answer", context="answer-forced",
                                    stops=rules.read_docs_stops(True), max_new_tokens=cfg.answer_tokens,
                                    meta={"appended": rules.FORCE, "passages": [h.passage.id for h in self.docs]})
            answer_b, forced_b = scored_b.greedy.text, True
            text_b = text_b + " So the answer is " + scored_b.greedy.text
        u_b = rules.read_u(scored_b.value)
        options: list[dict[str, Any]] = [
            {"strategy": "rationales", "text": text_a, "answer": answer_a, "value": u_a, "span": ma.batch.event_id,
             "uncertainty_event": ma.event_ids.get(cfg.estimator), "completed_phrase": forced_a},
            {"strategy": "knowledge", "text": text_b, "answer": answer_b, "value": u_b,
             "span": scored_b.batch.event_id, "uncertainty_event": scored_b.event_ids.get(cfg.estimator),
             "completed_phrase": forced_b, "passages": [h.passage.id for h in self.docs]},
        ]
        winner, reason = rules.choose(answer_a, u_a, answer_b, u_b)
        chosen = options[0] if winner == "steps" else options[1]
        rec.add("choice", options=options, chosen=chosen["strategy"], signal=f"U({cfg.estimator})", reason=reason)
        rec.trace.output = chosen["text"]
        rec.trace.answer = chosen["answer"].strip() if chosen["answer"] is not None else None
        rec.add("answer", text=chosen["text"], answer=rec.trace.answer, completed_phrase=chosen["completed_phrase"],
                strategy=chosen["strategy"])


def run(cfg: SeakrConfig, engine: Any, retriever: Retriever, question: str, rec: TraceRecorder) -> None:
    """The reference variant's whole run for ``question`` on the method's engine and retriever."""
    AuthorsLoop(cfg, engine, retriever, rec, rules.clean_question(question), common.shots(cfg, question)).solve()
