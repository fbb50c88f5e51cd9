"""DR-RAG's relevance classifier C(q, d_a, d_b): do these two passages *together* answer q?

The classifier is positive only when both passages are needed evidence, which is what lets
DR-RAG drop a redundant passage (inverse selection) or reject a stage-2 candidate (forward
selection) with one cheap call per pair instead of an LLM call.

It is deliberately small: a score of similarity and lexical features over frozen sentence
embeddings, then logistic regression, boosted trees or a one-layer MLP, whichever has the best
cross-validated F1 on the training questions. (Raw embedding products were measured too and
overfit the few hundred training questions.) The signals mirror why multi-hop evidence belongs
together:

* each passage's embedding and word overlap with the question, and what the *pair* covers that
  neither covers alone (two hops touch different parts of the question);
* the bridge: one passage names the other's title ("... directed by X" / the article on X);
* the pair's passages being near each other in embedding space.

Features are symmetric in (d_a, d_b), so C(q, a, b) == C(q, b, a) by construction.

Training data are the supporting-paragraph labels of HotpotQA (distractor setting) and MuSiQue.
Weights are never committed: ``python -m explorer train-classifier`` writes them to the cache
and :meth:`PairClassifier.load` returns ``None`` until it has been run.
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import json
import math
import random
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from explorer.errors import DatasetError, ModelError
from explorer.paths import cache_dir, shared_data_dir
from explorer.retrieval.base import Passage
from explorer.retrieval.embeddings import TextEncoder, get_encoder

FEATURE_VERSION = 1
MODEL_FILENAME = "pair_classifier.joblib"
EMBEDDING_STORE = "training_embeddings.npz"
HOTPOTQA_FILE = "hotpotqa/dev_distractor_100.json"
MUSIQUE_FILE = "musique/dev_100.json"

FEATURE_NAMES = (
    "cos_q_hi", "cos_q_lo", "cos_ab", "cos_q_pair", "residual_hi", "residual_lo",
    "lex_q_hi", "lex_q_lo", "lex_q_pair", "lex_q_gain",
    "idf_q_hi", "idf_q_lo", "idf_q_pair", "idf_q_gain", "lex_ab_jaccard",
    "title_q_hi", "title_q_lo",
    "bridge_any", "bridge_both", "bridge_soft", "same_title",
)

PassageLike = Passage | str | tuple[str, str]
Progress = Callable[[str], None]


# --------------------------------------------------------------------------------------------
# Lexical views


def _stopwords() -> frozenset[str]:
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return frozenset(ENGLISH_STOP_WORDS)


_STOP = _stopwords()
_WORD = re.compile(r"\w+")
_PAREN = re.compile(r"\s*\([^)]*\)\s*$")


def _tokens(text: str) -> list[str]:
    return _WORD.findall(text.casefold())


def _stem(word: str) -> str:
    """Crude suffix stripping so "directed" meets "direct" and "films" meets "film"."""
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[: -len(suffix)]
    return word


def _content(tokens: Iterable[str]) -> frozenset[str]:
    """Stems of the words that carry meaning: no stopwords, no single letters (digits are kept:
    years matter)."""
    return frozenset(_stem(t) for t in tokens if t not in _STOP and (len(t) > 1 or t.isdigit()))


@dataclass(frozen=True)
class _View:
    """What the lexical features need from a passage, computed once per distinct passage."""

    words: frozenset[str]
    title_words: frozenset[str]
    title_phrase: str  # " my fair lady " (disambiguation like "(film)" removed), "" without a title
    body_phrase: str  # " keala joan settle born ... " for word-boundary substring search


@functools.lru_cache(maxsize=50_000)
def _view(title: str, text: str) -> _View:
    body = _tokens(text)
    title_tokens = _tokens(_PAREN.sub("", title)) if title else []
    title_phrase = f" {' '.join(title_tokens)} " if title_tokens else ""
    return _View(words=_content(body) | _content(title_tokens), title_words=_content(title_tokens),
                 title_phrase=title_phrase, body_phrase=f" {' '.join(body)} ")


@functools.lru_cache(maxsize=4096)
def _question_words(question: str) -> frozenset[str]:
    tokens = _tokens(question)
    return _content(tokens) or frozenset(tokens)


def _share(part: frozenset[str], whole: frozenset[str]) -> float:
    return len(part & whole) / len(part) if part else 0.0


def _bridge(src: _View, dst: _View) -> bool:
    """src's title is named, as whole words, in dst's text: the hop from one passage to the other."""
    return len(src.title_phrase) > 3 and src.title_phrase in dst.body_phrase


def _residual_cos(q: np.ndarray, first: np.ndarray, q_first: np.ndarray, second: np.ndarray) -> np.ndarray:
    rest = q - q_first[:, None] * first
    rest /= np.maximum(np.linalg.norm(rest, axis=1, keepdims=True), 1e-8)
    return np.einsum("ij,ij->i", rest, second)


def _embedding_features(q: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise similarity features from unit vectors q, a, b of shape (n, dim)."""
    ca, cb = np.einsum("ij,ij->i", q, a), np.einsum("ij,ij->i", q, b)
    cab = np.einsum("ij,ij->i", a, b)
    mid = a + b
    mid /= np.maximum(np.linalg.norm(mid, axis=1, keepdims=True), 1e-8)
    cpair = np.einsum("ij,ij->i", q, mid)
    # What the question still asks once one passage is read: q with its component along that
    # passage removed, compared with the other passage (a second hop matches the remainder).
    ra, rb = _residual_cos(q, a, ca, b), _residual_cos(q, b, cb, a)
    return np.stack([np.maximum(ca, cb), np.minimum(ca, cb), cab, cpair, np.maximum(ra, rb), np.minimum(ra, rb)],
                    axis=1)


