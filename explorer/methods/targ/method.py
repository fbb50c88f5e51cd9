"""TARG (Training-free Adaptive Retrieval Gating, Wang, Wei and Ling, arXiv 2511.09803): one gate per question.

Before answering, the model writes a short draft with no passages; an uncertainty score of the
draft's prefix decides, once, whether the answer is written with retrieved passages or without.

What the paper states, as implemented here (only its abstract and the first lines of its
introduction could be read, in the arXiv v1 HTML page and the TMLR 2026 listing "Retrieval as a
Decision"; no public code by the authors was found, so no section or equation is cited;
docs/recent-methods.md has the table):

* the draft: "a short, no-context draft from the base model", "tens to hundreds of draft tokens";
* the entropy gate: the draft prefix's "mean token entropy" (the engine's ``entropy`` signal);
* the margin gate: "a margin signal derived from the top-1/top-2 logit gap via a monotone link",
  "a robust default" under instruction-tuned models, which is why it is the default gate here;
* the variance gate: "small-N variance across a handful of stochastic prefixes", "a conservative,
  budget-first alternative" (``gate = "variance"``, :mod:`explorer.methods.targ.variance`);
* "triggers retrieval only when the score exceeds a threshold" (the gate is ``score > τ``).

Chosen where the abstract gives no constant:

* the link: ``exp(-g) = p₂/p₁`` (:mod:`explorer.methods.targ.signals`), which maps the gap into
  (0, 1], grows with uncertainty as entropy does, and needs no scale constant;
* τ = 0.5 for the margin gate, model-free; the paper calibrates τ to a retrieval budget, which the
  per-model presets do (benchmarks/calibrate_etc_targ.py) and the what-if slider does for one question;
* ``prefix_tokens = 20`` (the low end of "tens");
* with the gate shut the answer continues the draft (greedy, so the same text a fresh no-context
  answer would start with, without writing it twice); with the gate open the draft is discarded
  and the answer is written with the question's passages;
* the variance gate, where the text read states no quantity, N or temperature: N = 5 prefixes
  (``prefixes``, the middle of "a handful"), as long as the draft, sampled at ``temperature`` 1.0
  from the raw distribution with the run's ``seed``; the score is the sample variance of each
  prefix's mean token log-probability (nats²). τ is read on the chosen gate's scale, so the
  presets are per gate (:data:`explorer.methods.presets.BY_CHOICE`; SmolLM2's variance τ = 0.6
  comes from ``benchmarks/calibrate_targ_variance.py``); without one the model-free 0.5 applies.

The trace holds the draft (a generation event whose tokens carry ``entropy`` and ``margin``), the
check with the chosen score as its one unit (and the draft's two scores, and the per-token
values; under the variance gate also the variance and every sampled prefix: its tokens, their
log-probabilities and entropies, and its mean), and a trigger event when the gate opens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from explorer.config import param
from explorer.engine.generation import Generation
from explorer.methods import common, prompts
from explorer.methods.base import Method, register
from explorer.methods.targ import signals, variance
from explorer.trace import TraceRecorder

GATES = ("margin", "entropy", "variance")

#: The name each gate's score is checked under (the decision chart's axis and the what-if's signal).
SIGNALS = {"margin": "mean margin", "entropy": "mean entropy", "variance": "prefix variance"}


@dataclass
class TargConfig(common.RetrievalConfig):
    gate: str = param("margin", choices=GATES,
                      help="the draft's score: mean margin p2/p1 (the paper's robust default), mean entropy, or the "
                           "variance of a few sampled prefixes' mean log-probability")
    threshold: float = param(0.5, lo=0.0, hi=100.0,
                             help="τ: retrieve when the gate's score exceeds it (margin in (0, 1], entropy in nats, "
                                  "variance in nats²; a model's preset is per gate)")
    prefix_tokens: int = param(20, lo=1, hi=256, help="tokens of the no-context draft the gate scores")
    prefixes: int = param(5, lo=2, hi=32, help="variance gate: N, the stochastic prefixes sampled (as long as the "
                                                 "draft)")
    temperature: float = param(1.0, lo=0.05, hi=5.0, help="variance gate: sampling temperature of the prefixes")
    seed: int = param(0, lo=0, hi=2**31 - 1, help="variance gate: sampling seed; the same seed draws the same "
                                                   "prefixes")


def mean(values: list[float | None]) -> float | None:
    present = [float(v) for v in values if v is not None]
    return sum(present) / len(present) if present else None


@register
class Targ(Method, name="targ", config=TargConfig,
           title="TARG (one quick draft decides whether to retrieve at all)"):
    def run(self, question: str, rec: TraceRecorder) -> None:
        cfg, engine = self.config, self.engine
        shots = common.shots(cfg, question)
        draft = common.generate(engine, rec, prompts.build_prompt(question, shots=shots),
                                max_new_tokens=min(cfg.prefix_tokens, cfg.max_length), purpose="draft",
                                signals=(signals.MARGIN.id,))
        if self._gate(rec, draft, question, shots):
            common.cut(rec, draft, 0, reason="the gate opened: the answer is written with retrieved passages")
            hits, retrieval = common.search(rec, self.retriever, question, cfg.top_k, source="question")
            gen = common.generate(engine, rec, prompts.build_prompt(question, shots=shots, hits=hits),
                                  max_new_tokens=cfg.max_length, purpose="answer")
            common.continuation(rec, gen, retrieval)
            common.finish(engine, rec, cfg, question, gen.text, hits)
            return
        text = draft.text
        budget = cfg.max_length - len(draft.tokens)
        if budget > 0 and draft.stopped_by == "max_tokens" and not prompts.has_answer(text):
            rest = common.generate(engine, rec, prompts.build_prompt(question, shots=shots, answer_so_far=text),
                                   max_new_tokens=budget, purpose="answer")
            text = prompts.join_text(text, rest.text)
        common.finish(engine, rec, cfg, question, text)

    def _gate(self, rec: TraceRecorder, draft: Generation, question: str, shots: str) -> bool:
        cfg = self.config
        margins = [t.signals.get(signals.MARGIN.id) for t in draft.tokens]
        entropies = [t.entropy for t in draft.tokens]
        scores: dict[str, float | None] = {"margin": mean(margins), "entropy": mean(entropies)}
        unit: dict[str, Any] = {"text": draft.text, "gate": cfg.gate, "margins": margins, "entropies": entropies}
        if cfg.gate == "variance":
            drawn = variance.draw(self.engine, rec, prompts.build_prompt(question, shots=shots), n=cfg.prefixes,
                                  max_new_tokens=min(cfg.prefix_tokens, cfg.max_length),
                                  temperature=cfg.temperature, seed=cfg.seed)
            scores["variance"] = drawn.variance
            unit.update(prefixes=drawn.prefixes, empty_prefixes=drawn.empty, sampling=drawn.sampling,
                        prefix_value="mean log-probability")
            if drawn.variance is None:
                rec.add("note", level="warning", span=draft.event_id,
                        message=f"fewer than two of the {cfg.prefixes} sampled prefixes wrote any text, so their "
                                "variance is undefined and the gate stays shut")
        score = scores[cfg.gate]
        signal = SIGNALS[cfg.gate]
        unit.update(value=score, eligible=score is not None, scores=scores)
        fired = 0 if score is not None and score > cfg.threshold else None
        what = (f"the variance of {cfg.prefixes} prefixes sampled without passages (each one's mean "
                "log-probability)" if cfg.gate == "variance" else f"the no-context draft's mean {cfg.gate}")
        fired = common.check(rec, span=draft.event_id, signal=signal, threshold=cfg.threshold,
                             compare=">", units=[unit], fired=fired, unit="question", gate=cfg.gate,
                             rule=f"retrieve once, before answering, when {what} exceeds the threshold")
        if fired is None:
            return False
        rec.add("trigger", span=draft.event_id, token_index=0, signal=signal, value=score,
                threshold=cfg.threshold, token=draft.text, unit="question")
        return True
