"""The gold passage ids of the benchmark questions, written beside the pooled benchmark corpus.

The corpus itself is retrieval's business (:mod:`explorer.retrieval.benchmark`); which of its
passages answer which question is the evaluation's, so the mapping is computed here by the same
question loaders the evaluation uses, checked against the corpus, and cached as ``gold.json``
until the corpus is rebuilt.
"""

from __future__ import annotations

import json
from pathlib import Path

from explorer.errors import CorpusError
from explorer.eval.datasets import load_dataset
from explorer.paths import shared_data_dir
from explorer.retrieval.benchmark import BenchmarkFiles, ensure_benchmark_corpus, write_atomic

# (dataset name for load_dataset, file whose questions have gold paragraphs)
GOLD_SOURCES: tuple[tuple[str, str], ...] = (
    ("hotpotqa", "hotpotqa/dev_distractor_100.json"),
    ("musique", "musique/dev_100.json"),
    ("nq", "nq/nq_open_dev_oracle_2655.jsonl.gz"),
    ("2wiki", "2wikimultihopqa/dev_2_with_context.json"),
)


def gold_mapping(data_dir: Path) -> dict[str, dict]:
    """Gold passage ids per question, computed by the question loaders themselves."""
    out: dict[str, dict] = {}
    for name, rel in GOLD_SOURCES:
        questions = load_dataset(name, path=data_dir / rel)
        out[name] = {"file": rel, "questions": {q.id: q.gold_passages for q in questions if q.gold_passages}}
    return out


def write_benchmark_gold(files: BenchmarkFiles, data_dir: Path | None = None) -> dict[str, dict]:
    """Compute the gold mapping, check every id is in the built corpus, and write ``gold.json``."""
    data = Path(data_dir) if data_dir else Path((files.manifest() or {}).get("data_dir") or shared_data_dir())
    gold = gold_mapping(data)
    with files.corpus_path.open(encoding="utf-8") as lines:
        ids = {json.loads(line)["id"] for line in lines if line.strip()}
    missing = [(name, qid, pid) for name, entry in gold.items() for qid, pids in entry["questions"].items()
               for pid in pids if pid not in ids]
    if missing:
        raise CorpusError(f"{len(missing)} gold passage ids are not in the pooled corpus, e.g. {missing[0]}",
                          where=str(data), fix="the benchmark files do not match each other; restore them")
    write_atomic(files.gold_path, json.dumps(gold, ensure_ascii=False, indent=1))
    return gold


def load_benchmark_gold() -> dict[str, dict[str, list[str]]]:
    """{dataset: {question id: gold passage ids}} of the built benchmark corpus (built first when absent)."""
    files = ensure_benchmark_corpus()
    if not files.gold_path.is_file() or files.gold_path.stat().st_mtime < files.manifest_path.stat().st_mtime:
        write_benchmark_gold(files)
    data = json.loads(files.gold_path.read_text(encoding="utf-8"))
    return {name: entry["questions"] for name, entry in data.items()}
