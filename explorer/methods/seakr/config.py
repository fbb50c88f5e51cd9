"""SEAKR's settings, apart from the loops that read them.

Both of SEAKR's loops read :class:`SeakrConfig`: the paper's (:mod:`explorer.methods.seakr.method`)
and the authors' (:mod:`explorer.methods.seakr.reference_loop`), which the method runs for its
``reference`` variant; neither loop has to import the other to name its settings.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.config import param
from explorer.engine.hidden import SITES
from explorer.engine.uncertainty import ESTIMATORS
from explorer.methods import common


@dataclass
class SeakrConfig(common.BaseConfig):
    k: int = param(20, lo=2, hi=64, help="samples per uncertainty estimate (paper: 20; its search favoured 10-25)")
    temperature: float = param(1.0, lo=0.05, hi=5.0, help="sampling temperature of the k samples (paper: 1.0)")
    sample_top_k: int = param(50, lo=0, hi=1_000_000, help="top-k of the sampler, 0 = off (paper: 50)")
    sample_top_p: float = param(0.9, lo=0.0, hi=1.0, help="nucleus mass of the sampler, 1 = off (paper: 0.9)")
    alpha: float = param(1e-3, lo=1e-9, hi=10.0, help="α added to the Gram matrix's diagonal (paper: 1e-3)")
    delta: float = param(-6.0, lo=-1e6, hi=1e6,
                         help="δ: retrieve when U(c) > δ (paper: -6.0 for the Gram score of Llama-2-7B; other "
                              "models and estimators live on other scales, so sweep it)")
    estimator: str = param("gram", choices=ESTIMATORS, help="the estimator that decides (gram is SEAKR's; the "
                                                            "others are the paper's ablations)")
    compare_estimators: bool = param(True, help="also compute the sample-based alternatives beside it (free: they "
                                                "read the same samples)")
    self_check: bool = param(False, help="also ask the model whether it knows enough (the prompting estimator; "
                                         "one more forward pass per context)")
    layer: int | None = param(None, lo=-1024, hi=1024, help="hidden-state layer; empty = the middle layer L // 2 "
                                                            "(the reference variant: L // 2 - 1, the authors' "
                                                            "index 15 of 32)")
    site: str = param("mlp", choices=SITES, help="mlp = the layer's MLP output before the residual add (the "
                                                 "reference's choice); residual = the layer's output")
    candidates: int = param(3, lo=1, hi=20, help="N: passages retrieved and re-ranked by U per retrieval (paper: 3)")
    max_steps: int = param(7, lo=1, hi=32, help="most reasoning steps (the reference: 7)")
    max_docs: int = param(5, lo=1, hi=32, help="most passages kept (the reference: 5)")
    query_threshold: float = param(0.1, lo=0.0, hi=1.0, help="a pseudo-rationale word stays in the query when every "
                                                             "token's 1 - p is at most this (reference: 0.1)")
    step_tokens: int = param(48, lo=4, hi=256, help="most tokens of one rationale step and of its samples")
    seed: int = param(0, lo=0, hi=2**31 - 1, help="sampling seed; a context's samples depend on it and the context")
