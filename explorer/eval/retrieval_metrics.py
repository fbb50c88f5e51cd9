"""Retrieval quality of BM25, dense (SM), hybrid, DR-RAG's strategies and BlendFilter on question sets with gold
paragraphs.

By default HotpotQA and MuSiQue dev; any question files whose records carry their paragraphs
(HotpotQA, 2Wiki, MuSiQue, NQ formats) can be given instead (``sources``). The question sets'
paragraphs (10 per HotpotQA question, 20 per MuSiQue question) are pooled into one corpus with
the benchmark corpus's own readers and ids (:mod:`explorer.retrieval.pool`), so every question's
gold paragraphs are in it among thousands of look-alikes. Then, per question:

* BM25, SM (DR-RAG's "similarity matching": the dense retriever) and hybrid: the top k passages
  for the question;
* DR-RAG's QDC, CIS and CFS at k (k1 = ceil(k / 2), as the paper's k/2) on each chosen base
  retriever (the paper builds them on SM): the passages of the ``selection`` event of a DR-RAG
  trace that stops before the answer (no model needed; the pair classifier judges), so the
  numbers come from the very code the method runs;
* BlendFilter (needs the model), on each chosen base retriever: a full run; its ``selection``
  event holds the union after filtering and, beside it, the union before filtering.

Scores are per question, then averaged: recall over the passages *given to the model* (and how
many), recall over *every candidate retrieved* on the way (DR-RAG's stage-1 and stage-2 lists;
for plain top-k the two are the same), precision (share of the kept passages' paragraphs that
are gold; an empty selection scores 0) and S-Precision (1 when the kept paragraphs are exactly
the gold ones). A paragraph longer than 100 words is cut into pieces; it counts as found when
any of its pieces is kept (paragraph level, as the papers count documents).
"""

from __future__ import annotations

import math
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from explorer.errors import DatasetError
from explorer.eval.datasets import DatasetSource, resolve_sources
from explorer.eval.metrics import answer_scores, document_of, passage_recall
from explorer.eval.question import Question
from explorer.methods.base import make_config, run_question
from explorer.retrieval.base import Retriever
from explorer.runtime import Runtime
from explorer.trace import Trace, TraceRecorder

DATASETS = ("hotpotqa", "musique")
DATASET_TITLES = {"hotpotqa": "HotpotQA", "musique": "MuSiQue"}
TOP_K = ("bm25", "sm", "hybrid")  # one search with the question; sm = the dense retriever
DRRAG = ("qdc", "cis", "cfs")
STRATEGIES = (*TOP_K, *DRRAG)
METHODS = (*STRATEGIES, "blendfilter")
DEFAULT_METHODS = ("bm25", "sm", "qdc", "cis", "cfs", "blendfilter")
BASES = ("bm25", "dense", "hybrid")
TOP_K_BASE = {"bm25": "bm25", "sm": "dense", "hybrid": "hybrid"}
#: DR-RAG's table 4 (recall %, passages given to the model), for the two datasets measured here.
PAPER_TABLE4: dict[tuple[str, int], dict[str, tuple[float, float]]] = {
    ("musique", 3): {"bm25": (37.57, 3.00), "sm": (58.31, 3.00), "qdc": (58.44, 3.00), "cis": (57.42, 2.82),
                     "cfs": (66.45, 2.95)},
    ("hotpotqa", 3): {"bm25": (64.67, 3.00), "sm": (80.33, 3.00), "qdc": (86.12, 3.00), "cis": (79.80, 2.74),
                      "cfs": (88.89, 2.89)},
    ("musique", 4): {"bm25": (43.52, 4.00), "sm": (66.20, 4.00), "qdc": (70.30, 4.00), "cis": (66.45, 3.61),
                     "cfs": (73.83, 3.82)},
    ("hotpotqa", 4): {"bm25": (70.72, 4.00), "sm": (85.57, 4.00), "qdc": (90.20, 4.00), "cis": (88.37, 3.43),
                      "cfs": (92.28, 3.75)},
    ("musique", 6): {"bm25": (51.69, 6.00), "sm": (76.78, 6.00), "qdc": (79.46, 6.00), "cis": (77.13, 5.23),
                     "cfs": (83.01, 5.69)},
    ("hotpotqa", 6): {"bm25": (79.93, 6.00), "sm": (92.59, 6.00), "qdc": (94.00, 6.00), "cis": (93.24, 4.72),
                      "cfs": (96.27, 5.35)},
}


#: The split the paper's table 4 was measured on: questions of each dataset's development set (the
#: evaluation it follows, Adaptive-RAG's, samples them there); its classifier trained on the train split.
PAPER_SPLIT = "dev"
_SPLIT_WORDS = {"train": "train", "training": "train", "dev": "dev", "development": "dev", "validation": "dev",
                "val": "dev", "valid": "dev", "test": "test", "testing": "test"}


