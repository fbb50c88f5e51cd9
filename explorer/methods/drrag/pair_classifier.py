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

Training data are the supporting-paragraph labels of HotpotQA (distractor setting) and MuSiQue
(or any question files that label their paragraphs). A trained classifier is a folder with no
pickle in it (:mod:`explorer.methods.drrag.pair_weights`): ``weights.safetensors`` (the estimator's
arrays), ``featurizer.json`` (document frequencies) and ``manifest.json`` (model family, feature
version, threshold, seed, training files with their hashes, held-out scores). One ships with the
explorer in ``explorer/data/pair_classifier/`` so DR-RAG works on a fresh install;
``python -m explorer train-classifier`` retrains it into the user cache, which then takes
precedence (:meth:`PairClassifier.default_source`).
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
from explorer.methods.drrag.pair_weights import ArrayEstimator, export_estimator
from explorer.paths import cache_dir, portable_path, shared_data_dir
from explorer.retrieval.base import Passage
from explorer.retrieval.embeddings import TextEncoder, get_encoder

FEATURE_VERSION = 1
MODEL_DIRNAME = "pair_classifier"
MANIFEST, WEIGHTS, FEATURIZER = "manifest.json", "weights.safetensors", "featurizer.json"
CLASSIFIER_FILES = (WEIGHTS, FEATURIZER, MANIFEST)
STORE_FORMAT = 1
SHIPPED_DIR = Path(__file__).resolve().parents[2] / "data" / "pair_classifier"
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


TRAINABLE_FORMATS = ("hotpotqa", "2wiki", "musique")
_TRAIN_FIX = ("train on question files whose records label their paragraphs: HotpotQA / 2WikiMultihopQA "
              "(context + supporting_facts) or MuSiQue (paragraphs with is_supporting)")


def _context_pairs(context: Any) -> list[tuple[str, list[str]]]:
    if isinstance(context, dict):  # the Hugging Face layout
        context = list(zip(context.get("title", []), context.get("sentences", []), strict=False))
    if not isinstance(context, list):
        raise ValueError("'context' is not a list")
    out = []
    for i, item in enumerate(context):
        if not (isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], str)
                and isinstance(item[1], list) and all(isinstance(x, str) for x in item[1])):
            raise ValueError(f"context[{i}] is not [title, [sentence, ...]]")
        out.append((item[0], item[1]))
    return out


def _labelled(fmt: str, label: str, record: dict, index: int) -> LabelledQuestion:
    from explorer.eval.question_formats import question_id
    from explorer.retrieval.splitter import join_sentences

    qid = question_id(record, index)
    question = record.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ValueError("no 'question' text")
    if fmt == "musique":
        paragraphs = record.get("paragraphs")
        if not isinstance(paragraphs, list):
            raise ValueError("no 'paragraphs' list")
        passages, supporting = [], set()
        for i, p in enumerate(paragraphs):
            if not (isinstance(p, dict) and isinstance(p.get("title"), str)
                    and isinstance(p.get("paragraph_text"), str)):
                raise ValueError(f"paragraphs[{i}] lacks a string 'title' or 'paragraph_text'")
            passages.append(Passage(id=f"{qid}#{i}", title=p["title"], text=p["paragraph_text"]))
            if p.get("is_supporting") is True:
                supporting.add(i)
        return LabelledQuestion(label, qid, question, tuple(passages), frozenset(supporting))
    if "context" not in record or "supporting_facts" not in record:
        raise ValueError("no 'context' with 'supporting_facts' to learn from")
    facts = record["supporting_facts"]
    if isinstance(facts, dict):
        facts = list(zip(facts.get("title", []), facts.get("sent_id", []), strict=False))
    if not isinstance(facts, list) or not all(isinstance(f, (list, tuple)) and f and isinstance(f[0], str)
                                              for f in facts):
        raise ValueError("'supporting_facts' is not a list of [title, sentence index]")
    gold = {f[0] for f in facts}
    passages = tuple(Passage(id=f"{qid}#{i}", title=title, text=join_sentences(sents))
                     for i, (title, sents) in enumerate(_context_pairs(record["context"])))
    return LabelledQuestion(label, qid, question, passages, frozenset(i for i, p in enumerate(passages)
                                                                       if p.title in gold))


