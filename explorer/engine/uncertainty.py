"""Uncertainty of a context: SEAKR's Gram log-determinant and the alternatives its ablation compares.

Every estimator answers "how unsure is the model about continuing this context?", and every one
is oriented the same way, higher = more uncertain, so one threshold rule (fire when value > δ)
applies to whichever drives the decisions. All but one read the same batched call
(:func:`explorer.engine.sampling.sample`: k samples plus one greedy row), so showing them side by
side costs nothing extra:

* ``gram`` (SEAKR): U = (1/k) logdet(Z J_d Z^T + αI_k) over the samples' end states Z (k x d).
  Consistent samples have nearly parallel states, a nearly rank-one Gram matrix and so a low U.
* ``perplexity``: exp of the mean negative log-likelihood of the greedy continuation.
* ``multi_perplexity``: the mean of the samples' perplexities (the paper's Multi-Perplexity; the
  authors' code reports this same number under the name ``ln_entropy``).
* ``ln_entropy``: length-normalised predictive entropy (Malinin & Gales), estimated as the mean
  over samples of each sample's mean negative log-likelihood.
* ``energy``: the free energy -logsumexp(logits) averaged over the greedy continuation's steps
  (the authors average logsumexp; the sign is flipped here so that higher means less sure).
* ``prompting``: the model is asked whether it knows enough; the value is P(No) / (P(Yes) + P(No))
  of its next token. This one costs a forward pass of its own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from explorer.engine.generation import Engine, PromptLike, Sampling
from explorer.engine.hidden import HiddenSpec
from explorer.engine.sampling import Sample, SampleBatch, sample
from explorer.errors import ConfigError
from explorer.trace import TraceRecorder, phase

ESTIMATORS = ("gram", "prompting", "perplexity", "multi_perplexity", "ln_entropy", "energy")
DEFAULT_ALPHA = 1e-3

#: The self-check put after a context for the ``prompting`` estimator (our wording).
SELF_CHECK = ("\n\nBefore going on, judge honestly: do you already know enough to answer the question above "
              "correctly, without looking anything up? Reply Yes or No.\nReply:")


@dataclass
class Estimate:
    """One estimator's value for one context (None when it cannot be computed) and what it was read from."""

    estimator: str
    value: float | None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Measurement:
    """A context's uncertainty: the batch it was read from, every estimate, and the one that decides."""

    batch: SampleBatch
    estimates: dict[str, Estimate]
    primary: str
    event_ids: dict[str, int] = field(default_factory=dict)

    @property
    def value(self) -> float | None:
        return self.estimates[self.primary].value

    @property
    def greedy(self):
        return self.batch.greedy


# -- the Gram determinant -----------------------------------------------------------------------------
def gram_logdet(states: Any, alpha: float = DEFAULT_ALPHA) -> tuple[float, np.ndarray]:
    """(1/k) logdet(Z J_d Z^T + αI_k) and the eigenvalues of Z J_d Z^T + αI_k (descending), in float64.

    J_d = I_d - (1/d)11^T centres each row over its d features; since J_d is symmetric and
    idempotent, Z J_d Z^T = (Z J_d)(Z J_d)^T, which is what is computed (no d x d matrix). The
    log-determinant is the sum of the logs of the eigenvalues, so the spectrum a view plots is
    the one the score came from. α > 0 keeps every eigenvalue at least α, so rank-deficient sets
    (k > d, duplicated samples) have a finite score.
    """
    if isinstance(states, torch.Tensor):
        states = states.detach().to("cpu", torch.float64).numpy()
    z = np.asarray(states, dtype=np.float64)
    if z.ndim != 2 or z.shape[0] < 1:
        raise ValueError(f"states must be a (k, d) matrix with k >= 1, got shape {z.shape}")
    if alpha <= 0:
        raise ValueError(f"alpha must be positive, got {alpha}")
    k = z.shape[0]
    centred = z - z.mean(axis=1, keepdims=True)
    sigma = centred @ centred.T
    sigma = (sigma + sigma.T) / 2.0
    eig = np.linalg.eigvalsh(sigma + alpha * np.eye(k))[::-1]
    # Exact arithmetic keeps every eigenvalue >= alpha; guard the log against rounding far below it.
    eig = np.maximum(eig, np.finfo(np.float64).tiny)
    return float(np.log(eig).sum() / k), eig