class PairFeaturizer:
    """Turns (q, d_a, d_b) into the FEATURE_NAMES vector.

    It holds document frequencies counted over the training paragraphs, so that covering a rare
    question word (a name, a year) counts more than covering a common one."""

    def __init__(self, doc_freq: dict[str, int] | None = None, n_docs: int = 0) -> None:
        self.doc_freq = dict(doc_freq or {})
        self.n_docs = int(n_docs)

    @classmethod
    def fit(cls, passages: Iterable[Passage]) -> PairFeaturizer:
        counts: dict[str, int] = {}
        n = 0
        for p in passages:
            n += 1
            for word in _view(p.title, p.text).words:
                counts[word] = counts.get(word, 0) + 1
        return cls(counts, n)

    def _weight(self, words: Iterable[str]) -> float:
        top = math.log(self.n_docs + 1)
        return sum(top - math.log(self.doc_freq.get(w, 0) + 1) + 1.0 for w in words)

    def _lexical(self, qwords: frozenset[str], qweight: float, a: _View, b: _View) -> list[float]:
        la, lb = _share(qwords, a.words), _share(qwords, b.words)
        pair = _share(qwords, a.words | b.words)
        wa, wb = self._weight(qwords & a.words) / qweight, self._weight(qwords & b.words) / qweight
        wpair = self._weight(qwords & (a.words | b.words)) / qweight
        union = a.words | b.words
        jacc = len(a.words & b.words) / len(union) if union else 0.0
        ta, tb = _share(a.title_words, qwords), _share(b.title_words, qwords)
        ab, ba = _bridge(a, b), _bridge(b, a)
        soft = max(_share(a.title_words, b.words - b.title_words), _share(b.title_words, a.words - a.title_words))
        same = float(bool(a.title_phrase) and a.title_phrase == b.title_phrase)
        return [max(la, lb), min(la, lb), pair, pair - max(la, lb),
                max(wa, wb), min(wa, wb), wpair, wpair - max(wa, wb), jacc, max(ta, tb), min(ta, tb),
                float(ab or ba), float(ab and ba), soft, same]

    def features(self, question: str, q_vec: np.ndarray, left: Sequence[Passage], right: Sequence[Passage],
                 left_vecs: np.ndarray, right_vecs: np.ndarray) -> np.ndarray:
        """The (n, len(FEATURE_NAMES)) matrix for n pairs of one question; vectors are unit length."""
        qwords = _question_words(question)
        qweight = self._weight(qwords) or 1.0
        emb = _embedding_features(np.broadcast_to(q_vec, left_vecs.shape), left_vecs, right_vecs)
        lex = np.array([self._lexical(qwords, qweight, _view(pa.title, pa.text), _view(pb.title, pb.text))
                        for pa, pb in zip(left, right, strict=True)], dtype=np.float32)
        return np.hstack([emb, lex.reshape(len(emb), -1)]).astype(np.float32)

    def state(self) -> dict:
        return {"doc_freq": self.doc_freq, "n_docs": self.n_docs}


