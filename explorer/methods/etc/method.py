"""ETC (Entropy-Trend Constraint, Li et al., AAAI 2026, arXiv 2511.09980): retrieve when the entropy starts to climb.

DRAGIN and FLARE fire on a token that is already uncertain, so the error they retrieve for has
often been written by then. ETC watches the *trend* of the token entropies instead and fires at
the onset of a rise, before the entropy itself is high.

What the paper states (section 3, "Method"), as implemented here:

* eq. 1: ``H_i = -Σ_v p_i(v) log p_i(v)``, the entropy of each generated token's next-token
  distribution (the engine's ``entropy`` signal, nats, raw distribution);
* eq. 2: the first difference ``ΔH_i = H_{i+1} - H_i`` (is the uncertainty rising?);
* eq. 3: the second difference ``Δ²H_i = ΔH_{i+1} - ΔH_i`` (is the rise speeding up?);
* both smoothed by a dynamic smoothing before the trigger, which is a constraint on the two
  smoothed differences; on a trigger the output is cut before the token and generation resumes
  with the retrieved passages (the loop of DRAGIN, which ETC plugs into).

What the public text available here does not state, and what is chosen instead (each a
config field, so a user can set the paper's values once they are known):

* the form of the dynamic smoothing: a bias-corrected exponential moving average, ``α = 0.5``
  (:func:`explorer.methods.etc.trend.smooth`; the weight of a new value starts at 1 and settles
  to α, so the first tokens of a span are not averaged against an empty history);
* the trigger: smoothed ΔH above ``slope`` (0: the entropy is rising) AND smoothed Δ²H above
  θ = ``threshold`` (0.5 nats per token², not measured; the what-if slider replays θ);
* the query: the question and the text written so far (last ``max_query_tokens`` tokens), since
  ETC is attention-free here and so runs on any model (DRAGIN's QFS needs attention weights);
* the series restarts with every span: after a retrieval the context changed, so the old
  entropies describe another distribution.

The trace's check event carries, per token, the entropy, both raw differences and both smoothed
ones (``value`` is the smoothed Δ²H the threshold is compared with; ``eligible`` says whether the
slope condition held), and a trigger event names the token that fired.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.config import param
from explorer.engine.generation import Generation
from explorer.methods import common, prompts
from explorer.methods.base import Method, register
from explorer.methods.etc.trend import Trend, first_trigger, trend
from explorer.trace import TraceRecorder


@dataclass
class EtcConfig(common.RetrievalConfig):
    threshold: float = param(0.5, lo=-100.0, hi=100.0,
                             help="θ on the smoothed second difference of the entropy (nats per token²): "
                                  "retrieval fires when the rise speeds up past it (not stated in the paper; chosen)")
    slope: float = param(0.0, lo=-100.0, hi=100.0,
                         help="the smoothed first difference must exceed this too (0: the entropy is rising)")
    smoothing: float = param(0.5, lo=0.01, hi=1.0,
                             help="α of the moving average over the differences (1 = no smoothing)")
    max_query_tokens: int = param(64, lo=4, hi=512, help="the query keeps at most this many last tokens")


@register
class Etc(Method, name="etc", config=EtcConfig,
         title="ETC (retrieve when the model's uncertainty starts rising)"):
    def run(self, question: str, rec: TraceRecorder) -> None:
        cfg, engine = self.config, self.engine
        shots = common.shots(cfg, question)
        text, hits, retrieval = "", [], None
        for budget in common.budgeted_rounds(rec, engine, cfg, lambda: text):  # noqa: B023 (read each round)
            segments = prompts.build_prompt(question, shots=shots, hits=hits, answer_so_far=text)
            gen = common.generate(engine, rec, segments, max_new_tokens=budget, purpose="draft")
            common.continuation(rec, gen, retrieval)
            # After a retrieval the continuation keeps at least one token, so a trigger on its first
            # token cannot loop.
            fired = self._check(rec, gen, 1 if retrieval is not None else 0)
            if fired is None:
                text = prompts.join_text(text, gen.text)
                if prompts.has_answer(text) or gen.stopped_by != "max_tokens":
                    break
                retrieval = None
                continue
            kept = common.cut(rec, gen, fired, reason="cut before the token where the entropy started rising")
            text = prompts.join_text(text, kept) if kept.strip() else text
            query = common.truncate_query(engine, prompts.join_text(question, text), cfg.max_query_tokens)
            hits, retrieval = common.search(rec, self.retriever, query, cfg.top_k, source="question+text",
                                            trigger_token=gen.tokens[fired].text)
        common.finish(engine, rec, cfg, question, text, hits)

    def _check(self, rec: TraceRecorder, gen: Generation, start: int) -> int | None:
        cfg = self.config
        tr: Trend = trend([t.entropy for t in gen.tokens], cfg.smoothing)
        fired = first_trigger(tr, cfg.slope, cfg.threshold, start)
        units = [{"text": t.text, "value": tr.smooth_d2[i], "entropy": tr.entropy[i],
                  "d1": tr.d1[i], "d2": tr.d2[i], "smooth_d1": tr.smooth_d1[i],
                  "smooth_d2": tr.smooth_d2[i],
                  "eligible": i >= start and tr.smooth_d1[i] is not None and tr.smooth_d1[i] > cfg.slope}
                 for i, t in enumerate(gen.tokens)]
        fired = common.check(rec, span=gen.event_id, signal="entropy trend (smoothed Δ²H)", threshold=cfg.threshold,
                             compare=">", units=units, fired=fired, unit="token", slope=cfg.slope,
                             smoothing=cfg.smoothing,
                             rule="first token whose smoothed ΔH exceeds the slope and smoothed Δ²H the threshold")
        if fired is not None:
            token = gen.tokens[fired]
            rec.add("trigger", span=gen.event_id, token_index=fired, signal="entropy trend (smoothed Δ²H)",
                    value=units[fired]["value"], threshold=cfg.threshold, token=token.text,
                    entropy=units[fired]["entropy"], smooth_d1=units[fired]["smooth_d1"])
        return fired
