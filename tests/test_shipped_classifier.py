"""The pair classifier that ships with the explorer: stored without pickle, loaded by default, in step with the code.

None of these needs the benchmark data: a user's fresh clone has only what the repository holds.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from explorer.errors import ModelError
from explorer.methods.drrag.pair_classifier import (
    FEATURE_NAMES,
    FEATURE_VERSION,
    PairClassifier,
    StaleClassifier,
    _make_estimator,
)
from explorer.methods.drrag.pair_weights import FAMILIES, ArrayEstimator, export_estimator

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = PairClassifier.shipped_path()


def _manifest() -> dict:
    return json.loads((SHIPPED / "manifest.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_is_stored_as_arrays_that_predict_like_scikit_learn(family: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, len(FEATURE_NAMES)))
    y = (x[:, 0] + x[:, 1] * x[:, 2] + 0.3 * rng.normal(size=300) > 0).astype(int)
    estimator = _make_estimator(family, 0).fit(x, y)
    tensors, spec = export_estimator(estimator, family)
    test = rng.normal(size=(200, len(FEATURE_NAMES)))
    if family == "boosted-trees":
        test[0, 3] = np.nan  # a missing value takes the branch the trees learnt for it
    expected = estimator.predict_proba(test)
    assert np.abs(ArrayEstimator(tensors, spec).predict_proba(test) - expected).max() < 1e-12
    # and through a saved folder
    from explorer.methods.drrag.pair_classifier import PairFeaturizer

    folder = PairClassifier(estimator, PairFeaturizer({"a": 1}, 3), threshold=0.4,
                            metadata={"family": family}).save(tmp_path / family)
    loaded = PairClassifier.load(folder)
    assert loaded.family == family and loaded.threshold == 0.4
    assert np.abs(loaded.estimator.predict_proba(test) - expected).max() < 1e-12


def test_the_shipped_manifest_agrees_with_the_code() -> None:
    """Fails when the features change (FEATURE_VERSION / FEATURE_NAMES) without retraining the shipped weights."""
    manifest = _manifest()
    assert manifest["feature_version"] == FEATURE_VERSION, (
        "the shipped pair classifier was trained on other features: retrain it with "
        "`python -m explorer train-classifier --out explorer/data/pair_classifier`")
    assert manifest["feature_names"] == list(FEATURE_NAMES)
    for name, digest in manifest["files"].items():
        assert hashlib.sha256((SHIPPED / name).read_bytes()).hexdigest() == digest, name
    assert manifest["family"] in FAMILIES and 0.0 < manifest["threshold"] < 1.0
    assert isinstance(manifest["seed"], int) and manifest["data_files"] and manifest["encoder"] == "all-MiniLM-L6-v2"
    held = manifest["metrics"]["held_out"]["overall"]
    assert manifest["held_out_f1"] == held["f1"] and held["f1"] > 0.5  # and well above the min-cosine baseline:
    assert held["f1"] > manifest["metrics"]["baselines"]["min_cosine"]["overall"]["f1"] + 0.1
    model = PairClassifier.load(SHIPPED)
    assert model.estimator.n_features == len(FEATURE_NAMES) or model.family == "boosted-trees"
    assert not list(SHIPPED.glob("*.joblib")) and not list(SHIPPED.glob("*.pkl"))


def test_the_shipped_classifier_tells_a_bridge_pair_from_an_unrelated_one() -> None:
    model = PairClassifier.load(SHIPPED)
    question = "Who is the spouse of the Green performer?"
    album = ("Green (Steve Hillage album)", "Green is the fourth studio album by the English progressive rock "
                                           "musician Steve Hillage, released in 1978.")
    partner = ("Miquette Giraudy", "Miquette Giraudy is a French keyboard player and vocalist, the partner of "
                                   "Steve Hillage, with whom she has worked since the 1970s.")
    unrelated = ("Lake Baikal", "Lake Baikal is a rift lake in southern Siberia and the deepest lake in the world.")
    assert model.predict_proba(question, album, partner) >= model.threshold
    assert model.predict_proba(question, album, unrelated) < model.threshold


def test_it_is_found_from_any_working_folder_with_an_empty_cache(tmp_path: Path) -> None:
    code = ("from explorer.methods.drrag.pair_classifier import PairClassifier as P; m = P.load(); "
            "print(m.origin, m.source, m.family)")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EXPLORER_CACHE": str(tmp_path / "cache"),
           "EXPLORER_DATA": str(tmp_path / "no-data")}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    origin, source, family = done.stdout.split()
    assert origin == "shipped" and Path(source) == SHIPPED and family == _manifest()["family"]


def test_a_retrained_classifier_in_the_cache_takes_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXPLORER_CACHE", str(tmp_path / "cache"))
    PairClassifier.load(SHIPPED).save(PairClassifier.default_path())
    model = PairClassifier.load()
    assert model.origin == "cache" and model.source == PairClassifier.default_path()


def test_a_stale_classifier_is_refused_and_auto_falls_back_to_the_model(tiny_lm, demo_retriever,
                                                                          tmp_path: Path) -> None:
    from explorer.engine.generation import Engine
    from explorer.methods import run_question
    from explorer.runtime import Runtime

    stale = tmp_path / "stale"
    shutil.copytree(SHIPPED, stale)
    manifest = _manifest()
    manifest["feature_version"] = FEATURE_VERSION + 1
    (stale / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(StaleClassifier, match="feature version"):
        PairClassifier.load(stale)
    runtime = Runtime(engine=Engine(tiny_lm), retriever=demo_retriever, corpus={"name": "demo"})
    config = {"k": 3, "k1": 1, "k2": 3, "max_length": 16, "fewshot": 1, "classifier_path": str(stale)}
    trace = run_question("drrag", "Who is the spouse of the Green performer?", runtime, config=config)
    assert trace.status == "complete", trace.error
    assert trace.of_kind("selection")[-1].payload["judge"] == "llm"
    assert any("cannot be used" in n.payload["message"] and "feature version" in n.payload["message"]
               for n in trace.of_kind("note"))
    refused = run_question("drrag", "Who is the spouse of the Green performer?", runtime,
                           config={**config, "judge": "classifier"})
    assert refused.status == "error" and "train-classifier" in refused.error


def test_saving_over_a_file_or_as_a_pickle_name_is_refused(tmp_path: Path) -> None:
    model = PairClassifier.load(SHIPPED)
    (tmp_path / "f").write_text("x", encoding="utf-8")
    with pytest.raises(ModelError, match="folder"):
        model.save(tmp_path / "f")
    with pytest.raises(ModelError, match="pickle"):
        model.save(tmp_path / "x.pkl")