def split_of(path: Path) -> str | None:
    """The split a question file's name says it holds (or its folder's, when the folder is named just so): train,
    dev or test; None when neither says.

    ``hotpotqa_train_v1.1.json`` -> train, ``musique/dev_100.json`` -> dev, ``validation/q.jsonl`` -> dev."""
    import re

    found = {_SPLIT_WORDS[w] for w in re.split(r"[^a-z]+", path.name.lower()) if w in _SPLIT_WORDS}
    if len(found) == 1:
        return found.pop()
    return _SPLIT_WORDS.get(path.parent.name.lower()) if not found else None


def paper_caution(dataset: str, source: dict[str, Any]) -> str:
    """A caution for the paper's columns of ``dataset`` when the user's questions come from another split."""
    if dataset not in {d for d, _ in PAPER_TABLE4} or source.get("named"):
        return ""
    split = source.get("split")
    if split == PAPER_SPLIT:
        return ""
    title = DATASET_TITLES.get(dataset, dataset)
    theirs = (f"the {split} split" if split else "a split its name does not tell") + f" ({Path(source['file']).name})"
    return (f"Caution: the paper's {title} figures were measured on {title}'s {PAPER_SPLIT} split; the {dataset} "
            f"questions here come from {theirs}, so the two columns measure different questions.")


def row_label(method: str, base: str) -> str:
    """The key of a table row: ``bm25``/``sm``/``hybrid`` alone, a DR-RAG strategy with its base (``cfs:dense``)."""
    return method if method in TOP_K else f"{method}:{base}"


Progress = Callable[[str], None]


@dataclass
class Row:
    """Per-question scores of one method at one k on one dataset, averaged on demand: one series per measure
    (recall, precision, exact, kept, candidate_recall, candidates, and each extra the strategy reports)."""

    series: dict[str, list[float]] = field(default_factory=dict)

    def add(self, gold: Sequence[str], kept: Sequence[str], candidates: Sequence[str] | None = None,
            **extra: float) -> None:
        """One question: ``kept`` went to the model; ``candidates`` is everything retrieved on the way."""
        pool = list(dict.fromkeys([*(candidates if candidates is not None else kept), *kept]))
        scores = {**extra, "recall": passage_recall(gold, kept, by_document=True) or 0.0,
                  "precision": paragraph_precision(gold, kept), "exact": exact_paragraphs(gold, kept),
                  "kept": len(kept), "candidate_recall": passage_recall(gold, pool, by_document=True) or 0.0,
                  "candidates": len(pool)}
        for key, value in scores.items():
            self.series.setdefault(key, []).append(value)

    @property
    def n(self) -> int:
        return len(self.series.get("recall", []))

    def mean(self, name: str) -> float:
        values = self.series.get(name, [])
        return statistics.fmean(values) if values else math.nan


def paragraph_precision(gold: Sequence[str], kept: Sequence[str]) -> float:
    """Share of the kept passages' paragraphs that are gold paragraphs; 0 for an empty selection."""
    kept_docs = {document_of(pid) for pid in kept}
    if not kept_docs:
        return 0.0
    return len(kept_docs & {document_of(g) for g in gold}) / len(kept_docs)


def exact_paragraphs(gold: Sequence[str], kept: Sequence[str]) -> float:
    """1.0 when the kept passages cover exactly the gold paragraphs (BlendFilter's S-Precision), else 0.0."""
    return float({document_of(p) for p in kept} == {document_of(g) for g in gold})


def default_sources(data_dir: Path) -> list[DatasetSource]:
    """HotpotQA dev (distractor) and MuSiQue dev from the benchmark data folder."""
    return resolve_sources(DATASETS, data_dir=data_dir)


def pooled_corpus(data_dir: Path, progress: Progress | None = None,
                  sources: Sequence[DatasetSource] | None = None) -> Retriever:
    """BM25 over the paragraphs of the question sets (default: HotpotQA and MuSiQue dev), cut and named as in the
    benchmark corpus."""
    from explorer.retrieval.bm25 import BM25Retriever
    from explorer.retrieval.corpora import collect_documents, corpus_from_documents
    from explorer.retrieval.pool import question_paragraphs

    sources = list(sources) if sources is not None else default_sources(data_dir)
    docs = collect_documents(doc for source in sources for doc in question_paragraphs(source))
    labels = "+".join(s.label for s in sources)
    name = f"{labels}-dev" if all(s.named for s in sources) else labels
    if not docs:
        files = ", ".join(str(s.path) for s in sources)
        raise DatasetError(f"the question files hold no paragraphs to search ({files})",
                           fix="retrieval metrics need question files whose records carry their paragraphs "
                               "(HotpotQA / 2Wiki context, MuSiQue paragraphs, NQ ctxs)")
    corpus = corpus_from_documents(name, docs, source=data_dir / labels, fmt="passages")
    if progress:
        progress(f"pooled corpus: {corpus.documents:,} paragraphs -> {len(corpus):,} passages")
    return BM25Retriever(corpus, progress=progress)


