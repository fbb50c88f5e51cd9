"""The pair classifier's estimator as plain arrays: stored as safetensors, evaluated with numpy.

A pickle (joblib) runs code when it is loaded, so a model file shipped in the repository or
passed around between users must not be one. Each model family the classifier chooses among is
written as the arrays that define its prediction and evaluated here with numpy, to the same
probabilities scikit-learn gives (the tests compare them):

* ``logreg``: standardisation, then a logistic over one linear layer;
* ``mlp``: standardisation, then the hidden layers (with their activation) and a logistic output;
* ``boosted-trees``: the baseline log-odds plus the leaf value each tree reaches (numeric splits
  ``x <= threshold``, missing values routed as learnt), then a logistic.

:func:`export_estimator` turns a fitted scikit-learn estimator into ``(tensors, spec)``;
:class:`ArrayEstimator` is the loaded model, with the ``predict_proba`` the classifier calls.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from explorer.errors import ModelError

FAMILIES = ("logreg", "mlp", "boosted-trees")
_ACTIVATIONS = ("relu", "tanh", "logistic", "identity")


def _expit(z: np.ndarray) -> np.ndarray:
    out = np.empty_like(z)
    pos = z >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-z[pos]))
    ez = np.exp(z[~pos])
    out[~pos] = ez / (1.0 + ez)
    return out


def _activate(name: str, z: np.ndarray) -> np.ndarray:
    if name == "relu":
        return np.maximum(z, 0.0)
    if name == "tanh":
        return np.tanh(z)
    if name == "logistic":
        return _expit(z)
    return z


def _scaler(pipeline: Any) -> tuple[dict[str, np.ndarray], Any]:
    """The StandardScaler's arrays and the final estimator of a two-step pipeline."""
    from sklearn.preprocessing import StandardScaler

    steps = [s for _, s in pipeline.steps]
    if len(steps) != 2 or not isinstance(steps[0], StandardScaler):
        raise ModelError("expected a StandardScaler followed by the model")
    scaler = steps[0]
    mean = scaler.mean_ if scaler.with_mean else np.zeros(scaler.n_features_in_)
    scale = scaler.scale_ if scaler.with_std else np.ones(scaler.n_features_in_)
    return {"scaler.mean": np.asarray(mean, dtype=np.float64), "scaler.scale": np.asarray(scale, dtype=np.float64)}, \
        steps[1]