def labelled_questions(source: Any, limit: int | None = None) -> list[LabelledQuestion]:
    """The first ``limit`` questions of a question source (:class:`~explorer.eval.datasets.DatasetSource`),
    each with its paragraphs and which of them are supporting evidence."""
    from explorer.eval.question_files import format_hint, iter_records

    if not source.path.is_file():
        from explorer.options import usage

        hint = usage("data_dir", "DIR")
        raise DatasetError(f"file not found: {source.path}",
                           fix="set EXPLORER_DATA to the folder of the benchmark samples (../shared/data)"
                               + (f", or pass {hint}" if hint else ""))
    if source.format not in TRAINABLE_FORMATS:
        raise DatasetError(f"{source.path} is read as {source.title}, whose records do not label their paragraphs",
                           fix=_TRAIN_FIX + format_hint())
    out: list[LabelledQuestion] = []
    for index, (where, record) in enumerate(iter_records(source.path)):
        if limit is not None and index >= limit:
            break
        if not isinstance(record, dict):
            raise DatasetError(f"{where} is not a JSON object", fix=_TRAIN_FIX)
        try:
            out.append(_labelled(source.format, source.label, record, index))
        except ValueError as exc:
            raise DatasetError(f"{where} has {exc} (read as {source.title})", fix=_TRAIN_FIX + format_hint()) \
                from None
    return out


def _source(path: Path, fmt: str, label: str) -> Any:
    from explorer.eval.datasets import DatasetSource

    return DatasetSource(label=label, path=path, format=fmt, named=True)


def load_hotpotqa(path: Path, limit: int | None = None) -> list[LabelledQuestion]:
    """HotpotQA distractor format: 10 [title, sentences] paragraphs; supporting_facts name the gold titles."""
    return labelled_questions(_source(Path(path), "hotpotqa", "hotpotqa"), limit)


def load_musique(path: Path, limit: int | None = None) -> list[LabelledQuestion]:
    """MuSiQue format: 20 paragraphs each with title, paragraph_text and is_supporting."""
    return labelled_questions(_source(Path(path), "musique", "musique"), limit)


def default_training_sources(data_dir: Path | None = None) -> list[Any]:
    """HotpotQA dev (distractor) and MuSiQue dev from the benchmark data folder."""
    root = Path(data_dir) if data_dir else shared_data_dir()
    return [_source(root / HOTPOTQA_FILE, "hotpotqa", "hotpotqa"), _source(root / MUSIQUE_FILE, "musique", "musique")]