def base_retrievers(bm25: Any, bases: Sequence[str], *, embedder: str | None = None,
                    options: dict[str, Any] | None = None, progress: Progress | None = None) -> dict[str, Retriever]:
    """BM25 plus, where asked, dense and hybrid retrievers over the same pooled passages (the
    dense matrix is cached on disk like any corpus's)."""
    from explorer.retrieval.choice import retriever_config
    from explorer.retrieval.dense import DenseRetriever
    from explorer.retrieval.embeddings import get_encoder
    from explorer.retrieval.hybrid import HybridRetriever

    out: dict[str, Retriever] = {"bm25": bm25}
    if any(b in ("dense", "hybrid") for b in bases):
        choice = retriever_config("hybrid", embedder, options)
        out["dense"] = DenseRetriever(bm25.corpus, get_encoder(choice.embedder), params=choice.dense_params(),
                                      progress=progress)
        out["hybrid"] = HybridRetriever(bm25, out["dense"], rrf_k=choice.rrf_k, bm25_weight=choice.bm25_weight,
                                        dense_weight=choice.dense_weight, depth=choice.depth)
    return out


def load_items(data_dir: Path, retriever: Retriever, limit: int | None = None,
               sources: Sequence[DatasetSource] | None = None) -> list[Question]:
    """The questions of every set (``limit`` per set) with gold ids, each checked to be in the corpus."""
    items = []
    for source in (list(sources) if sources is not None else default_sources(data_dir)):
        found = 0
        for q in source.load(limit):
            if not q.gold_passages:
                continue
            missing = [g for g in q.gold_passages if retriever.passage(g) is None]  # type: ignore[attr-defined]
            if missing:
                raise DatasetError(f"gold passage {missing[0]} of question {q.id} is not in the pooled corpus",
                                   where=str(source.path), fix="the data files do not match each other; restore them")
            items.append(q)  # filed under the source's label
            found += 1
        if not found:
            raise DatasetError(f"no question of {source.path} names its gold paragraphs "
                               f"(read as {source.title})",
                               fix="retrieval metrics need gold paragraphs: HotpotQA / 2Wiki supporting_facts, "
                                   "MuSiQue is_supporting or NQ isgold")
    return items


def drrag_trace(retriever: Retriever, question: str, strategy: str, k: int, *, k2: int = 5,
                classifier_path: str = "") -> Trace:
    """A DR-RAG trace that ends at the ``selection`` event (stages and classifier calls, no answer)."""
    from explorer.methods.drrag.method import DrRag

    k1 = max(1, math.ceil(k / 2))
    cfg = make_config("drrag", {"selection": strategy, "k": k, "k1": k1, "k2": k2, "judge": "classifier",
                                "classifier_path": classifier_path})
    trace = Trace(question=question, method="drrag", variant="paper", config=cfg.to_dict(),
                  model={"name": "none (retrieval only)"}, corpus={"name": getattr(retriever, "name", "")})
    DrRag(cfg, Runtime(engine=None, retriever=retriever), "paper").retrieve(question, TraceRecorder(trace))
    trace.status = "complete"
    return trace


def selected(trace: Trace, key: str = "passage_ids") -> list[str]:
    """The passage ids of a trace's last selection event (``before_filter`` for BlendFilter's unfiltered union)."""
    events = trace.of_kind("selection")
    if not events:
        raise ValueError(f"the {trace.method} trace has no selection event")
    return list(events[-1].payload[key])


CHECKPOINT_VERSION = 1


class Checkpoint:
    """The finished measurements of one retrieval-metrics run, appended to a JSON-lines file as each finishes.

    A run over hundreds of questions takes minutes to hours on a busy machine; stopped (Ctrl-C,
    SIGTERM, a crash), it keeps what it measured, and the same command finds the file again by its
    settings key and measures only the rest. The first line holds the key (question files'
    fingerprints, methods, k, retrievers, classifier, model): a file of other settings is not
    reused. The file is removed once the run completes.
    """

    def __init__(self, folder: Path | None, key: str, say: Progress) -> None:
        import json

        self.path = folder / f"retrieval-metrics-{key}.jsonl" if folder is not None else None
        self.done: dict[str, dict[str, Any]] = {}
        self.added = 0
        self._stream = None
        if self.path is None:
            return
        if self.path.is_file():
            lines = self.path.read_text(encoding="utf-8").splitlines()
            head: dict[str, Any] = {}
            for n, line in enumerate(lines):
                try:
                    record = json.loads(line)
                    if n == 0:
                        head = record
                    else:
                        self.done[record.pop("key")] = record
                except (ValueError, KeyError, AttributeError, TypeError):  # a line cut by a kill: skipped
                    continue
            if isinstance(head, dict) and head.get("key") == key and head.get("version") == CHECKPOINT_VERSION:
                say(f"resuming: {len(self.done)} measurements kept in {self.path}")
            else:
                self.done = {}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._stream = open(self.path, "w" if not self.done else "a", encoding="utf-8")  # noqa: SIM115
        if not self.done:
            self._stream.write(json.dumps({"key": key, "version": CHECKPOINT_VERSION}) + "\n")
            self._stream.flush()

    def get(self, *key: Any) -> dict[str, Any] | None:
        return self.done.get(_record_key(key))

    def add(self, record: dict[str, Any], *key: Any) -> dict[str, Any]:
        import json

        self.done[_record_key(key)] = record
        self.added += 1
        if self._stream is not None:
            self._stream.write(json.dumps({"key": _record_key(key), **record}) + "\n")
            self._stream.flush()
        return record

    def close(self, *, complete: bool) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        if complete and self.path is not None:
            self.path.unlink(missing_ok=True)