def export_estimator(estimator: Any, family: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(tensors, spec) that :class:`ArrayEstimator` evaluates exactly like ``estimator.predict_proba``."""
    if family == "logreg":
        tensors, model = _scaler(estimator)
        tensors["linear.weight"] = np.asarray(model.coef_, dtype=np.float64).reshape(-1)
        tensors["linear.bias"] = np.asarray(model.intercept_, dtype=np.float64).reshape(-1)
        return tensors, {"family": family}
    if family == "mlp":
        tensors, model = _scaler(estimator)
        if model.activation not in _ACTIVATIONS or model.out_activation_ != "logistic":
            raise ModelError(f"an MLP with activation {model.activation} / {model.out_activation_} cannot be stored")
        for i, (w, b) in enumerate(zip(model.coefs_, model.intercepts_, strict=True)):
            tensors[f"layer{i}.weight"] = np.asarray(w, dtype=np.float64)
            tensors[f"layer{i}.bias"] = np.asarray(b, dtype=np.float64)
        return tensors, {"family": family, "layers": len(model.coefs_), "activation": model.activation}
    if family == "boosted-trees":
        if getattr(estimator, "n_trees_per_iteration_", 1) != 1:
            raise ModelError("only binary boosted trees can be stored")
        nodes = [predictors[0].nodes for predictors in estimator._predictors]
        if any(n["is_categorical"].any() for n in nodes):
            raise ModelError("boosted trees with categorical splits cannot be stored")
        offsets = np.cumsum([0] + [len(n) for n in nodes]).astype(np.int64)
        flat = np.concatenate(nodes)
        tensors = {
            "trees.offset": offsets,
            "trees.feature": flat["feature_idx"].astype(np.int64),
            "trees.threshold": flat["num_threshold"].astype(np.float64),
            "trees.left": flat["left"].astype(np.int64),
            "trees.right": flat["right"].astype(np.int64),
            "trees.leaf": flat["is_leaf"].astype(np.int64),
            "trees.missing_left": flat["missing_go_to_left"].astype(np.int64),
            "trees.value": flat["value"].astype(np.float64),
            "trees.baseline": np.asarray(estimator._baseline_prediction, dtype=np.float64).reshape(-1),
        }
        depth = int(max(n["depth"].max() for n in nodes))
        return tensors, {"family": family, "trees": len(nodes), "depth": depth}
    raise ModelError(f"unknown model family {family!r}", fix=f"use one of {', '.join(FAMILIES)}")


class ArrayEstimator:
    """A stored estimator, evaluated with numpy; ``predict_proba`` mirrors scikit-learn's."""

    def __init__(self, tensors: dict[str, np.ndarray], spec: dict[str, Any]) -> None:
        self.tensors = tensors
        self.spec = dict(spec)
        self.family = str(spec.get("family"))
        if self.family not in FAMILIES:
            raise ModelError(f"unknown model family {self.family!r} in the stored classifier",
                             fix=f"the file was written by a newer explorer; known: {', '.join(FAMILIES)}")
        needed = self._needed()
        missing = [k for k in needed if k not in tensors]
        if missing:
            raise ModelError(f"the stored {self.family} classifier lacks the arrays {', '.join(missing)}")

    def _needed(self) -> list[str]:
        if self.family == "logreg":
            return ["scaler.mean", "scaler.scale", "linear.weight", "linear.bias"]
        if self.family == "mlp":
            layers = int(self.spec.get("layers", 0))
            if layers < 1 or self.spec.get("activation") not in _ACTIVATIONS:
                raise ModelError("the stored MLP has no layers or an unknown activation")
            layer_arrays = [f"layer{i}.{p}" for i in range(layers) for p in ("weight", "bias")]
            return ["scaler.mean", "scaler.scale", *layer_arrays]
        return ["trees.offset", "trees.feature", "trees.threshold", "trees.left", "trees.right", "trees.leaf",
                "trees.missing_left", "trees.value", "trees.baseline"]

    @property
    def n_features(self) -> int:
        if self.family == "boosted-trees":
            return int(self.tensors["trees.feature"].max()) + 1
        return int(self.tensors["scaler.mean"].shape[0])

    def decision(self, x: np.ndarray) -> np.ndarray:
        """The log-odds of the positive class for each row of ``x``."""
        x = np.asarray(x, dtype=np.float64)
        t = self.tensors
        if self.family == "boosted-trees":
            return self._trees(x)
        z = (x - t["scaler.mean"]) / t["scaler.scale"]
        if self.family == "logreg":
            return z @ t["linear.weight"] + t["linear.bias"][0]
        layers = int(self.spec["layers"])
        for i in range(layers):
            z = z @ t[f"layer{i}.weight"] + t[f"layer{i}.bias"]
            if i < layers - 1:
                z = _activate(str(self.spec["activation"]), z)
        return z[:, 0]

    def _trees(self, x: np.ndarray) -> np.ndarray:
        t = self.tensors
        offsets, feature, threshold = t["trees.offset"], t["trees.feature"], t["trees.threshold"]
        left, right, leaf, missing_left, value = (t["trees.left"], t["trees.right"], t["trees.leaf"],
                                                  t["trees.missing_left"], t["trees.value"])
        rows = np.arange(len(x))
        total = np.full(len(x), t["trees.baseline"][0], dtype=np.float64)
        for start in offsets[:-1]:
            node = np.full(len(x), start, dtype=np.int64)
            while True:
                active = leaf[node] == 0
                if not active.any():
                    break
                n = node[active]
                v = x[rows[active], feature[n]]
                go_left = np.where(np.isnan(v), missing_left[n] == 1, v <= threshold[n])
                node[active] = start + np.where(go_left, left[n], right[n])
            total += value[node]
        return total

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """(n, 2) probabilities [negative, positive], as scikit-learn returns them."""
        p = _expit(self.decision(x))
        return np.stack([1.0 - p, p], axis=1)
