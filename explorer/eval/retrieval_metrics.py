"""Retrieval quality of BM25, DR-RAG's strategies and BlendFilter's union on question sets with gold paragraphs.

By default HotpotQA and MuSiQue dev; any question files whose records carry their paragraphs
(HotpotQA, 2Wiki, MuSiQue, NQ formats) can be given instead (``sources``). The question sets'
paragraphs (10 per HotpotQA question, 20 per MuSiQue question) are pooled into one corpus with
the benchmark corpus's own readers and ids (:mod:`explorer.retrieval.pool`), so every question's
gold paragraphs are in it among thousands of look-alikes. Then, per question:

* BM25: the top k passages for the question;
* DR-RAG's QDC, CIS and CFS at k (k1 = ceil(k / 2), as the paper's k/2): the passages of the
  ``selection`` event of a DR-RAG trace that stops before the answer (no model needed; the pair
  classifier judges), so the numbers come from the very code the method runs;
* BlendFilter (needs the model): a full run; its ``selection`` event holds the union after
  filtering and, beside it, the union before filtering.

Scores are per question, then averaged: recall (share of the gold paragraphs found), precision
(share of the kept passages' paragraphs that are gold; an empty selection scores 0) and
S-Precision (1 when the kept paragraphs are exactly the gold ones). A paragraph longer than 100
words is cut into pieces; it counts as found when any of its pieces is kept (paragraph level,
as the papers count documents).
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
from explorer.methods.base import Runtime, make_config, run_question
from explorer.retrieval.base import Retriever
from explorer.trace import Trace, TraceRecorder

DATASETS = ("hotpotqa", "musique")
DATASET_TITLES = {"hotpotqa": "HotpotQA", "musique": "MuSiQue"}
STRATEGIES = ("bm25", "qdc", "cis", "cfs")
METHODS = (*STRATEGIES, "blendfilter")
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Item:
    dataset: str
    qid: str
    question: str
    gold: tuple[str, ...]
    answers: tuple[str, ...]


@dataclass
class Row:
    """Per-question scores of one method at one k on one dataset, averaged on demand."""

    recall: list[float] = field(default_factory=list)
    precision: list[float] = field(default_factory=list)
    exact: list[float] = field(default_factory=list)
    kept: list[int] = field(default_factory=list)
    extra: dict[str, list[float]] = field(default_factory=dict)

    def add(self, gold: Sequence[str], kept: Sequence[str], **extra: float) -> None:
        self.recall.append(passage_recall(gold, kept, by_document=True) or 0.0)
        self.precision.append(paragraph_precision(gold, kept))
        self.exact.append(exact_paragraphs(gold, kept))
        self.kept.append(len(kept))
        for key, value in extra.items():
            self.extra.setdefault(key, []).append(value)

    @property
    def n(self) -> int:
        return len(self.recall)

    def mean(self, name: str) -> float:
        values = getattr(self, name) if hasattr(self, name) else self.extra.get(name, [])
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


def load_items(data_dir: Path, retriever: Retriever, limit: int | None = None,
               sources: Sequence[DatasetSource] | None = None) -> list[Item]:
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
            items.append(Item(source.label, q.id, q.question, tuple(q.gold_passages), tuple(q.answers)))
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
    from explorer.methods.drrag import DrRag

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


@dataclass
class Report:
    """Everything the markdown shows, gathered by :func:`measure`."""

    corpus: dict[str, Any]
    ks: tuple[int, ...]
    k2: int
    counts: dict[str, int]
    rows: dict[tuple[str, int, str], Row] = field(default_factory=dict)  # (method, k, dataset)
    # the same on the questions the pair classifier never saw in training (its held-out split)
    heldout_rows: dict[tuple[str, int, str], Row] = field(default_factory=dict)
    heldout_counts: dict[str, int] = field(default_factory=dict)
    blend: dict[tuple[str, str], Row] = field(default_factory=dict)  # (before|after, dataset)
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

    @property
    def order(self) -> list[str]:
        return list(self.sources) or [d for d in DATASETS if d in self.counts]

    def title(self, dataset: str) -> str:
        return self.sources.get(dataset, {}).get("title") or DATASET_TITLES.get(dataset, dataset)


def measure(data_dir: Path, *, methods: Sequence[str] = METHODS, ks: Sequence[int] = (3, 4, 6), k2: int = 5,
            limit: int | None = None, blend_limit: int | None = None, blend_k: int = 5, model: str = "embedded",
            classifier_path: str = "", progress: Progress | None = None,
            sources: Sequence[DatasetSource] | None = None) -> Report:
    say = progress or (lambda _m: None)
    sources = list(sources) if sources is not None else default_sources(data_dir)
    retriever = pooled_corpus(data_dir, say, sources)
    items = load_items(data_dir, retriever, limit, sources)
    describe = retriever.describe()  # type: ignore[attr-defined]
    report = Report(corpus={"paragraphs": describe["documents"], "passages": describe["passages"]}, ks=tuple(ks),
                    k2=k2, counts=dict(Counter(i.dataset for i in items)), blend_k=blend_k,
                    sources={s.label: {"title": DATASET_TITLES.get(s.label, s.label) if s.named else s.label,
                                       "file": str(s.path), "format": s.format} for s in sources})
    wanted = [m for m in STRATEGIES if m in methods]
    heldout: set[str] = set()
    if any(m in ("cis", "cfs") for m in wanted):
        from explorer.methods.drrag import load_classifier

        clf, where = load_classifier(classifier_path or None)
        if clf is None:
            report.skipped.append(f"CIS and CFS: no trained pair classifier at {where} "
                                  "(python -m explorer train-classifier)")
            wanted = [m for m in wanted if m not in ("cis", "cfs")]
        else:
            chosen = clf.metadata.get("metrics", {}).get("chosen", {})
            held = clf.metadata.get("metrics", {}).get("held_out", {}).get("overall", {})
            report.classifier = {"path": str(where), "model": chosen.get("model"), "threshold": clf.threshold,
                                 "held_out_f1": held.get("f1"), "held_out_accuracy": held.get("accuracy")}
            # The classifier learnt from these very question sets: its held-out questions are scored apart.
            heldout = set(clf.metadata.get("test_question_ids", []))
            report.heldout_counts = dict(Counter(i.dataset for i in items if i.qid in heldout))
            _encode_all(clf.encoder, retriever, items, say)
    for method in wanted:
        started = time.perf_counter()
        for k in ks:
            for item in items:
                if method == "bm25":
                    kept, extra = [h.passage.id for h in retriever.search(item.question, k)], {}
                else:
                    trace = drrag_trace(retriever, item.question, method, k, k2=k2, classifier_path=classifier_path)
                    event = trace.of_kind("selection")[-1].payload
                    kept, extra = event["passage_ids"], {"pairs": float(event["pairs_judged"])}
                report.rows.setdefault((method, k, item.dataset), Row()).add(item.gold, kept, **extra)
                if item.qid in heldout:
                    report.heldout_rows.setdefault((method, k, item.dataset), Row()).add(item.gold, kept, **extra)
        report.seconds[method] = time.perf_counter() - started
        say(f"{method}: {report.seconds[method]:.1f} s for {len(items)} questions x k in {list(ks)}")
    if "blendfilter" in methods:
        _blendfilter(report, data_dir, retriever, items, blend_limit if blend_limit is not None else limit, blend_k,
                     model, say, order=report.order)
    return report


def _encode_all(encoder: Any, retriever: Retriever, items: list[Item], say: Progress) -> None:
    """Embed every passage and question once, in large batches, before the classifier asks pair by pair.

    The classifier's training store holds most of these paragraphs already (same text), so it is
    read first; what is left is encoded in one pass instead of three texts per pair call."""
    from explorer.paths import cache_dir
    from explorer.retrieval.pair_classifier import EMBEDDING_STORE

    encoder.load_store(cache_dir("classifier") / EMBEDDING_STORE)
    texts = [p.as_context() for p in retriever.corpus.passages] + [i.question for i in items]  # type: ignore[attr-defined]
    todo = [t for t in dict.fromkeys(texts) if not encoder.cached(t)]
    started = time.perf_counter()
    encoder.encode(todo)
    say(f"embedded {len(todo)} passages and questions in {time.perf_counter() - started:.1f} s "
        f"({len(texts) - len(todo)} were in the classifier's store)")


def _blendfilter(report: Report, data_dir: Path, retriever: Retriever, items: list[Item], limit: int | None, k: int,
                 model: str, say: Progress, order: Sequence[str] = DATASETS) -> None:
    from explorer.runtime import open_engine

    engine = open_engine(model, progress=say)
    report.model = engine.fingerprint()
    runtime = Runtime(engine=engine, retriever=retriever, corpus=retriever.describe())  # type: ignore[attr-defined]
    chosen = [i for name in order for i in [x for x in items if x.dataset == name][:limit]]
    started = time.perf_counter()
    for n, item in enumerate(chosen, start=1):
        trace = run_question("blendfilter", item.question, runtime, config={"top_k": k},
                             gold={"answers": list(item.answers), "gold_passages": list(item.gold)})
        if trace.status != "complete":
            report.skipped.append(f"BlendFilter on {item.dataset} {item.qid}: {trace.error}")
            continue
        scores = answer_scores(trace.answer or "", list(item.answers))
        report.blend.setdefault(("before", item.dataset), Row()).add(item.gold, selected(trace, "before_filter"))
        report.blend.setdefault(("after", item.dataset), Row()).add(
            item.gold, selected(trace), llm_calls=float(trace.costs.llm_calls),
            retrievals=float(trace.costs.retrievals), em=scores["em"], f1=scores["f1"],
            seconds=trace.costs.total_time)
        report.statuses.update(e.payload["status"] for e in trace.of_kind("filter"))
        say(f"blendfilter {n}/{len(chosen)} ({item.dataset} {item.qid}): {trace.costs.total_time:.1f} s, "
            f"kept {len(selected(trace))} of {len(selected(trace, 'before_filter'))}")
    report.blend_counts = dict(Counter(i.dataset for i in chosen))
    report.seconds["blendfilter"] = time.perf_counter() - started


# -- markdown ---------------------------------------------------------------------------------------------------


def _pct(x: float) -> str:
    return "–" if math.isnan(x) else f"{100 * x:.1f}"


def _num(x: float, digits: int = 2) -> str:
    return "–" if math.isnan(x) else f"{x:.{digits}f}"


STRATEGY_TITLES = {"bm25": "BM25", "qdc": "QDC", "cis": "CIS", "cfs": "CFS"}


def render_markdown(report: Report) -> str:
    lines = ["# Retrieval metrics: BM25, DR-RAG (QDC, CIS, CFS) and BlendFilter", ""]
    if report.command:
        lines += [f"Made by `{report.command}` ({time.strftime('%Y-%m-%d')}).", ""]
    counts = ", ".join(f"{report.title(d)} {n}" for d, n in report.counts.items())
    pooled = (" and ".join(f"{report.title(d)} ({info['file']})" for d, info in report.sources.items())
              if report.sources else "HotpotQA dev (distractor setting) and MuSiQue dev")
    lines += [f"Corpus: the paragraphs of {pooled} pooled, "
              f"{report.corpus['paragraphs']:,} paragraphs cut into {report.corpus['passages']:,} passages of at most "
              f"100 words; BM25 (Lucene variant, k1 = 1.2, b = 0.75). Questions: {counts}.", "",
              "Recall: share of a question's gold paragraphs among the passages kept (a paragraph counts when any "
              "of its pieces is kept), averaged over questions, in %. *Kept*: passages actually given to the model "
              "(mean). DR-RAG: k1 = ceil(k/2) stage-1 passages, k2 = "
              f"{report.k2} new candidates per question + passage query.", ""]
    if report.classifier:
        c = report.classifier
        lines += [f"Pair classifier: {c['model']} at threshold {c['threshold']:.2f} (held-out pair F1 "
                  f"{_num(c['held_out_f1'] or math.nan, 3)}, accuracy {_num(c['held_out_accuracy'] or math.nan, 3)}; "
                  "see classifier.md). *Pairs*: classifier calls per question.", ""]
    methods = [m for m in STRATEGIES if any(key[0] == m for key in report.rows)]
    if methods:
        datasets = [d for d in report.order if d in report.counts]
        head = "| k | strategy | " + " | ".join(f"{report.title(d)} recall | kept | pairs" for d in datasets) + " |"
        lines += ["## DR-RAG retrieval strategies (the paper's table 4)", "", head,
                  "|" + "---|" * (2 + 3 * len(datasets))]
        for k in report.ks:
            for m in methods:
                cells = []
                for d in datasets:
                    row = report.rows.get((m, k, d), Row())
                    pairs = row.mean("pairs") if m in ("cis", "cfs") else math.nan
                    cells += [_pct(row.mean("recall")), _num(row.mean("kept")), _num(pairs, 1)]
                lines.append(f"| {k} | {STRATEGY_TITLES[m]} | " + " | ".join(cells) + " |")
        lines.append("")
    if report.heldout_rows:
        counts = ", ".join(f"{report.title(d)} {n}" for d, n in report.heldout_counts.items())
        datasets = [d for d in report.order if d in report.heldout_counts]
        lines += ["### The same on the classifier's held-out questions only", "",
                  "The pair classifier was trained on 80% of these same questions (split by question), so the table "
                  f"above flatters CIS and CFS. Here only the questions it never saw ({counts}):", "",
                  "| k | strategy | " + " | ".join(f"{report.title(d)} recall | kept" for d in datasets) + " |",
                  "|" + "---|" * (2 + 2 * len(datasets))]
        for k in report.ks:
            for m in methods:
                cells = []
                for d in datasets:
                    row = report.heldout_rows.get((m, k, d), Row())
                    cells += [_pct(row.mean("recall")), _num(row.mean("kept"))]
                lines.append(f"| {k} | {STRATEGY_TITLES[m]} | " + " | ".join(cells) + " |")
        lines.append("")
    if report.blend:
        model = (report.model or {}).get("name", "?")
        counts = ", ".join(f"{report.title(d)} {n}" for d, n in report.blend_counts.items())
        lines += ["## BlendFilter: the union of the three query sets before and after the model's filter", "",
                  f"Model: {model} (the embedded model unless stated). K = {report.blend_k} passages per query. "
                  f"Questions: {counts} (the first of each set). Precision counts an empty selection as 0; "
                  "S-Precision: share of questions whose kept paragraphs are exactly the gold ones.", "",
                  "| dataset | union | recall | precision | S-Precision | kept |", "|---|---|---|---|---|---|"]
        for d in report.order:
            for stage in ("before", "after"):
                row = report.blend.get((stage, d))
                if row is None:
                    continue
                label = "before filtering" if stage == "before" else "after filtering"
                lines.append(f"| {report.title(d)} | {label} | {_pct(row.mean('recall'))} | "
                             f"{_pct(row.mean('precision'))} | {_pct(row.mean('exact'))} | {_num(row.mean('kept'))} |")
        after = [r for (stage, _), r in report.blend.items() if stage == "after"]
        pooled = {key: statistics.fmean(v for r in after for v in r.extra.get(key, [])) for key in
                  ("llm_calls", "retrievals", "em", "f1", "seconds")}
        total = sum(report.statuses.values()) or 1
        statuses = ", ".join(f"{s} {n} ({100 * n / total:.0f}%)" for s, n in report.statuses.most_common())
        lines += ["", f"Per question: {pooled['llm_calls']:.2f} LLM calls, {pooled['retrievals']:.2f} retrievals, "
                      f"{pooled['seconds']:.1f} s on this machine; answer EM {100 * pooled['em']:.1f}, "
                      f"F1 {100 * pooled['f1']:.1f}.",
                  f"Filter verdicts as read by the parser: {statuses}.", ""]
    if report.skipped:
        lines += ["Not measured:", *[f"- {s}" for s in report.skipped], ""]
    timing = ", ".join(f"{m} {s:.1f} s" for m, s in report.seconds.items())
    lines += [f"Wall time: {timing}.", ""]
    return "\n".join(lines)