def _record_key(key: tuple[Any, ...]) -> str:
    return "\t".join(str(part) for part in key)


def checkpoint_key(parts: dict[str, Any]) -> str:
    """A short hash of everything the measurements depend on."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass
class Report:
    """Everything the markdown shows, gathered by :func:`measure`."""

    corpus: dict[str, Any]
    ks: tuple[int, ...]
    k2: int
    counts: dict[str, int]
    bases: tuple[str, ...] = ("bm25",)
    retrievers: dict[str, dict[str, Any]] = field(default_factory=dict)  # base -> describe() highlights
    rows: dict[tuple[str, int, str], Row] = field(default_factory=dict)  # (row label, k, dataset)
    # the same on the questions the pair classifier never saw in training (its held-out split)
    heldout_rows: dict[tuple[str, int, str], Row] = field(default_factory=dict)
    heldout_counts: dict[str, int] = field(default_factory=dict)
    blend: dict[tuple[str, str, str], Row] = field(default_factory=dict)  # (base, before|after, dataset)
    blend_counts: dict[str, int] = field(default_factory=dict)
    blend_k: int = 5
    statuses: Counter = field(default_factory=Counter)
    classifier: dict[str, Any] | None = None
    model: dict[str, Any] | None = None
    skipped: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    command: str = ""
    # label -> {"title", "file", "format"} of every question set, in table order
    sources: dict[str, dict[str, str]] = field(default_factory=dict)
    #: Set when the run was stopped: (measurements done, measurements asked); the tables hold the done part.
    stopped: tuple[int, int] | None = None
    checkpoint: str | None = None  # the file the finished measurements are kept in while the run is not complete

    @property
    def order(self) -> list[str]:
        return list(self.sources) or [d for d in DATASETS if d in self.counts]

    def title(self, dataset: str) -> str:
        return self.sources.get(dataset, {}).get("title") or DATASET_TITLES.get(dataset, dataset)


def _candidates(event: dict[str, Any]) -> list[str]:
    """Every passage a DR-RAG selection chose from: the stage-1 list and each stage-2 candidate list."""
    ids = list(event.get("stage1") or [])
    for pool in (event.get("stage2") or {}).values():
        ids.extend(pool)
    return list(dict.fromkeys(ids))


def measure(data_dir: Path, *, methods: Sequence[str] = DEFAULT_METHODS, ks: Sequence[int] = (3, 4, 6), k2: int = 5,
            limit: int | None = None, blend_limit: int | None = None, blend_k: int = 5, model: str = "embedded",
            classifier_path: str = "", progress: Progress | None = None, bases: Sequence[str] = ("dense",),
            embedder: str | None = None, retriever_options: dict[str, Any] | None = None,
            sources: Sequence[DatasetSource] | None = None, checkpoint_dir: Path | None = None,
            on_measure: Callable[[], None] | None = None) -> Report:
    """Score every asked row; ``bases`` are the retrievers DR-RAG's strategies and BlendFilter run on.

    With ``checkpoint_dir`` every finished measurement is kept there as it finishes (:class:`Checkpoint`), and a
    rerun with the same settings measures only what is missing. A stop (Ctrl-C, SIGTERM, or an exception from
    ``on_measure``, which is called after each new measurement) returns the report of what was measured, with
    ``stopped`` set, instead of losing it."""
    say = progress or (lambda _m: None)
    sources = list(sources) if sources is not None else default_sources(data_dir)
    bm25 = pooled_corpus(data_dir, say, sources)
    items = load_items(data_dir, bm25, limit, sources)
    describe = bm25.describe()  # type: ignore[attr-defined]
    needed = {TOP_K_BASE[m] for m in methods if m in TOP_K} | set(bases)
    retrievers = base_retrievers(bm25, sorted(needed), embedder=embedder, options=retriever_options, progress=say)
    report = Report(corpus={"paragraphs": describe["documents"], "passages": describe["passages"]}, ks=tuple(ks),
                    k2=k2, counts=dict(Counter(i.dataset for i in items)), blend_k=blend_k, bases=tuple(bases),
                    sources={s.label: {"title": DATASET_TITLES.get(s.label, s.label) if s.named else s.label,
                                       "file": str(s.path), "format": s.format, "named": s.named,
                                       "split": PAPER_SPLIT if s.named else split_of(s.path)} for s in sources})
    for name, r in retrievers.items():
        d = r.describe()  # type: ignore[attr-defined]
        report.retrievers[name] = {k: d.get(k) for k in ("retriever", "embedder", "index_type", "index_fingerprint",
                                                         "fusion")}
    wanted, heldout = _use_classifier(report, [m for m in STRATEGIES if m in methods], classifier_path,
                                      retrievers, bm25, items, say)
    blend_limit = blend_limit if blend_limit is not None else limit
    plan = [(method, base) for method in wanted for base in ([TOP_K_BASE[method]] if method in TOP_K else bases)]
    blend_items = [i for name in report.order for i in [x for x in items if x.dataset == name][:blend_limit]]
    asked = len(plan) * len(ks) * len(items) + (len(bases) * len(blend_items) if "blendfilter" in methods else 0)
    checkpoint = Checkpoint(checkpoint_dir, checkpoint_key({
        "sources": {s.label: s.fingerprint() for s in sources}, "methods": list(methods), "ks": list(ks), "k2": k2,
        "limit": limit, "blend_limit": blend_limit, "blend_k": blend_k, "model": model, "bases": list(bases),
        "retrievers": report.retrievers, "classifier": report.classifier}), say)
    report.checkpoint = str(checkpoint.path) if checkpoint.path else None

    def measured(record: dict[str, Any], *key: Any) -> dict[str, Any]:
        return checkpoint.add(record, *key)

    def notify(new: bool) -> None:  # after the measurement is in the tables too
        if new and on_measure is not None:
            on_measure()

    try:
        for method, base in plan:
            retriever, label = retrievers[base], row_label(method, base)
            spent = 0.0
            for k in ks:
                for item in items:
                    saved = checkpoint.get("row", label, k, item.dataset, item.id)
                    new = saved is None
                    if saved is None:
                        started = time.perf_counter()
                        saved = _measure_one(retriever, method, item, k, k2, classifier_path)
                        saved["s"] = time.perf_counter() - started
                        measured(saved, "row", label, k, item.dataset, item.id)
                    spent += saved["s"]
                    for rows in ([report.rows, report.heldout_rows] if item.id in heldout else [report.rows]):
                        rows.setdefault((label, k, item.dataset), Row()).add(item.gold_passages, saved["kept"],
                                                                             saved["pool"], **saved["extra"])
                    notify(new)
            report.seconds[label] = spent
            say(f"{label}: {spent:.1f} s for {len(items)} questions x k in {list(ks)}")
        if "blendfilter" in methods:
            for base in bases:
                _blendfilter(report, retrievers[base], base, blend_items, blend_k, model, say, checkpoint, measured,
                             notify)
    except KeyboardInterrupt:
        checkpoint.close(complete=False)
        report.stopped = (len(checkpoint.done), asked)
        say(f"stopped: {len(checkpoint.done)} of {asked} measurements done"
            + (f", kept in {checkpoint.path}; the same command goes on from there" if checkpoint.path else ""))
        return report
    checkpoint.close(complete=True)
    report.checkpoint = None
    return report


def _use_classifier(report: Report, wanted: list[str], classifier_path: str, retrievers: dict[str, Any],
                    bm25: Retriever, items: list[Question], say: Progress) -> tuple[list[str], set[str]]:
    """The strategies that can run and the held-out question ids, once DR-RAG's pair classifier is loaded.

    Without a trained classifier CIS and CFS are skipped (and the report says why); with one, the questions it
    learnt from are scored apart from the ones it never saw."""
    heldout: set[str] = set()
    if not any(m in ("cis", "cfs") for m in wanted):
        return wanted, heldout
    from explorer.methods.drrag.method import load_classifier

    clf, where = load_classifier(classifier_path or None)
    if clf is None:
        report.skipped.append(f"CIS and CFS: no trained pair classifier at {where} "
                              "(python -m explorer train-classifier)")
        wanted = [m for m in wanted if m not in ("cis", "cfs")]
    else:
        chosen = clf.metadata.get("metrics", {}).get("chosen", {})
        held = clf.metadata.get("metrics", {}).get("held_out", {}).get("overall", {})
        report.classifier = {"path": str(where), "model": chosen.get("model"), "threshold": clf.threshold,
                             "held_out_f1": held.get("f1"), "held_out_accuracy": held.get("accuracy"),
                             "encoder": clf.metadata.get("encoder")}
        # The classifier learnt from these very question sets: its held-out questions are scored apart.
        heldout = set(clf.metadata.get("test_question_ids", []))
        report.heldout_counts = dict(Counter(i.dataset for i in items if i.id in heldout))
        dense = retrievers.get("dense")
        if (dense is not None and dense.encoder is clf.encoder and dense.matrix is not None
                and not any(clf.encoder.prompts().values())):
            clf.encoder.remember([p.as_context() for p in dense.corpus.passages], dense.matrix)
        _encode_all(clf.encoder, bm25, items, say)
    return wanted, heldout


def _measure_one(retriever: Retriever, method: str, item: Question, k: int, k2: int,
                 classifier_path: str) -> dict[str, Any]:
    """One question at one k for one strategy: the passages kept, those retrieved on the way, and DR-RAG's pairs."""
    if method in TOP_K:
        return {"kept": [h.passage.id for h in retriever.search(item.question, k)], "pool": None, "extra": {}}
    trace = drrag_trace(retriever, item.question, method, k, k2=k2, classifier_path=classifier_path)
    event = trace.of_kind("selection")[-1].payload
    return {"kept": list(event["passage_ids"]), "pool": _candidates(event),
            "extra": {"pairs": float(event["pairs_judged"])}}


