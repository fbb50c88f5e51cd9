"""SEAKR's Gram log-determinant against a direct numpy computation, and its extreme cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from explorer.engine.sampling import Sample
from explorer.engine.uncertainty import gram, gram_logdet, ln_entropy, lowest_gram, multi_perplexity

ALPHA = 1e-3


def _direct(z: np.ndarray, alpha: float) -> float:
    """The formula as written: (1/k) logdet(Z J_d Z^T + alpha I_k), with J_d built explicitly."""
    k, d = z.shape
    j = np.eye(d) - np.ones((d, d)) / d
    sign, logdet = np.linalg.slogdet(z @ j @ z.T + alpha * np.eye(k))
    assert sign > 0
    return logdet / k


def _cases() -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    base = rng.normal(size=(5, 32))
    return [
        ("k<d", rng.normal(size=(6, 40)) * 3.0),
        ("k>d", rng.normal(size=(20, 8))),  # rank at most d - 1 after centring
        ("k=d", rng.normal(size=(16, 16))),
        ("duplicates", np.vstack([base, base[:3], base[:1]])),
        ("rank-one", np.outer(rng.normal(size=10), rng.normal(size=24))),
        ("large-norm", rng.normal(size=(12, 64)) * 50.0 + 10.0),
    ]


@pytest.mark.parametrize("name,z", _cases(), ids=[c[0] for c in _cases()])
def test_gram_logdet_matches_numpy(name: str, z: np.ndarray) -> None:
    value, eig = gram_logdet(z, ALPHA)
    assert value == pytest.approx(_direct(z, ALPHA), abs=1e-6)
    # The spectrum is that of the regularised matrix: every eigenvalue at least alpha, summing logs to k * U.
    assert len(eig) == z.shape[0]
    assert np.all(eig >= ALPHA * (1 - 1e-9))
    assert np.all(np.diff(eig) <= 0), "eigenvalues come largest first"
    assert float(np.log(eig).sum() / len(eig)) == pytest.approx(value, abs=1e-9)


def test_torch_input_gives_the_same_value() -> None:
    z = np.random.default_rng(1).normal(size=(7, 30)).astype(np.float32)
    assert gram_logdet(torch.from_numpy(z), ALPHA)[0] == pytest.approx(gram_logdet(z, ALPHA)[0], abs=1e-9)


@pytest.mark.parametrize("k", [2, 5, 20])
def test_identical_samples_give_the_lowest_score_for_their_energy(k: int) -> None:
    rng = np.random.default_rng(k)
    row = rng.normal(size=48)
    same = np.tile(row, (k, 1))
    value, eig = gram_logdet(same, ALPHA)
    trace = float(((same - same.mean(axis=1, keepdims=True)) ** 2).sum())
    assert value == pytest.approx(lowest_gram(k, ALPHA, trace), abs=1e-9)
    assert np.sum(eig > ALPHA * 1.01) == 1, "identical rows make a rank-one Gram matrix"
    # Any other set with the same total centred energy scores higher.
    for seed in range(20):
        other = np.random.default_rng(100 + seed).normal(size=(k, 48))
        centred = other - other.mean(axis=1, keepdims=True)
        other = centred * math.sqrt(trace / float((centred**2).sum()))
        assert gram_logdet(other, ALPHA)[0] > value
    # Constant rows centre to zero: the absolute floor, log(alpha).
    assert gram_logdet(np.ones((k, 48)) * 3.0, ALPHA)[0] == pytest.approx(math.log(ALPHA), abs=1e-9)


def test_more_spread_means_more_uncertain() -> None:
    rng = np.random.default_rng(3)
    centre = rng.normal(size=64) * 5
    tight = centre + rng.normal(size=(10, 64)) * 0.01
    loose = centre + rng.normal(size=(10, 64)) * 1.0
    assert gram_logdet(tight, ALPHA)[0] < gram_logdet(loose, ALPHA)[0]


def _sample(row: int, hidden: torch.Tensor | None, logprobs: list[float]) -> Sample:
    return Sample(row=row, ids=list(range(len(logprobs))), text=f"s{row}", stopped_by="eos", logprobs=logprobs,
                  entropies=[0.0] * len(logprobs), energies=[0.0] * len(logprobs), hidden=hidden)


def test_fewer_than_two_states_is_reported_not_raised() -> None:
    one = gram([_sample(0, torch.ones(8), [-0.1])], ALPHA)
    assert one.value is None and one.details["valid"] == 1 and "at least two" in one.details["note"]
    none = gram([], ALPHA)
    assert none.value is None and none.details["valid"] == 0
    two = gram([_sample(0, torch.arange(8.0), [-0.1]), _sample(1, torch.arange(8.0).flip(0), [-0.2])], ALPHA)
    assert two.value is not None and len(two.details["eigenvalues"]) == 2


def test_sample_likelihood_estimators() -> None:
    samples = [_sample(0, None, [-1.0, -3.0]), _sample(1, None, [-0.5])]
    assert ln_entropy(samples).value == pytest.approx((2.0 + 0.5) / 2)
    assert multi_perplexity(samples).value == pytest.approx((math.exp(2.0) + math.exp(0.5)) / 2)