def as_passage(item: PassageLike) -> Passage:
    """Accept a Passage, a (title, text) pair or bare text. Bare text has no title, so the title
    and bridge features stay silent for it: pass Passages where titles are known."""
    if isinstance(item, Passage):
        return item
    if isinstance(item, str):
        return Passage(id="", title="", text=item)
    if isinstance(item, tuple) and len(item) == 2 and all(isinstance(x, str) for x in item):
        return Passage(id="", title=item[0], text=item[1])
    raise ModelError(f"a passage must be a Passage, a (title, text) tuple or a string, got {type(item).__name__}",
                     fix="pass retrieval hits' .passage objects")


# --------------------------------------------------------------------------------------------
# Training data


@dataclass(frozen=True)
class LabelledQuestion:
    """A question with its candidate paragraphs and which of them are supporting evidence."""

    dataset: str
    qid: str
    question: str
    passages: tuple[Passage, ...]
    supporting: frozenset[int]


@dataclass(frozen=True)
class PairExample:
    question: int  # index into the question list
    a: int
    b: int
    label: int
    kind: str  # "gold" (both supporting), "hard" (one), "easy" (none)


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise DatasetError(f"file not found: {path}",
                           fix="place the benchmark data at ../shared/data or pass --data DIR")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DatasetError(f"invalid JSON: {exc.msg}", where=f"{path}:{exc.lineno}",
                           fix="restore the file from its source") from exc


def load_hotpotqa(path: Path, limit: int | None = None) -> list[LabelledQuestion]:
    """HotpotQA distractor format: 10 [title, sentences] paragraphs; supporting_facts name the gold titles."""
    out = []
    for n, item in enumerate(_read_json(path)[:limit]):
        try:
            gold = {title for title, _ in item["supporting_facts"]}
            passages = tuple(Passage(id=f"{item['id']}#{i}", title=title, text="".join(sents).strip())
                             for i, (title, sents) in enumerate(item["context"]))
            supporting = frozenset(i for i, p in enumerate(passages) if p.title in gold)
            out.append(LabelledQuestion("hotpotqa", str(item["id"]), item["question"], passages, supporting))
        except (KeyError, TypeError, ValueError) as exc:
            raise DatasetError(f"question {n} is not in HotpotQA format ({exc!r})", where=str(path),
                               fix="use the official distractor-setting JSON") from exc
    return out


def load_musique(path: Path, limit: int | None = None) -> list[LabelledQuestion]:
    """MuSiQue format: 20 paragraphs each with title, paragraph_text and is_supporting."""
    out = []
    for n, item in enumerate(_read_json(path)[:limit]):
        try:
            passages = tuple(Passage(id=f"{item['id']}#{i}", title=p["title"], text=p["paragraph_text"])
                             for i, p in enumerate(item["paragraphs"]))
            supporting = frozenset(i for i, p in enumerate(item["paragraphs"]) if p["is_supporting"])
            out.append(LabelledQuestion("musique", str(item["id"]), item["question"], passages, supporting))
        except (KeyError, TypeError) as exc:
            raise DatasetError(f"question {n} is not in MuSiQue format ({exc!r})", where=str(path),
                               fix="use the official MuSiQue-Ans JSON") from exc
    return out


def load_training_questions(data_dir: Path | None = None, limit: int | None = None) -> list[LabelledQuestion]:
    """Both datasets' labelled questions (``limit`` per dataset); questions with < 2 gold are skipped."""
    root = Path(data_dir) if data_dir else shared_data_dir()
    questions = load_hotpotqa(root / HOTPOTQA_FILE, limit) + load_musique(root / MUSIQUE_FILE, limit)
    return [q for q in questions if len(q.supporting) >= 2]