def _encode_all(encoder: Any, retriever: Retriever, items: list[Question], say: Progress) -> None:
    """Embed every passage and question once, in large batches, before the classifier asks pair by pair.

    The classifier's training store holds most of these paragraphs already (same text), so it is
    read first; what is left is encoded in one pass instead of three texts per pair call."""
    from explorer.methods.drrag.pair_classifier import EMBEDDING_STORE
    from explorer.paths import cache_dir

    encoder.load_store(cache_dir("classifier") / EMBEDDING_STORE)
    texts = [p.as_context() for p in retriever.corpus.passages] + [i.question for i in items]  # type: ignore[attr-defined]
    todo = [t for t in dict.fromkeys(texts) if not encoder.cached(t)]
    started = time.perf_counter()
    encoder.encode(todo)
    say(f"embedded {len(todo)} passages and questions in {time.perf_counter() - started:.1f} s "
        f"({len(texts) - len(todo)} were in the classifier's store)")


def _blendfilter(report: Report, retriever: Retriever, base: str, chosen: list[Question], k: int, model: str,
                 say: Progress, checkpoint: Checkpoint, measured: Callable[..., dict[str, Any]],
                 notify: Callable[[bool], None]) -> None:
    from explorer.runtime import corpus_facts, open_engine

    runtime: Runtime | None = None
    spent = 0.0
    for n, item in enumerate(chosen, start=1):
        saved = checkpoint.get("blendfilter", base, item.dataset, item.id)
        new = saved is None
        if saved is None:
            if runtime is None:  # the model loads only when something is left to run
                engine = open_engine(model, progress=say)
                report.model = engine.fingerprint()
                runtime = Runtime(engine=engine, retriever=retriever,
                                  corpus=corpus_facts(retriever, "hotpotqa+musique-dev"))
            saved = measured(_blend_one(runtime, item, k), "blendfilter", base, item.dataset, item.id)
            say(f"blendfilter ({base}) {n}/{len(chosen)} ({item.dataset} {item.id}): {saved['seconds']:.1f} s"
                + (f", kept {len(saved['after'])} of {len(saved['before'])}" if saved["error"] is None else ""))
        report.model = report.model or saved.get("model")
        spent += saved["seconds"]
        if saved["error"] is not None:
            report.skipped.append(f"BlendFilter ({base}) on {item.dataset} {item.id}: {saved['error']}")
        else:
            report.blend.setdefault((base, "before", item.dataset), Row()).add(item.gold_passages, saved["before"])
            report.blend.setdefault((base, "after", item.dataset), Row()).add(
                item.gold_passages, saved["after"], saved["before"], **saved["extra"])
            report.statuses.update(saved["statuses"])
        notify(new)
    report.blend_counts = dict(Counter(i.dataset for i in chosen))
    report.seconds[f"blendfilter:{base}"] = spent


