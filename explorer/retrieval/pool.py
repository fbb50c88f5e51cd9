"""Pooling the paragraphs of any question files and corpus files into one corpus, with its gold mapping.

This is what the benchmark corpus (:mod:`explorer.retrieval.benchmark`) does for the shared data,
for a user's own set: the paragraphs inside question files (HotpotQA / 2Wiki ``context``, MuSiQue
``paragraphs``, NQ ``ctxs``) and every document of the corpus files, deduplicated by (title, text),
cut into passages of at most 100 words under content ids. Because a question's gold ids are
computed from the same paragraphs by the same function
(:func:`explorer.retrieval.splitter.paragraph_passage_ids`), every gold id is in the pool by
construction; it is checked anyway before anything is written.

Files written to the output folder: ``corpus.jsonl`` ({id, title, text} per line, what
``--corpus`` reads), ``gold.json`` ({dataset: {file, format, questions: {id: [passage ids]}}})
and ``manifest.json`` (sources with their content hashes, counts).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from explorer.errors import CorpusError
from explorer.eval.datasets import DatasetSource, file_fingerprint
from explorer.outputs import write_file
from explorer.retrieval.corpora import PooledFiles, collect_documents, corpus_from_documents
from explorer.retrieval.formats import SHAPE_READERS, open_documents
from explorer.retrieval.splitter import Document, paragraph_document

Progress = Callable[[str], None]
POOL_VERSION = 1
# The question formats whose records carry paragraphs, and the field that holds them.
PARAGRAPH_FIELDS = {"hotpotqa": "context", "2wiki": "context", "musique": "paragraphs", "nq": "ctxs"}


@dataclass(frozen=True)
class CorpusSource:
    """A corpus file or folder and its format (None: detected)."""

    path: Path
    format: str | None = None


@dataclass
class Pool(PooledFiles):
    """What :func:`build_pool` wrote, and the counts it reports."""

    folder: Path
    documents: int
    passages: int
    fingerprint: str
    paragraphs_from: dict[str, int] = field(default_factory=dict)
    gold_questions: dict[str, int] = field(default_factory=dict)


def question_paragraphs(source: DatasetSource) -> Iterator[Document]:
    """The paragraphs inside a question file's records (none for question-only formats)."""
    from explorer.eval.question_files import iter_records

    key = PARAGRAPH_FIELDS.get(source.format)
    if key is None:
        return
    reader = SHAPE_READERS[source.format]
    for where, record in iter_records(source.path):
        if isinstance(record, dict) and key in record:
            for doc in reader(where, record):
                yield paragraph_document(doc.title, doc.text, doc.where)


def corpus_paragraphs(source: CorpusSource) -> tuple[str, Iterator[Document]]:
    """The documents of a corpus file under content ids (so they dedupe against question paragraphs)."""
    if not source.path.exists():
        raise CorpusError(f"no such corpus file or folder: {source.path}", fix="check the path")
    shape, docs = open_documents(source.path, source.format)
    return shape, (paragraph_document(d.title, d.text, d.where) for d in docs)


#: The files a pooled corpus folder receives.
POOL_FILES = ("corpus.jsonl", "gold.json", "manifest.json")


def _write_atomic(path: Path, text: str) -> None:
    write_file(path, text, "--out")


def build_pool(datasets: Sequence[DatasetSource], corpora: Sequence[CorpusSource], out: Path, *,
               progress: Progress | None = None) -> Pool:
    """Pool, deduplicate, split and write; every gold id of every question is checked to be in the pool."""
    say = progress or (lambda _m: None)
    started = time.perf_counter()
    if not datasets and not corpora:
        raise CorpusError("nothing to pool", fix="give question files with paragraphs and/or corpus files")
    counts: dict[str, int] = {}
    formats: dict[str, str] = {}

    def everything() -> Iterator[Document]:
        for source in datasets:
            n = 0
            for doc in question_paragraphs(source):
                n += 1
                yield doc
            counts[f"{source.label} ({source.path})"] = n
        for corpus in corpora:
            shape, docs = corpus_paragraphs(corpus)
            formats[str(corpus.path)] = shape
            n = 0
            for doc in docs:
                n += 1
                yield doc
            counts[str(corpus.path)] = n

    docs = collect_documents(everything(), show_progress=progress is not None, desc="pooling")
    out = Path(out).expanduser()
    corpus = corpus_from_documents(out.name or "pool", docs, source=out / "corpus.jsonl", fmt="passages")
    say(f"pooled {sum(counts.values()):,} paragraphs -> {corpus.documents:,} distinct -> {len(corpus):,} passages")
    gold: dict[str, dict] = {}
    for source in datasets:
        questions = source.load()
        mapping = {q.id: q.gold_passages for q in questions if q.gold_passages}
        missing = [(q, pid) for q, ids in mapping.items() for pid in ids if corpus.passage(pid) is None]
        if missing:
            qid, pid = missing[0]
            raise CorpusError(f"{len(missing)} gold passage ids of {source.path} are not in the pool, e.g. {pid} of "
                              f"question {qid}", where=str(source.path),
                              fix="its supporting paragraphs are missing from its records; check the file")
        gold[source.label] = {"file": str(source.path), "format": source.format, "questions": mapping,
                              "count": len(questions)}
    out.mkdir(parents=True, exist_ok=True)
    _write_atomic(out / "corpus.jsonl", "".join(
        json.dumps({"id": p.id, "title": p.title, "text": p.text}, ensure_ascii=False) + "\n"
        for p in corpus.passages))
    _write_atomic(out / "gold.json", json.dumps(gold, ensure_ascii=False, indent=1))
    manifest = {
        "version": POOL_VERSION, "documents": corpus.documents, "passages": len(corpus),
        "fingerprint": corpus.fingerprint,
        "datasets": [{"name": s.label, "file": str(s.path), "format": s.format, "sha256": file_fingerprint(s.path),
                      "paragraphs": counts.get(f"{s.label} ({s.path})", 0)} for s in datasets],
        "corpora": [{"file": str(c.path), "format": formats.get(str(c.path)),
                     "sha256": file_fingerprint(c.path) if c.path.is_file() else None,
                     "paragraphs": counts.get(str(c.path), 0)} for c in corpora],
        "built": time.strftime("%Y-%m-%dT%H:%M:%S"), "seconds": round(time.perf_counter() - started, 2),
    }
    _write_atomic(out / "manifest.json", json.dumps(manifest, ensure_ascii=False, indent=1))
    return Pool(folder=out, documents=corpus.documents, passages=len(corpus), fingerprint=corpus.fingerprint,
                paragraphs_from=counts, gold_questions={k: len(v["questions"]) for k, v in gold.items()})