def grouped_split(questions: Sequence[LabelledQuestion], test_fraction: float = 0.2,
                  seed: int = 0) -> tuple[list[int], list[int]]:
    """Question indices for train and test, split per dataset so both sides hold each dataset.

    Whole questions go to one side: pairs of a test question never appear in training."""
    if not 0.0 < test_fraction < 1.0:
        raise ModelError(f"test_fraction must be in (0, 1), got {test_fraction}")
    rng = random.Random(seed)
    train, test = [], []
    for name in sorted({q.dataset for q in questions}):
        idx = [i for i, q in enumerate(questions) if q.dataset == name]
        rng.shuffle(idx)
        n_test = max(1, round(len(idx) * test_fraction)) if len(idx) > 1 else 0
        test += idx[:n_test]
        train += idx[n_test:]
    return sorted(train), sorted(test)


def build_pairs(questions: Sequence[LabelledQuestion], indices: Iterable[int], *, neg_ratio: int = 4,
                hard_share: float = 0.75, seed: int = 0) -> list[PairExample]:
    """All gold pairs of each question, plus ``neg_ratio`` negatives per gold pair: ``hard_share``
    of them one-gold-one-distractor (the mistake that matters), the rest two distractors."""
    rng = random.Random(seed)
    out: list[PairExample] = []
    for qi in indices:
        q = questions[qi]
        n = len(q.passages)
        gold = [(a, b) for a in range(n) for b in range(a + 1, n) if a in q.supporting and b in q.supporting]
        hard = [(a, b) for a in range(n) for b in range(a + 1, n) if (a in q.supporting) != (b in q.supporting)]
        easy = [(a, b) for a in range(n) for b in range(a + 1, n) if a not in q.supporting and b not in q.supporting]
        n_neg = neg_ratio * len(gold)
        n_hard = min(len(hard), round(n_neg * hard_share))
        n_easy = min(len(easy), n_neg - n_hard)
        chosen = ([(p, 1, "gold") for p in gold] + [(p, 0, "hard") for p in rng.sample(hard, n_hard)]
                  + [(p, 0, "easy") for p in rng.sample(easy, n_easy)])
        for (a, b), label, kind in chosen:
            if rng.random() < 0.5:  # order carries no meaning; features are symmetric anyway
                a, b = b, a
            out.append(PairExample(qi, a, b, label, kind))
    return out


class _Embedded:
    """Question and passage vectors for a question list, encoded in one batched pass."""

    def __init__(self, questions: Sequence[LabelledQuestion], encoder: TextEncoder, progress: Progress,
                 store: Path | None) -> None:
        texts = [q.question for q in questions] + [p.as_context() for q in questions for p in q.passages]
        unique = list(dict.fromkeys(texts))
        if store is not None:
            encoder.load_store(store)
        todo = sum(not encoder.cached(t) for t in unique)
        progress(f"encoding {todo} of {len(unique)} distinct texts with {encoder.name} (the rest are cached)")
        vecs = encoder.encode(unique)
        if store is not None and todo:
            encoder.save_store(store, unique)
        row = {t: i for i, t in enumerate(unique)}
        self.q = np.stack([vecs[row[q.question]] for q in questions])
        self.p = [np.stack([vecs[row[p.as_context()]] for p in q.passages]) for q in questions]


def _features_for(pairs: Sequence[PairExample], questions: Sequence[LabelledQuestion], emb: _Embedded,
                  featurizer: PairFeaturizer) -> np.ndarray:
    """Feature rows in the order of ``pairs``, computed question by question (one batch each)."""
    by_question: dict[int, list[int]] = {}
    for row, ex in enumerate(pairs):
        by_question.setdefault(ex.question, []).append(row)
    out = np.zeros((len(pairs), len(FEATURE_NAMES)), dtype=np.float32)
    for qi, rows in by_question.items():
        q, exs = questions[qi], [pairs[r] for r in rows]
        out[rows] = featurizer.features(q.question, emb.q[qi], [q.passages[e.a] for e in exs],
                                        [q.passages[e.b] for e in exs], emb.p[qi][[e.a for e in exs]],
                                        emb.p[qi][[e.b for e in exs]])
    return out


# --------------------------------------------------------------------------------------------
# Models and metrics

# Simplest first: on a tie in cross-validated F1 the earlier one wins.
MODEL_KINDS = ("logreg", "boosted-trees", "mlp")