def _blend_one(runtime: Runtime, item: Question, k: int) -> dict[str, Any]:
    """One BlendFilter run on one question: its unions before and after the filter, costs and answer scores."""
    trace = run_question("blendfilter", item.question, runtime, config={"top_k": k},
                         gold={"answers": list(item.answers), "gold_passages": list(item.gold_passages)})
    out: dict[str, Any] = {"error": None, "seconds": trace.costs.total_time, "model": runtime.engine.fingerprint()}
    if trace.status != "complete":
        return {**out, "error": trace.error}
    scores = answer_scores(trace.answer or "", list(item.answers))
    return {**out, "before": selected(trace, "before_filter"), "after": selected(trace),
            "extra": {"llm_calls": float(trace.costs.llm_calls), "retrievals": float(trace.costs.retrievals),
                      "em": scores["em"], "f1": scores["f1"], "seconds": trace.costs.total_time},
            "statuses": [e.payload["status"] for e in trace.of_kind("filter")]}


# -- markdown ---------------------------------------------------------------------------------------------------


def _pct(x: float) -> str:
    return "–" if math.isnan(x) else f"{100 * x:.1f}"


def _num(x: float, digits: int = 2) -> str:
    return "–" if math.isnan(x) else f"{x:.{digits}f}"


STRATEGY_TITLES = {"bm25": "BM25", "sm": "SM (dense)", "hybrid": "hybrid (RRF)", "qdc": "QDC", "cis": "CIS",
                   "cfs": "CFS"}