def lowest_gram(k: int, alpha: float, trace: float) -> float:
    """The smallest U any k states can have when their centred Gram matrix has trace ``trace``.

    log(λ + α) is concave, so for a fixed sum of eigenvalues the sum of logs is smallest at a
    vertex of the simplex: one eigenvalue carries the whole trace (all states parallel, e.g.
    identical samples) and the other k - 1 are zero.
    """
    return (math.log(trace + alpha) + (k - 1) * math.log(alpha)) / k


def gram(samples: Sequence[Sample], alpha: float = DEFAULT_ALPHA, min_samples: int = 2) -> Estimate:
    """SEAKR's U over the samples that have an end state; None (with a reason) below ``min_samples`` of them.

    Two states are the fewest whose spread means anything; the SEAKR authors' code also scores a
    single one (``min_samples=1``: U is then log(α) plus a term that vanishes with α), which their
    reference variant reproduces.
    """
    states = [s.hidden for s in samples if s.hidden is not None]
    details: dict[str, Any] = {"valid": len(states), "alpha": alpha}
    if len(states) < max(1, min_samples):
        need = "at least two" if min_samples >= 2 else "one"
        details["note"] = (f"only {len(states)} non-empty sample(s) with an end state; U needs {need}, "
                           "so this context has no Gram score")
        details["eigenvalues"] = []
        return Estimate("gram", None, details)
    value, eig = gram_logdet(torch.stack(states), alpha)
    details["eigenvalues"] = [float(x) for x in eig]
    return Estimate("gram", value, details)


# -- the likelihood-based alternatives -----------------------------------------------------------------
def _mean_nll(logprobs: Sequence[float]) -> float | None:
    return -float(np.mean(logprobs)) if len(logprobs) else None


def perplexity(logprobs: Sequence[float]) -> Estimate:
    """exp(mean NLL) of one continuation (the greedy one)."""
    nll = _mean_nll(logprobs)
    return Estimate("perplexity", None if nll is None else math.exp(nll), {"tokens": len(logprobs)})


def multi_perplexity(samples: Sequence[Sample]) -> Estimate:
    """Mean over samples of each sample's perplexity."""
    values = [math.exp(n) for s in samples if (n := _mean_nll(s.logprobs)) is not None]
    return Estimate("multi_perplexity", float(np.mean(values)) if values else None, {"per_sample": values})


def ln_entropy(samples: Sequence[Sample]) -> Estimate:
    """Length-normalised entropy: mean over samples of -(1/|s|) log p(s)."""
    values = [n for s in samples if (n := _mean_nll(s.logprobs)) is not None]
    return Estimate("ln_entropy", float(np.mean(values)) if values else None, {"per_sample": values})


def energy(energies: Sequence[float]) -> Estimate:
    """Mean free energy -logsumexp(logits) over a continuation's steps."""
    value = -float(np.mean(energies)) if len(energies) else None
    return Estimate("energy", value, {"tokens": len(energies)})


def prompting(engine: Engine, prompt: PromptLike, rec: TraceRecorder | None = None) -> Estimate:
    """Ask the model whether it knows enough; P(No) / (P(Yes) + P(No)) of its next token.

    Reading the two probabilities instead of generating free text gives a graded value even
    from a small model that would not answer in the requested format.
    """
    if isinstance(prompt, str):
        prompt = [("prompt", prompt)]
    segments = [*prompt, ("self_check", SELF_CHECK)]
    _text, ids, _spans = engine.encode_prompt(segments)
    engine.check_fits(len(ids), 1, where="self-check prompt")
    yes, no = engine.tokenize(" Yes")[0], engine.tokenize(" No")[0]
    with engine.lock, torch.inference_mode(), phase(rec, "sampling"):
        out = engine.model(input_ids=torch.tensor([ids], device=engine.device), use_cache=False, logits_to_keep=1)
    probs = torch.softmax(out.logits[0, -1].float(), dim=-1)
    p_yes, p_no = float(probs[yes]), float(probs[no])
    if rec is not None:
        rec.costs.llm_calls += 1
        rec.costs.forward_passes += 1
        rec.costs.prompt_tokens += len(ids)
    total = p_yes + p_no
    value = p_no / total if total > 0 else None
    return Estimate("prompting", value, {"answer": "No" if p_no > p_yes else "Yes", "p_yes": p_yes, "p_no": p_no,
                                         "question": SELF_CHECK.strip()})


