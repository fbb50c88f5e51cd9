"""SEAKR's contexts and their uncertainty: shared by the reasoning steps, the re-ranking and the answer.

Both the step loop (:mod:`explorer.methods.seakr.method`) and the final choice between answers
(:mod:`explorer.methods.seakr.answer`) measure U(c) the same way; keeping that here lets each
import it without importing the other.
"""

from __future__ import annotations

import zlib
from typing import Any

from explorer.engine.generation import Sampling
from explorer.engine.hidden import HiddenSpec
from explorer.engine.uncertainty import ESTIMATORS, Measurement, measure
from explorer.methods import prompts
from explorer.retrieval.base import Hit
from explorer.trace import TraceRecorder


def context(question: str, shots: str, rationales: list[str], hits: list[Hit], tail: str = "") -> prompts.Segments:
    """Exemplars, the passages as knowledge evidence, the question, the rationales so far (and ``tail``)."""
    so_far = prompts.join_text(*rationales, tail)
    return prompts.build_prompt(question, shots=shots, hits=hits, answer_so_far=so_far)


def measure_context(engine: Any, cfg: Any, rec: TraceRecorder, segments: prompts.Segments, *, purpose: str,
                    context: str, max_new_tokens: int, stops: tuple[str, ...], sentence_end: bool,
                    meta: dict[str, Any] | None = None, end_state: str = "kept",
                    gram_min_samples: int = 2, layer: int | None = None) -> Measurement:
    """U(c) of one context with ``cfg``'s sampler, layer and estimators (seeded by the context's text).

    ``cfg`` is a :class:`~explorer.methods.seakr.config.SeakrConfig`; ``end_state`` and
    ``gram_min_samples`` pick the authors' end-state and single-sample rules (reference variant), and
    ``layer`` replaces the configured layer (the reference's default).
    """
    text = "".join(t for _, t in segments)
    seed = (cfg.seed * 1_000_033 + zlib.crc32(text.encode("utf-8"))) % (2**31)
    others = [e for e in ESTIMATORS if e != "prompting"] if cfg.compare_estimators else []
    if cfg.self_check:
        others.append("prompting")
    sampling = Sampling(temperature=cfg.temperature, top_k=cfg.sample_top_k or None,
                        top_p=cfg.sample_top_p if cfg.sample_top_p < 1.0 else None, seed=seed)
    return measure(engine, segments, k=cfg.k, max_new_tokens=max_new_tokens, sampling=sampling,
                   hidden=HiddenSpec(cfg.layer if layer is None else layer, cfg.site), alpha=cfg.alpha,
                   primary=cfg.estimator,
                   estimators=others, stop_strings=stops, sentence_end=sentence_end, rec=rec, purpose=purpose,
                   context=context, meta=meta, end_state=end_state, gram_min_samples=gram_min_samples)