BASE_TITLES = {"bm25": "BM25", "dense": "SM", "hybrid": "hybrid"}


def row_title(label: str) -> str:
    method, _, base = label.partition(":")
    title = STRATEGY_TITLES.get(method, method)
    return f"{title} on {BASE_TITLES.get(base, base)}" if base else title


def _ordered_labels(report: Report, rows: dict[tuple[str, int, str], Row]) -> list[str]:
    present = {key[0] for key in rows}
    labels = [m for m in TOP_K if m in present]
    labels += [row_label(m, b) for b in report.bases for m in DRRAG if row_label(m, b) in present]
    return labels + sorted(present - set(labels))


def _retriever_line(report: Report) -> str:
    parts = []
    for name, d in report.retrievers.items():
        if name == "bm25":
            parts.append("BM25: Lucene variant, k1 = 1.2, b = 0.75")
        elif name == "dense":
            parts.append(f"SM (dense): {d.get('embedder')}, cosine, {d.get('index_type')}")
        else:
            fusion = d.get("fusion") or {}
            parts.append(f"hybrid: reciprocal-rank fusion of the two, k = {fusion.get('rrf_k')}, weights "
                         f"{fusion.get('bm25_weight')} / {fusion.get('dense_weight')}")
    return "; ".join(parts)


def _intro_lines(report: Report) -> list[str]:
    """Title, corpus, retrievers and how to read the tables."""
    lines = ["# Retrieval metrics: BM25, SM (dense), DR-RAG (QDC, CIS, CFS) and BlendFilter", ""]
    if report.command:
        lines += [f"Made by `{report.command}` ({time.strftime('%Y-%m-%d')}).", ""]
    counts = ", ".join(f"{report.title(d)} {n}" for d, n in report.counts.items())
    pooled = (" and ".join(f"{report.title(d)} ({info['file']})" for d, info in report.sources.items())
              if report.sources else "HotpotQA dev (distractor setting) and MuSiQue dev")
    lines += [f"Corpus: the paragraphs of {pooled} pooled, "
              f"{report.corpus['paragraphs']:,} paragraphs cut into {report.corpus['passages']:,} passages of at most "
              f"100 words. Retrievers: {_retriever_line(report)}. Questions: {counts}.", "",
              "*Recall*: share of a question's gold paragraphs among the passages **given to the model** (a "
              "paragraph counts when any of its pieces is given), averaged over questions, in %; *given*: how many "
              "passages that was (mean; the paper's \"actual numbers\"). *Cand. recall* / *cand.*: the same over "
              "**every candidate retrieved** on the way (DR-RAG's stage-1 list and all stage-2 lists), which is what "
              "a run's retrieval events hold; for a single top-k search the two are the same. DR-RAG: k1 = ceil(k/2) "
              f"stage-1 passages, k2 = {report.k2} new candidates per question + passage query.", ""]
    if report.classifier:
        c = report.classifier
        lines += [f"Pair classifier: {c['model']} at threshold {c['threshold']:.2f} over {c.get('encoder') or '?'} "
                  f"features (held-out pair F1 {_num(c['held_out_f1'] or math.nan, 3)}, accuracy "
                  f"{_num(c['held_out_accuracy'] or math.nan, 3)}; see classifier.md). Its features are the same "
                  "whichever retriever found the passages. *Pairs*: classifier calls per question.", ""]
    return lines


