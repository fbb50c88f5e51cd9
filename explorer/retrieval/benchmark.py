"""The benchmark corpus: the paragraphs of the benchmark question sets pooled into one searchable corpus.

Pooling the distractor/gold paragraphs of HotpotQA, MuSiQue and NQ-open with the 2WikiMultihopQA
corpus and a DPR sample gives every question its gold evidence among ~15,000 passages of look-alike
Wikipedia text, which is what makes retrieval decisions in the explorer mean something.

Paragraphs are deduplicated by (title, text), cut into passages of at most 100 words and given
content ids (:func:`explorer.retrieval.splitter.paragraph_passage_ids`), so that the question loaders
in :mod:`explorer.eval.datasets` compute the same gold ids on their own. The gold mapping beside
the corpus is written by the evaluation side (:mod:`explorer.eval.benchmark_gold`), *by those
loaders*, and every id in it is checked to be in the corpus; retrieval never reads question sets.

Files (under the cache, ``benchmark/``): ``corpus.jsonl`` ({id, title, text} per line),
``gold.json`` ({dataset: {file, questions: {question id: [passage ids]}}}) and ``manifest.json``.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

from explorer.errors import CorpusError
from explorer.paths import cache_dir, shared_data_dir
from explorer.retrieval.corpus import PooledFiles, collect_documents, corpus_from_documents
from explorer.retrieval.formats import open_documents
from explorer.retrieval.splitter import Document, paragraph_document

Progress = Callable[[str], None]
BUILDER_VERSION = 1

# (label, file under the data folder, shape)
SOURCES: tuple[tuple[str, str, str], ...] = (
    ("hotpotqa", "hotpotqa/dev_distractor_100.json", "hotpotqa"),
    ("musique", "musique/dev_100.json", "musique"),
    ("2wiki", "2wikimultihopqa/corpus_6119.json", "passages"),
    ("nq", "nq/nq_open_dev_oracle_2655.jsonl.gz", "nq"),
    ("wikipedia", "wikipedia/dpr_sample_1000.jsonl", "passages"),
)
@dataclass(frozen=True)
class BenchmarkFiles(PooledFiles):
    folder: Path

    def manifest(self) -> dict | None:
        try:
            return json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def complete(self) -> bool:
        manifest = self.manifest()
        return manifest is not None and manifest.get("version") == BUILDER_VERSION and self.corpus_path.is_file()


def benchmark_files() -> BenchmarkFiles:
    return BenchmarkFiles(cache_dir("benchmark"))


def _missing_data(data_dir: Path) -> CorpusError:
    from explorer.options import usage

    ways = ["set EXPLORER_DATA to the folder of the benchmark samples"]
    if usage("benchmark_data", "DIR"):
        ways.append(f"pass {usage('benchmark_data', 'DIR')}")
    return CorpusError(f"the benchmark data folder {data_dir} is missing (the pooled 'benchmark' corpus is built "
                       "from its samples)", fix=", ".join(ways) + "; without it, " + OTHER_CORPORA)


#: What to search instead when the benchmark samples are not there.
OTHER_CORPORA = ("search a question set's own paragraphs (`python -m explorer data fetch hotpotqa`, then --corpus "
                 "hotpotqa), DPR's Wikipedia (`python -m explorer data fetch wikipedia`, then --corpus wikipedia), the "
                 "corpus 'demo', or pool your own files with `python -m explorer corpus build`")


def pooled_documents(data_dir: Path, *, show_progress: bool = False,
                     only: Collection[str] | None = None) -> Iterator[Document]:
    """Every source paragraph under its content id, in source order (duplicates included).

    ``only`` names the SOURCES labels to read (default: all), for a smaller pool such as the
    HotpotQA + MuSiQue paragraphs the retrieval metrics search."""
    from tqdm import tqdm

    unknown = sorted(set(only or ()) - {label for label, _, _ in SOURCES})
    if unknown:
        raise CorpusError(f"unknown benchmark source(s) {', '.join(unknown)}",
                          fix=f"use some of {', '.join(label for label, _, _ in SOURCES)}")
    for label, rel, shape in SOURCES:
        if only is not None and label not in only:
            continue
        path = data_dir / rel
        if not path.is_file():
            raise CorpusError(f"benchmark source file missing: {rel} (the pooled 'benchmark' corpus is built from "
                              "the benchmark samples)", where=str(data_dir),
                              fix="restore the benchmark data folder (see its README); or " + OTHER_CORPORA)
        _, docs = open_documents(path, shape)
        for doc in tqdm(docs, desc=f"pooling {label}", unit=" paragraphs", disable=not show_progress, leave=False,
                        delay=0.5):
            yield paragraph_document(doc.title, doc.text, doc.where)


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def build_benchmark_corpus(data_dir: Path | None = None, *, progress: Progress | None = None) -> BenchmarkFiles:
    """Pool, deduplicate, split and write the corpus (always rebuilds; the gold mapping is rebuilt on next use)."""
    data = Path(data_dir) if data_dir else shared_data_dir()
    if not data.is_dir():
        raise _missing_data(data)
    files = benchmark_files()
    started = time.perf_counter()
    if progress:
        progress(f"building the benchmark corpus from {data}")
    docs = collect_documents(pooled_documents(data, show_progress=progress is not None))
    corpus = corpus_from_documents("benchmark", docs, source=files.corpus_path, fmt="passages")
    lines = "".join(json.dumps({"id": p.id, "title": p.title, "text": p.text}, ensure_ascii=False) + "\n"
                    for p in corpus.passages)
    write_atomic(files.corpus_path, lines)
    files.gold_path.unlink(missing_ok=True)  # gold ids of an older pool; explorer.eval.benchmark_gold rewrites them
    manifest = {"version": BUILDER_VERSION, "data_dir": str(data), "documents": corpus.documents,
                "passages": len(corpus), "fingerprint": corpus.fingerprint,
                "sources": [rel for _, rel, _ in SOURCES],
                "built": time.strftime("%Y-%m-%dT%H:%M:%S"), "seconds": round(time.perf_counter() - started, 2)}
    write_atomic(files.manifest_path, json.dumps(manifest, indent=1))  # written last: marks the set complete
    if progress:
        progress(f"benchmark corpus: {corpus.documents:,} paragraphs -> {len(corpus):,} passages "
                 f"({files.corpus_path})")
    return files


def ensure_benchmark_corpus(data_dir: Path | None = None, *, progress: Progress | None = None) -> BenchmarkFiles:
    """The built benchmark corpus, building it first when it is absent or from an older builder."""
    files = benchmark_files()
    if files.complete():
        return files
    data = Path(data_dir) if data_dir else shared_data_dir()
    if not data.is_dir():
        raise _missing_data(data)
    if progress is None:
        progress = _stderr
    return build_benchmark_corpus(data, progress=progress)


def _stderr(message: str) -> None:
    import sys

    print(message, file=sys.stderr, flush=True)