def _make_estimator(kind: str, seed: int) -> Any:
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if kind == "logreg":
        return make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=5000))
    if kind == "mlp":
        return make_pipeline(StandardScaler(), MLPClassifier(hidden_layer_sizes=(16,), alpha=1.0, max_iter=1000,
                                                             random_state=seed))
    if kind == "boosted-trees":
        return HistGradientBoostingClassifier(max_iter=200, learning_rate=0.05, max_leaf_nodes=15, random_state=seed)
    raise ModelError(f"unknown classifier kind {kind!r}", fix=f"use one of {', '.join(MODEL_KINDS)}")


def binary_metrics(labels: Sequence[int], predicted: Sequence[int]) -> dict[str, float | int]:
    y, p = np.asarray(labels, dtype=int), np.asarray(predicted, dtype=int)
    tp, fp = int(((p == 1) & (y == 1)).sum()), int(((p == 1) & (y == 0)).sum())
    fn, tn = int(((p == 0) & (y == 1)).sum()), int(((p == 0) & (y == 0)).sum())
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"n": int(len(y)), "positives": int(y.sum()), "accuracy": float((tp + tn) / len(y)) if len(y) else 0.0,
            "precision": precision, "recall": recall, "f1": f1, "tp": tp, "fp": fp, "fn": fn, "tn": tn}


def best_threshold(labels: Sequence[int], scores: Sequence[float],
                   grid: Iterable[float] | None = None) -> tuple[float, float]:
    """The threshold with the best F1 (ties go to the one nearest 0.5) and that F1.

    The default grid covers probabilities 0.05..0.95; pass the observed values for raw scores."""
    y, s = np.asarray(labels), np.asarray(scores)
    points = np.round(np.arange(0.05, 0.951, 0.01), 2) if grid is None else np.unique(np.asarray(list(grid)))
    best = (-1.0, 0.0, 0.5)
    for t in points:
        f1 = float(binary_metrics(y, s >= t)["f1"])
        key = (f1, -abs(float(t) - 0.5))
        if key > best[:2]:
            best = (*key, float(t))
    return best[2], best[0]