def _strategy_tables(report: Report) -> list[str]:
    """DR-RAG's strategies beside the paper's table 4, and recall of what was given vs retrieved."""
    labels = _ordered_labels(report, report.rows)
    datasets = [d for d in report.order if d in report.counts]
    lines: list[str] = []
    if not labels:
        return lines
    cautions = {d: paper_caution(d, report.sources.get(d, {})) for d in datasets}
    mark = {d: " ⚠" if cautions[d] else "" for d in datasets}
    head = "| k | strategy | " + " | ".join(f"{report.title(d)} recall | given | paper recall{mark[d]} | paper "
                                            f"given{mark[d]}" for d in datasets) + " |"
    lines += ["## DR-RAG retrieval strategies beside the paper's table 4", "",
              f"The paper's columns are its Table 4 (its own corpus and retrievers, on each dataset's "
              f"{PAPER_SPLIT} split; QDC, CIS and CFS there are built on SM). Compare rows of the same base "
              "retriever.", ""]
    lines += [f"⚠ {c}" for c in cautions.values() if c]
    lines += ([""] if any(cautions.values()) else []) + [head, "|" + "---|" * (2 + 4 * len(datasets))]
    for k in report.ks:
        for label in labels:
            cells = []
            method, _, base = label.partition(":")
            for d in datasets:
                row = report.rows.get((label, k, d), Row())
                paper = PAPER_TABLE4.get((d, k), {}).get(method) if base in ("", "dense") else None
                cells += [_pct(row.mean("recall")), _num(row.mean("kept")),
                          f"{paper[0]:.2f}" if paper else "", f"{paper[1]:.2f}" if paper else ""]
            lines.append(f"| {k} | {row_title(label)} | " + " | ".join(cells) + " |")
    lines.append("")
    head = "| k | strategy | " + " | ".join(f"{report.title(d)} recall (given) | given | cand. recall | cand. "
                                            f"| pairs" for d in datasets) + " |"
    lines += ["### Honest recall: what the model was given against everything retrieved", "", head,
              "|" + "---|" * (2 + 5 * len(datasets))]
    for k in report.ks:
        for label in labels:
            cells = []
            for d in datasets:
                row = report.rows.get((label, k, d), Row())
                pairs = row.mean("pairs") if label.split(":")[0] in ("cis", "cfs") else math.nan
                cells += [_pct(row.mean("recall")), _num(row.mean("kept")), _pct(row.mean("candidate_recall")),
                          _num(row.mean("candidates"), 1), _num(pairs, 1)]
            lines.append(f"| {k} | {row_title(label)} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines


def _heldout_table(report: Report) -> list[str]:
    """The strategies on the questions the pair classifier never saw."""
    held = [d for d in report.order if d in report.heldout_counts]
    if not report.heldout_rows:
        return []
    counts = ", ".join(f"{report.title(d)} {n}" for d, n in report.heldout_counts.items())
    lines = ["### The same on the classifier's held-out questions only", "",
              "The pair classifier was trained on 80% of these same questions (split by question), so the tables "
              f"above flatter CIS and CFS. Here only the questions it never saw ({counts}):", "",
              "| k | strategy | " + " | ".join(f"{report.title(d)} recall | given" for d in held) + " |",
              "|" + "---|" * (2 + 2 * len(held))]
    for k in report.ks:
        for label in _ordered_labels(report, report.heldout_rows):
            cells = []
            for d in held:
                row = report.heldout_rows.get((label, k, d), Row())
                cells += [_pct(row.mean("recall")), _num(row.mean("kept"))]
            lines.append(f"| {k} | {row_title(label)} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines


def _blend_section(report: Report) -> list[str]:
    """BlendFilter's union of the three query sets before and after the filter."""
    if not report.blend:
        return []
    model = (report.model or {}).get("name", "?")
    counts = ", ".join(f"{report.title(d)} {n}" for d, n in report.blend_counts.items())
    lines = ["## BlendFilter: the union of the three query sets before and after the model's filter", "",
              f"Model: {model} (the embedded model unless stated). K = {report.blend_k} passages per query. "
              f"Questions: {counts} (the first of each set). Precision counts an empty selection as 0; "
              "S-Precision: share of questions whose kept paragraphs are exactly the gold ones.", "",
              "| retriever | dataset | union | recall | precision | S-Precision | given |",
              "|---|---|---|---|---|---|---|"]
    for base in report.bases:
        for d in report.order:
            for stage in ("before", "after"):
                row = report.blend.get((base, stage, d))
                if row is None:
                    continue
                label = "before filtering" if stage == "before" else "after filtering"
                lines.append(f"| {BASE_TITLES.get(base, base)} | {report.title(d)} | {label} | "
                             f"{_pct(row.mean('recall'))} | {_pct(row.mean('precision'))} | "
                             f"{_pct(row.mean('exact'))} | {_num(row.mean('kept'))} |")
    lines.append("")
    for base in report.bases:
        after = [r for (b, stage, _), r in report.blend.items() if stage == "after" and b == base]
        if not after:
            continue
        pooled = {key: statistics.fmean(v for r in after for v in r.series.get(key, [])) for key in
                  ("llm_calls", "retrievals", "em", "f1", "seconds")}
        lines.append(f"- {BASE_TITLES.get(base, base)}: per question {pooled['llm_calls']:.2f} LLM calls, "
                     f"{pooled['retrievals']:.2f} retrievals, {pooled['seconds']:.1f} s on this machine; answer "
                     f"EM {100 * pooled['em']:.1f}, F1 {100 * pooled['f1']:.1f}.")
    total = sum(report.statuses.values()) or 1
    statuses = ", ".join(f"{s} {n} ({100 * n / total:.0f}%)" for s, n in report.statuses.most_common())
    lines += [f"- Filter verdicts as read by the parser: {statuses}.", ""]
    return lines


def render_markdown(report: Report) -> str:
    lines = [*_intro_lines(report), *_strategy_tables(report), *_heldout_table(report), *_blend_section(report)]
    if report.stopped is not None:
        done, asked = report.stopped
        lines[1:1] = ["", f"**Partial: the run was stopped after {done} of {asked} measurements; the tables hold "
                          "those.** The same command measures the rest" + (f" (kept in {report.checkpoint})."
                                                                           if report.checkpoint else ".")]
    if report.skipped:
        lines += ["Not measured:", *[f"- {s}" for s in report.skipped], ""]
    timing = ", ".join(f"{m} {s:.1f} s" for m, s in report.seconds.items())
    lines += [f"Wall time: {timing}.", ""]
    return "\n".join(lines)