# -- one context, every estimator -------------------------------------------------------------------------
def measure(engine: Engine, prompt: PromptLike, *, k: int, max_new_tokens: int, sampling: Sampling,
            hidden: HiddenSpec, alpha: float = DEFAULT_ALPHA, primary: str = "gram",
            estimators: Sequence[str] = ESTIMATORS, stop_strings: Sequence[str] = (), sentence_end: bool = False,
            rec: TraceRecorder | None = None, purpose: str = "pseudo", context: str = "step",
            meta: dict[str, Any] | None = None, end_state: str = "kept", gram_min_samples: int = 2) -> Measurement:
    """Sample k continuations of ``prompt`` (plus the greedy one) and compute the estimators on them.

    ``primary`` is the estimator whose value decides; the others are computed beside it
    (``estimators`` lists which; the primary one is always included). With ``rec`` every
    estimate becomes an ``uncertainty`` event carrying ``context`` and ``meta``, and the greedy
    continuation a ``generation`` event with ``purpose``. ``end_state`` and ``gram_min_samples``
    choose the SEAKR authors' rules for where a sample's state is read and how few states make a
    Gram score (:func:`explorer.engine.sampling.sample`, :func:`gram`).
    """
    for name in (primary, *estimators):
        if name not in ESTIMATORS:
            raise ConfigError(f"uncertainty estimator {name!r} is unknown", where="estimator",
                              fix=f"use one of {', '.join(ESTIMATORS)}")
    wanted = [primary, *[e for e in estimators if e != primary]]
    if rec is not None and rec.replay is not None:  # a fork before its divergence: the parent's measurement
        served = rec.replay.measurement(engine, rec, prompt=prompt, purpose=purpose, primary=primary)
        if served is not None:
            return served
    batch = sample(engine, prompt, k=k, max_new_tokens=max_new_tokens, sampling=sampling, stop_strings=stop_strings,
                   sentence_end=sentence_end, hidden=hidden, greedy=True, rec=rec, purpose=purpose,
                   meta={"context": context, **(meta or {})}, end_state=end_state)
    greedy_logprobs = [t.logprob for t in batch.greedy.tokens] if batch.greedy is not None else []
    estimates: dict[str, Estimate] = {}
    for name in wanted:
        if name == "gram":
            est = gram(batch.samples, alpha, gram_min_samples)
        elif name == "perplexity":
            est = perplexity(greedy_logprobs)
        elif name == "multi_perplexity":
            est = multi_perplexity(batch.samples)
        elif name == "ln_entropy":
            est = ln_entropy(batch.samples)
        elif name == "energy":
            est = energy(batch.greedy_energies)
        else:
            est = prompting(engine, prompt, rec)
        estimates[name] = est
    result = Measurement(batch=batch, estimates=estimates, primary=primary)
    if rec is not None:
        _record(result, rec, context, meta or {})
    return result


def _record(m: Measurement, rec: TraceRecorder, context: str, meta: dict[str, Any]) -> None:
    b = m.batch
    for name, est in m.estimates.items():
        payload: dict[str, Any] = {"estimator": name, "value": est.value, "primary": name == m.primary,
                                   "context": context, "span": b.event_id, "k": b.k, **meta}
        if name == "gram":
            payload.update(samples=[{"row": s.row, "text": s.text, "tokens": len(s.ids), "stopped_by": s.stopped_by}
                                    for s in b.samples],
                           empty=b.empty, layer=b.layer, site=b.site, seed=b.seed, **est.details)
        else:
            payload.update(est.details)
        m.event_ids[name] = rec.add("uncertainty", **payload).id
        if name == "gram" and est.value is None:
            rec.add("note", message=est.details["note"], level="warning")