def load_training_questions(data_dir: Path | None = None, limit: int | None = None,
                            sources: Sequence[Any] | None = None) -> list[LabelledQuestion]:
    """Every source's labelled questions (``limit`` per source; default HotpotQA and MuSiQue dev);
    questions with < 2 supporting paragraphs are skipped."""
    chosen = list(sources) if sources is not None else default_training_sources(data_dir)
    questions = [q for source in chosen for q in labelled_questions(source, limit)]
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
        self.source: Path | None = None  # the folder it was loaded from
        self.origin = "trained"  # "shipped", "cache", "file" (a folder named by the user) or "trained" (in memory)

    @property
    def encoder(self) -> TextEncoder:
        if self._encoder is None:
            self._encoder = get_encoder()
        return self._encoder

    @staticmethod
    def default_path() -> Path:
        """Where ``train-classifier`` writes (and DR-RAG first looks): the classifier folder in the user cache."""
        return cache_dir("classifier") / MODEL_DIRNAME

    @staticmethod
    def shipped_path() -> Path:
        """The classifier that ships with the explorer (package data, found from any working directory)."""
        return SHIPPED_DIR

    @classmethod
    def default_source(cls) -> tuple[Path, str]:
        """(folder, origin) of the classifier used when none is named: a retrained one in the cache, else the
        shipped one."""
        cached = cls.default_path()
        if (cached / MANIFEST).is_file():
            return cached, "cache"
        return cls.shipped_path(), "shipped"

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
        """Write the classifier as a folder (no pickle): weights.safetensors, featurizer.json, manifest.json.

        The manifest, written last and holding the other files' hashes, marks the folder complete."""
        from safetensors.numpy import save_file

        target = Path(path).expanduser() if path else self.default_path()
        if target.suffix.lower() in (".joblib", ".pkl", ".pickle"):
            raise ModelError(f"{target.name} names a pickle file; the pair classifier is stored as a folder",
                             fix="give a folder path (it is created), e.g. my-classifier/")
        if target.is_file():
            raise ModelError(f"{target} is a file; the pair classifier is stored as a folder", fix="give a folder path")
        estimator = self.estimator
        if isinstance(estimator, ArrayEstimator):
            tensors, spec = estimator.tensors, estimator.spec
        else:
            tensors, spec = export_estimator(estimator, str(self.metadata.get("family") or self.family))
        target.mkdir(parents=True, exist_ok=True)
        weights = {k: np.ascontiguousarray(v) for k, v in tensors.items()}
        featurizer = json.dumps(self.featurizer.state(), ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        _atomic_bytes(target / WEIGHTS, _safetensors_bytes(save_file, weights))
        _atomic_bytes(target / FEATURIZER, featurizer.encode("utf-8"))
        held = ((self.metadata.get("metrics") or {}).get("held_out") or {}).get("overall") or {}
        manifest = {
            "format": STORE_FORMAT, "family": spec["family"], "estimator": spec, "threshold": self.threshold,
            "held_out_f1": held.get("f1"), "trained_by": "python -m explorer train-classifier",
            "feature_version": FEATURE_VERSION, "feature_names": list(FEATURE_NAMES),
            "files": {WEIGHTS: _sha256(target / WEIGHTS), FEATURIZER: _sha256(target / FEATURIZER)},
            **{k: v for k, v in self.metadata.items()
               if k not in ("feature_version", "feature_names", "family", "held_out_f1", "trained_by", "threshold")},
        }
        _atomic_bytes(target / MANIFEST, json.dumps(manifest, indent=1, ensure_ascii=False).encode("utf-8"))
        return target

    @property
    def family(self) -> str:
        if isinstance(self.estimator, ArrayEstimator):
            return self.estimator.family
        return str(self.metadata.get("family") or "")

    @classmethod
    def load(cls, path: Path | None = None, *, encoder: TextEncoder | None = None) -> PairClassifier | None:
        """The classifier in folder ``path`` (or its manifest.json); default: the cache's, else the shipped one.

        Returns None when ``path`` holds no classifier. Nothing is unpickled: weights are safetensors
        arrays, checked against the hashes in the manifest, and the manifest's feature version must be
        the one this code computes."""
        from safetensors.numpy import load_file

        if path is None:
            folder, origin = cls.default_source()
        else:
            folder, origin = Path(path).expanduser(), "file"
            if folder.name == MANIFEST:
                folder = folder.parent
        fix = "retrain it: python -m explorer train-classifier" + ("" if origin != "file" else " --out FOLDER")
        if folder.is_file():
            if folder.suffix.lower() in (".joblib", ".pkl", ".pickle"):
                raise ModelError("pickled classifiers are not loaded (unpickling runs code from the file)",
                                 where=str(folder), fix=fix)
            raise ModelError("not a pair-classifier folder (a folder with manifest.json)", where=str(folder), fix=fix)
        manifest_path = folder / MANIFEST
        if not manifest_path.is_file():
            return None
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ModelError(f"cannot read the classifier manifest ({exc})", where=str(manifest_path), fix=fix) from exc
        if not isinstance(manifest, dict) or manifest.get("format") != STORE_FORMAT:
            raise ModelError(f"not a pair-classifier manifest of format {STORE_FORMAT}", where=str(manifest_path),
                             fix=fix)
        if manifest.get("feature_version") != FEATURE_VERSION or manifest.get("feature_names") != list(FEATURE_NAMES):
            raise StaleClassifier(f"the classifier was trained on feature version {manifest.get('feature_version')}, "
                                  f"this code computes version {FEATURE_VERSION}", where=str(manifest_path), fix=fix)
        for name, digest in (manifest.get("files") or {}).items():
            if not (folder / name).is_file() or _sha256(folder / name) != digest:
                raise ModelError(f"{name} is missing or does not match the manifest's hash", where=str(folder), fix=fix)
        try:
            tensors = load_file(str(folder / WEIGHTS))
            state = json.loads((folder / FEATURIZER).read_text(encoding="utf-8"))
            estimator = ArrayEstimator(tensors, manifest["estimator"])
            featurizer = PairFeaturizer(doc_freq=state["doc_freq"], n_docs=state["n_docs"])
            threshold = float(manifest["threshold"])
        except ModelError:
            raise
        except Exception as exc:  # a damaged or foreign file: say so instead of a traceback
            raise ModelError(f"cannot read the pair classifier ({type(exc).__name__}: {exc})", where=str(folder),
                             fix=fix) from exc
        if estimator.family != "boosted-trees" and estimator.n_features != len(FEATURE_NAMES):
            raise StaleClassifier(f"the classifier expects {estimator.n_features} features, this code computes "
                                  f"{len(FEATURE_NAMES)}", where=str(folder), fix=fix)
        metadata = {k: v for k, v in manifest.items() if k not in ("estimator", "files", "format")}
        model = cls(estimator, featurizer, threshold=threshold, metadata=metadata, encoder=encoder)
        model.source, model.origin = folder, origin
        return model

    def describe(self) -> dict[str, Any]:
        """What a trace and a report say about the classifier: where it came from, its family, threshold and F1."""
        held = ((self.metadata.get("metrics") or {}).get("held_out") or {}).get("overall") or {}
        return {"origin": self.origin, "path": portable_path(self.source) if self.source else None,
                "family": self.family,
                "threshold": self.threshold, "held_out_f1": held.get("f1"),
                "feature_version": self.metadata.get("feature_version", FEATURE_VERSION)}


class StaleClassifier(ModelError):
    """A stored classifier computed on other features than this code's (FEATURE_VERSION changed)."""


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _safetensors_bytes(save_file: Callable[..., None], tensors: dict[str, np.ndarray]) -> bytes:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / WEIGHTS
        save_file(tensors, str(file))
        return file.read_bytes()


def _atomic_bytes(path: Path, data: bytes) -> None:
    from explorer.outputs import write_file

    write_file(path, data)  # a reader never sees a half-written file; a failed write names it


# --------------------------------------------------------------------------------------------
# Training


def _cross_validate(kinds: Sequence[str], x_train: np.ndarray, y_train: np.ndarray, groups: np.ndarray, folds: int,
                    repeats: int, seed: int, say: Progress) -> list[dict[str, Any]]:
    """Each model kind's cross-validated F1 and threshold on the training pairs (grouped by question)."""
    selection = []
    for kind in kinds:
        runs = [best_threshold(y_train, _oof_scores(kind, x_train, y_train, groups, folds, seed + r))
                for r in range(repeats)]
        f1, thr = float(np.mean([f for _, f in runs])), float(np.median([t for t, _ in runs]))
        selection.append({"model": kind, "cv_f1": round(f1, 4), "threshold": round(thr, 2)})
        say(f"  {kind:14s} cross-validated F1 {f1:.3f} at threshold {thr:.2f}")
    return selection


def _baselines(test_pairs: list[Any], questions: Any, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray,
               y_test: np.ndarray) -> tuple[dict[str, Any], float]:
    """Baselines on the same test pairs: the majority class, and cosine alone (both passages close
    to the question: the lower of the two cosines) with its threshold tuned on the training pairs."""
    col = FEATURE_NAMES.index("cos_q_lo")
    cos_thr, _ = best_threshold(y_train, x_train[:, col], grid=np.round(x_train[:, col], 3))
    return {
        "always_negative": _per_dataset(test_pairs, questions, y_test, np.zeros_like(y_test)),
        "min_cosine": _per_dataset(test_pairs, questions, y_test, (x_test[:, col] >= cos_thr).astype(int)),
    }, cos_thr


def train(data_dir: Path | None = None, *, seed: int = 0, limit: int | None = None, test_fraction: float = 0.2,
          neg_ratio: int = 4, folds: int = 5, repeats: int = 2, kinds: Sequence[str] = MODEL_KINDS,
          encoder: TextEncoder | None = None, progress: Progress | None = None,
          store: Path | bool | None = None, sources: Sequence[Any] | None = None) -> tuple[PairClassifier, dict]:
    """Train on supporting-paragraph labels (default: HotpotQA + MuSiQue dev) and evaluate on held-out questions.

    The model kind and the threshold are chosen by grouped cross-validation on the training
    questions only; the test questions are scored once, by the final model. ``store`` is the
    embedding store that spares re-encoding the paragraphs (default: in the classifier cache;
    False: none). ``sources`` are question sources (:func:`explorer.eval.datasets.resolve_sources`)
    in a format that labels paragraphs."""
    say = progress or (lambda _msg: None)
    started = time.perf_counter()
    root = Path(data_dir) if data_dir else shared_data_dir()
    chosen_sources = list(sources) if sources is not None else default_training_sources(root)
    questions = load_training_questions(root, limit, chosen_sources)
    if len(questions) < 4:
        from explorer.options import usage

        more = usage("limit", "N") if limit is not None else None
        raise DatasetError(f"only {len(questions)} questions with two or more supporting paragraphs in "
                           f"{', '.join(str(s.path) for s in chosen_sources)}",
                           fix=("give more labelled questions" + (f" (a larger {more})" if more else "")))
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

    selection = _cross_validate(kinds, x_train, y_train, groups, folds, repeats, seed, say)
    best = max(selection, key=lambda c: (c["cv_f1"], -list(kinds).index(c["model"])))
    kind, thr = best["model"], best["threshold"]
    say(f"selected {kind}, threshold {thr:.2f}; fitting on all training pairs")
    estimator = _make_estimator(kind, seed).fit(x_train, y_train)

    test_scores = estimator.predict_proba(x_test)[:, 1]
    held_out = _per_dataset(test_pairs, questions, y_test, (test_scores >= thr).astype(int))
    baselines, cos_thr = _baselines(test_pairs, questions, x_train, y_train, x_test, y_test)
    model = PairClassifier(estimator, featurizer, threshold=thr, encoder=enc, metadata={"family": kind})
    ranking = _top_pair_accuracy(model, [questions[i] for i in test_q])
    metrics = {
        "held_out": held_out, "baselines": baselines, "min_cosine_threshold": cos_thr,
        "top_pair_accuracy": ranking, "selection": selection, "chosen": {"model": kind, "threshold": thr},
        "train_seconds": round(time.perf_counter() - started, 1), "encode_seconds": round(encode_s, 1),
    }
    model.metadata = {
        "feature_version": FEATURE_VERSION, "feature_names": list(FEATURE_NAMES), "encoder": enc.name,
        "family": kind,
        "data_files": {_data_name(src.path, root): _file_digest(src.path) for src in chosen_sources},
        "datasets": {src.label: {"file": _data_name(src.path, root), "format": src.format}
                     for src in chosen_sources},
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


def _data_name(path: Path, root: Path) -> str:
    """A data file's name as a manifest records it: relative to the benchmark data folder when inside it."""
    try:
        return Path(path).resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        return str(path)


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
