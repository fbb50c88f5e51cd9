"""Probing-RAG (Baek et al., NAACL 2025 Findings, arXiv 2410.13339): retrieve when a prober on an
intermediate layer's hidden states says the model's own answer is likely wrong.

Rules, from the authors' ``exp_rag.py`` (see docs/probing-rag.md for the full reading):

1. Generate the whole answer with no passages.
2. Pool the residual stream after layer ``layer`` over the answer's tokens and apply the prober:
   p = P(needs retrieval). The authors retrieve unless P(correct) > P(wrong) + θ; with one prober and
   two classes that is p > (1 - θ) / 2, so θ = 0 is the threshold p > 0.5 used here.
3. If it fires, search (the first query is the question, later ones the previous answer), regenerate
   the answer with the passages, and probe the new answer; repeat while it fires, at most
   ``max_retrievals`` searches (the authors' loop stops after four).
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.config import param
from explorer.methods import common, prompts
from explorer.methods.base import Method, register
from explorer.methods.probing_rag.prober import Prober, answer_state, load_prober
from explorer.trace import TraceRecorder


@dataclass
class ProbingConfig(common.RetrievalConfig):
    """Probing-RAG's constants: the prober's threshold and the cap on searches."""

    threshold: float = param(0.5, lo=0.0, hi=1.0,
                             help="retrieve when the prober's P(needs retrieval) is above this "
                                  "(0.5: the authors' margin θ = 0)")
    max_retrievals: int = param(4, lo=1, hi=16, help="most searches per question (the authors' loop: 4)")


@register
class ProbingRAG(Method, name="probing_rag", title="Probing-RAG (hidden-state prober)", config=ProbingConfig):
    def prober(self) -> Prober:
        return load_prober(self.engine.model.config)

    def run(self, question: str, rec: TraceRecorder) -> None:
        cfg = self.config
        prober = self.prober()
        rec.add("note", message=f"prober {prober.key} reads layer {prober.layer} "
                                f"(held-out accuracy {prober.manifest.get('held_out_accuracy', '?')})")
        shots = common.shots(cfg, question)
        hits: list = []
        retrieval = None
        query = question
        searches = 0
        while True:
            segments = prompts.build_prompt(question, shots=shots, hits=hits)
            gen = common.generate(self.engine, rec, segments, max_new_tokens=cfg.max_length, purpose="answer")
            if retrieval is not None:
                common.continuation(rec, gen, retrieval)
            # Under the engine's lock, as its own passes: when concurrent runs share the batch, its hidden-state
            # and attention hooks sit on this model and are live only while the batch steps under that lock.
            with self.engine.lock:
                state = answer_state(self.engine.model, gen.prompt_ids, gen.ids, prober.layer)
            p = prober.probability(state)
            can_search = searches < cfg.max_retrievals
            fires = p > cfg.threshold
            # Once the searches are spent the answer cannot fire whatever p is: not eligible, so a what-if
            # replay of this check at another threshold keeps it unfired as the run did.
            fired = common.check(rec, span=gen.event_id, signal="prober_p", threshold=cfg.threshold, compare=">",
                                 units=[{"text": gen.text, "value": round(p, 6), "eligible": can_search}],
                                 fired=0 if fires and can_search else None,
                                 rule="P(needs retrieval) from the prober on the answer's hidden states",
                                 unit="answer",
                                 layer=prober.layer, prober=prober.key, round=searches)
            if fired is None:
                break
            hits, retrieval = common.search(rec, self.retriever, query, cfg.top_k,
                                            source="question" if searches == 0 else "previous answer")
            searches += 1
            query = gen.text.strip() or question
        common.finish(self.engine, rec, cfg, question, gen.text, hits)