def _oof_scores(kind: str, x: np.ndarray, y: np.ndarray, groups: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """Out-of-fold probabilities with whole questions per fold (grouped k-fold)."""
    from sklearn.model_selection import GroupKFold

    scores = np.zeros(len(y), dtype=float)
    splitter = GroupKFold(n_splits=min(folds, len(np.unique(groups))), shuffle=True, random_state=seed)
    for tr, te in splitter.split(x, y, groups):
        scores[te] = _make_estimator(kind, seed).fit(x[tr], y[tr]).predict_proba(x[te])[:, 1]
    return scores


def _per_dataset(pairs: Sequence[PairExample], questions: Sequence[LabelledQuestion], y: np.ndarray,
                 predicted: np.ndarray) -> dict[str, dict]:
    out = {"overall": binary_metrics(y, predicted)}
    names = np.array([questions[e.question].dataset for e in pairs])
    for name in sorted(set(names)):
        mask = names == name
        out[name] = binary_metrics(y[mask], predicted[mask])
    return out


# --------------------------------------------------------------------------------------------
# The classifier


class PairClassifier:
    """A trained C(q, d_a, d_b); probabilities in [0, 1], positive at or above ``threshold``."""

    def __init__(self, estimator: Any, featurizer: PairFeaturizer, *, threshold: float = 0.5,
                 metadata: dict | None = None, encoder: TextEncoder | None = None) -> None:
        self.estimator = estimator
        self.featurizer = featurizer
        self.threshold = float(threshold)
        self.metadata = metadata or {}
        self._encoder = encoder

    @property
    def encoder(self) -> TextEncoder:
        if self._encoder is None:
            self._encoder = get_encoder()
        return self._encoder

    @staticmethod
    def default_path() -> Path:
        return cache_dir("classifier") / MODEL_FILENAME

    def predict_proba(self, question: str, passage_a: PassageLike, passage_b: PassageLike) -> float:
        """Probability that the two passages together are the evidence for ``question``."""
        return self.predict_many(question, [(passage_a, passage_b)])[0]

    def predict_many(self, question: str, pairs: Sequence[tuple[PassageLike, PassageLike]]) -> list[float]:
        """Probabilities for many pairs of one question: every distinct text is encoded once."""
        if not pairs:
            return []
        left = [as_passage(a) for a, _ in pairs]
        right = [as_passage(b) for _, b in pairs]
        vecs = self.encoder.encode([question] + [p.as_context() for p in left + right])
        n = len(pairs)
        x = self.featurizer.features(question, vecs[0], left, right, vecs[1:1 + n], vecs[1 + n:])
        return [float(p) for p in self.estimator.predict_proba(x)[:, 1]]

    def accepts(self, question: str, passage_a: PassageLike, passage_b: PassageLike) -> bool:
        """The classifier's decision at its stored threshold."""
        return self.predict_proba(question, passage_a, passage_b) >= self.threshold

    def save(self, path: Path | None = None) -> Path:
        import joblib

        target = Path(path) if path else self.default_path()
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        joblib.dump({"feature_version": FEATURE_VERSION, "feature_names": list(FEATURE_NAMES),
                     "estimator": self.estimator, "featurizer": self.featurizer.state(),
                     "threshold": self.threshold, "metadata": self.metadata}, tmp)
        tmp.replace(target)  # a reader never sees a half-written model
        return target

    @classmethod
    def load(cls, path: Path | None = None, *, encoder: TextEncoder | None = None) -> PairClassifier | None:
        """The trained classifier at ``path`` (default: the cache), or None when none was trained."""
        import joblib

        source = Path(path) if path else cls.default_path()
        if not source.is_file():
            return None
        fix = "retrain it: python -m explorer train-classifier"
        try:
            blob = joblib.load(source)
        except Exception as exc:  # truncated or foreign files fail in many ways inside pickle
            raise ModelError(f"cannot read the pair classifier ({exc})", where=str(source), fix=fix) from exc
        if not isinstance(blob, dict) or not {"estimator", "featurizer", "threshold"} <= blob.keys():
            raise ModelError("not a pair-classifier file", where=str(source), fix=fix)
        if blob.get("feature_version") != FEATURE_VERSION:
            raise ModelError(f"the classifier was trained with feature version {blob.get('feature_version')}, "
                             f"this code computes version {FEATURE_VERSION}", where=str(source), fix=fix)
        return cls(blob["estimator"], PairFeaturizer(**blob["featurizer"]), threshold=blob["threshold"],
                   metadata=blob.get("metadata", {}), encoder=encoder)


# --------------------------------------------------------------------------------------------
# Training


def train(data_dir: Path | None = None, *, seed: int = 0, limit: int | None = None, test_fraction: float = 0.2,
          neg_ratio: int = 4, folds: int = 5, repeats: int = 2, kinds: Sequence[str] = MODEL_KINDS,
          encoder: TextEncoder | None = None, progress: Progress | None = None,
          store: Path | bool | None = None) -> tuple[PairClassifier, dict]:
    """Train on HotpotQA + MuSiQue supporting-paragraph labels and evaluate on held-out questions.

    The model kind and the threshold are chosen by grouped cross-validation on the training
    questions only; the test questions are scored once, by the final model. ``store`` is the
    embedding store that spares re-encoding the paragraphs (default: in the classifier cache;
    False: none)."""
    say = progress or (lambda _msg: None)
    started = time.perf_counter()
    root = Path(data_dir) if data_dir else shared_data_dir()
    questions = load_training_questions(root, limit)
    if len(questions) < 4:
        raise DatasetError(f"only {len(questions)} usable questions under {root}", fix="use --limit 2 or more")
    train_q, test_q = grouped_split(questions, test_fraction, seed)
    say(f"{len(questions)} questions: {len(train_q)} train, {len(test_q)} test (split by question, seed {seed})")
    train_pairs = build_pairs(questions, train_q, neg_ratio=neg_ratio, seed=seed)
    test_pairs = build_pairs(questions, test_q, neg_ratio=neg_ratio, seed=seed + 1)
    say(f"{len(train_pairs)} train pairs ({sum(e.label for e in train_pairs)} positive), "
        f"{len(test_pairs)} test pairs ({sum(e.label for e in test_pairs)} positive)")

    enc = encoder or get_encoder()
    t0 = time.perf_counter()
    if store is None or store is True:
        store = cache_dir("classifier") / EMBEDDING_STORE
    emb = _Embedded(questions, enc, say, store or None)
    encode_s = time.perf_counter() - t0
    featurizer = PairFeaturizer.fit(p for i in train_q for p in questions[i].passages)
    x_train = _features_for(train_pairs, questions, emb, featurizer)
    x_test = _features_for(test_pairs, questions, emb, featurizer)
    y_train = np.array([e.label for e in train_pairs])
    y_test = np.array([e.label for e in test_pairs])
    groups = np.array([e.question for e in train_pairs])

    selection = []
    for kind in kinds:
        runs = [best_threshold(y_train, _oof_scores(kind, x_train, y_train, groups, folds, seed + r))
                for r in range(repeats)]
        f1, thr = float(np.mean([f for _, f in runs])), float(np.median([t for t, _ in runs]))
        selection.append({"model": kind, "cv_f1": round(f1, 4), "threshold": round(thr, 2)})
        say(f"  {kind:14s} cross-validated F1 {f1:.3f} at threshold {thr:.2f}")
    best = max(selection, key=lambda c: (c["cv_f1"], -list(kinds).index(c["model"])))
    kind, thr = best["model"], best["threshold"]
    say(f"selected {kind}, threshold {thr:.2f}; fitting on all training pairs")
    estimator = _make_estimator(kind, seed).fit(x_train, y_train)

    test_scores = estimator.predict_proba(x_test)[:, 1]
    held_out = _per_dataset(test_pairs, questions, y_test, (test_scores >= thr).astype(int))
    # Baselines on the same test pairs: the majority class, and cosine alone (both passages close
    # to the question: the lower of the two cosines) with its threshold tuned on the training pairs.
    col = FEATURE_NAMES.index("cos_q_lo")
    cos_thr, _ = best_threshold(y_train, x_train[:, col], grid=np.round(x_train[:, col], 3))
    baselines = {
        "always_negative": _per_dataset(test_pairs, questions, y_test, np.zeros_like(y_test)),
        "min_cosine": _per_dataset(test_pairs, questions, y_test, (x_test[:, col] >= cos_thr).astype(int)),
    }
    model = PairClassifier(estimator, featurizer, threshold=thr, encoder=enc)
    ranking = _top_pair_accuracy(model, [questions[i] for i in test_q])
    metrics = {
        "held_out": held_out, "baselines": baselines, "min_cosine_threshold": cos_thr,
        "top_pair_accuracy": ranking, "selection": selection, "chosen": {"model": kind, "threshold": thr},
        "train_seconds": round(time.perf_counter() - started, 1), "encode_seconds": round(encode_s, 1),
    }
    model.metadata = {
        "feature_version": FEATURE_VERSION, "feature_names": list(FEATURE_NAMES), "encoder": enc.name,
        "data_files": {rel: _file_digest(root / rel) for rel in (HOTPOTQA_FILE, MUSIQUE_FILE)},
        "seed": seed, "limit": limit, "neg_ratio": neg_ratio, "test_fraction": test_fraction,
        "counts": {"questions": {"train": len(train_q), "test": len(test_q),
                                 **{name: sum(q.dataset == name for q in questions)
                                    for name in sorted({q.dataset for q in questions})}},
                   "pairs": {"train": len(train_pairs), "test": len(test_pairs),
                             "train_positive": int(y_train.sum()), "test_positive": int(y_test.sum())}},
        "metrics": metrics,
        "trained_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "test_question_ids": sorted(questions[i].qid for i in test_q),
    }
    return model, metrics


def _file_digest(path: Path) -> str:
    """Short content hash, so a model records exactly which data it learnt from."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _top_pair_accuracy(model: PairClassifier, questions: Sequence[LabelledQuestion]) -> dict[str, float]:
    """Over ALL pairs of each test question's paragraphs: how often the best-scored pair is gold.

    This is the situation inverse selection faces (every pair of the retrieved set), without the
    negative sampling of the training pairs."""
    hits: dict[str, list[int]] = {}
    for q in questions:
        n = len(q.passages)
        idx = [(a, b) for a in range(n) for b in range(a + 1, n)]
        probs = model.predict_many(q.question, [(q.passages[a], q.passages[b]) for a, b in idx])
        a, b = idx[int(np.argmax(probs))]
        hits.setdefault(q.dataset, []).append(int(a in q.supporting and b in q.supporting))
    out = {name: float(np.mean(v)) for name, v in sorted(hits.items())}
    out["overall"] = float(np.mean([x for v in hits.values() for x in v])) if hits else 0.0
    return out
