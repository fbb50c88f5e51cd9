"""Benchmark question sets as one record type, :class:`Question`, whatever file they come from.

Each dataset reads every layout it ships in (the official JSON with paragraphs, question-only
JSON lines, the samples under ../shared/data, FlashRAG's layout that ``explorer data fetch``
downloads) by looking at the fields of each record, so a user can point ``path=`` at the full
official file they downloaded. A benchmark name is looked up in the shared data folder, then
among the fetched files (:func:`default_path`). JSON lines are streamed, so
``limit`` stops reading early on files of any size.

Gold passages are ids in the benchmark corpus (:mod:`explorer.retrieval.benchmark`), computed
with the same function that gives the corpus its ids
(:func:`explorer.retrieval.splitter.paragraph_passage_ids`), so the two cannot disagree:

- HotpotQA / 2WikiMultihopQA: the pieces of each ``supporting_facts`` paragraph that hold a
  supporting sentence, in the order the facts are listed;
- MuSiQue: the ``is_supporting`` paragraphs, in the order of the question decomposition (hop order);
- NQ-open oracle: its ``ctxs`` marked ``isgold``;
- demo: the demo corpus ids; StrategyQA and question-only files: none (empty list).

Questions without an id of their own are numbered by their 0-based position in the file.

Besides the benchmark names, a dataset can be any question file (:class:`DatasetSource`, from
:func:`resolve_source`): the path, with its format detected (or given), filed under the file's
name or the NAME of ``NAME=PATH``. The record shapes are in :mod:`explorer.eval.question_formats`,
the readers in :mod:`explorer.eval.question_files`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from explorer.cache import KeyedCache
from explorer.errors import DatasetError
from explorer.eval.question import Question
from explorer.eval.question_files import check_format, read_questions, sniff_format
from explorer.eval.question_formats import FORMAT_TITLES, PARSERS, QUESTION_FORMATS
from explorer.options import option, usage
from explorer.paths import DEMO_CORPUS_DIR, data_dirs, fetched_data_dir

__all__ = ["DATASETS", "DatasetSource", "Question", "QUESTION_FORMATS", "canonical_name", "default_path",
           "iter_questions", "load_dataset", "load_source", "resolve_source", "resolve_sources"]

log = logging.getLogger("explorer.eval")
DATASETS = ("hotpotqa", "musique", "2wiki", "nq", "strategyqa", "triviaqa", "popqa", "bamboogle", "demo")
DEFAULT_FILES = {
    "hotpotqa": "hotpotqa/dev_distractor_100.json",
    "musique": "musique/dev_100.json",
    "2wiki": "2wikimultihopqa/dev_500_questions.jsonl",
    "nq": "nq/nq_open_dev_oracle_2655.jsonl.gz",
    "strategyqa": "strategyqa/dev_229.json",
}
ALIASES = {"hotpot": "hotpotqa", "2wikimultihopqa": "2wiki", "nq-open": "nq", "nq_open": "nq", "strategy": "strategyqa"}


# --- benchmark names ------------------------------------------------------------------------------


def _dataset_name(name: str) -> str:
    key = ALIASES.get(name.strip().lower(), name.strip().lower())
    if key not in PARSERS or key not in DATASETS:
        raise DatasetError(f"unknown dataset '{name}'", where="dataset",
                           fix=f"use one of {', '.join(DATASETS)}, or the path of a question file "
                               "(.json, .jsonl, .csv or .tsv)")
    return key


def canonical_name(name: str) -> str:
    """The dataset's registered name for any accepted spelling ("hotpot" -> "hotpotqa"); unknown names fail."""
    return _dataset_name(name)


def is_dataset_name(name: str) -> bool:
    key = ALIASES.get(name.strip().lower(), name.strip().lower())
    return key in DATASETS


def candidate_files(key: str) -> list[str]:
    """The files a benchmark is read from, relative to a data folder, in order: the shared data folder's
    layout (a sample with gold paragraphs), then the file ``explorer data fetch`` puts there."""
    from explorer.fetching.catalog import entry

    fetched = entry(key)
    return [p for p in (DEFAULT_FILES.get(key), fetched.path if fetched else None) if p]


def default_path(name: str, data_dir: Path | None = None) -> Path:
    """The benchmark's question file: the first candidate present in ``data_dir``, else in the shared data
    folder, else among the fetched files; when none is, where ``data fetch`` would put it (for messages)."""
    from explorer.fetching.catalog import find_file

    key = _dataset_name(name)
    if key == "demo":
        return DEMO_CORPUS_DIR / "questions.jsonl"
    candidates = candidate_files(key)
    roots = [Path(data_dir)] if data_dir else data_dirs()
    found = find_file(candidates, roots)
    if found is not None:
        return found
    return Path(data_dir) / candidates[0] if data_dir else fetched_data_dir() / candidates[-1]


def _missing_default(key: str, data_dir: Path | str | None = None) -> DatasetError:
    looked = ", ".join(str(d) for d in ([data_dir] if data_dir else data_dirs()))
    hints = [f"fetch it with `python -m explorer data fetch {key}`",
             "set EXPLORER_DATA to a folder that holds it"]
    if usage("data_dir", "DIR"):
        hints.append(f"pass {usage('data_dir', 'DIR')}")
    if usage("dataset", "PATH"):
        hints.append(f"give your own {key} file: {usage('dataset', 'PATH')}")
    return DatasetError(f"the {key} question file is not there (looked in {looked})", fix="; or ".join(hints))


def iter_questions(name: str, *, path: Path | str | None = None, data_dir: Path | str | None = None,
                   skipped: list[str] | None = None) -> Iterator[Question]:
    """Questions one by one, read as dataset ``name`` (JSON lines and tables are read as they are consumed);
    records without an answer are left out and named in ``skipped`` when it is given."""
    key = _dataset_name(name)
    file = Path(path).expanduser() if path else default_path(key, Path(data_dir) if data_dir else None)
    if not file.is_file():
        if path:
            raise DatasetError(f"question file not found: {file}", fix="check the path")
        raise _missing_default(key, data_dir)
    yield from read_questions(file, key, label=key, suggest_format=False, skipped=skipped)


SKIPPED_NAMED = 3  # records without an answer named one by one in the warning


def _collect(questions: Iterable[Question], limit: int | None, where: Path,
             skipped: list[str] | None = None) -> list[Question]:
    """The first ``limit`` questions; records without an answer (named in ``skipped`` as they are read) are
    left out with a warning that counts and names them, so the limit counts questions that can be scored."""
    if limit is not None and limit < 0:
        raise DatasetError(f"limit must be 0 or more, got {limit}")
    out: list[Question] = []
    if limit == 0:
        return out
    seen: dict[str, int] = {}
    for question in questions:
        if question.id in seen:  # gold mappings and stored runs key questions by id
            raise DatasetError(f"question id '{question.id}' appears twice in {where} (questions "
                               f"{seen[question.id] + 1} and {len(out) + 1})", fix="give every question its own id")
        seen[question.id] = len(out)
        out.append(question)
        if limit is not None and len(out) >= limit:
            break
    if skipped:
        named = "; ".join(skipped[:SKIPPED_NAMED]) + (f"; and {len(skipped) - SKIPPED_NAMED} more"
                                                     if len(skipped) > SKIPPED_NAMED else "")
        if not out:
            raise DatasetError(f"no record of {where} that was read has an answer to score against ({named})",
                               fix="give the records their answers ('answer', 'answers' or 'golden_answers')")
        log.warning("%s: %d record(s) without an answer left out (they cannot be scored): %s", where, len(skipped),
                    named)
    return out


def load_dataset(name: str, *, path: Path | str | None = None, limit: int | None = None,
                 data_dir: Path | str | None = None) -> list[Question]:
    """The first ``limit`` (default: all) questions of a dataset's default file, or of ``path``; records
    without an answer are left out, with a warning naming them."""
    where = Path(path).expanduser() if path else default_path(name, Path(data_dir) if data_dir else None)
    if limit is not None and limit < 0:
        raise DatasetError(f"limit must be 0 or more, got {limit}")
    skipped: list[str] = []
    return _collect(iter_questions(name, path=path, data_dir=data_dir, skipped=skipped), limit, where, skipped)


# --- question sources: a benchmark name or a user's file ------------------------------------------


_fingerprints: KeyedCache[str] = KeyedCache("file fingerprints")


def file_fingerprint(path: Path) -> str:
    """A content hash of a file (remembered per path, size and modification time within the process)."""
    stat = path.stat()

    def build() -> str:
        digest = hashlib.sha256()
        with open(path, "rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()[:32]

    cached = _fingerprints.get(str(path.resolve()), build, stamp=(stat.st_size, stat.st_mtime_ns))
    return cached


@dataclass(frozen=True)
class DatasetSource:
    """Where one dataset of an evaluation comes from: its name, its file and how the file is read.

    ``label`` is the name its questions are filed under (a benchmark name, the file's stem, or the
    NAME of ``NAME=PATH``); ``named`` says the label is a benchmark read from its default file.
    """

    label: str
    path: Path
    format: str
    detected: bool = False
    named: bool = False
    #: the records without an answer the last :meth:`load` left out (where each is, and why)
    skipped: list[str] = field(default_factory=list, compare=False, hash=False, repr=False)

    @property
    def spec(self) -> str:
        """What to type to name this source again (``hotpotqa``, or ``label=path``)."""
        if self.named:
            return self.label
        return str(self.path) if self.label == label_for(self.path) else f"{self.label}={self.path}"

    @property
    def title(self) -> str:
        return FORMAT_TITLES.get(self.format, self.format)

    def fingerprint(self) -> str:
        """Content hash of the file and the format it is read in: what a resumed evaluation must find again."""
        return f"{self.format}:{file_fingerprint(self.path)}"

    def describe(self) -> dict[str, Any]:
        """What an evaluation stores about the source (and shows in its report)."""
        return {"file": str(self.path), "format": self.format, "format_detected": self.detected,
                "fingerprint": self.fingerprint(), "skipped": len(self.skipped)}

    def iter_questions(self) -> Iterator[Question]:
        return read_questions(self.path, self.format, label=self.label, suggest_format=not self.named,
                              detected=self.detected, skipped=self.skipped)

    def load(self, limit: int | None = None) -> list[Question]:
        self.skipped.clear()
        return _collect(self.iter_questions(), limit, self.path, self.skipped)


_LABEL = re.compile(r"[^\w.+-]+")


def label_for(path: Path) -> str:
    """A dataset name from a file name: ``bamboogle.jsonl.gz`` -> ``bamboogle``."""
    name = path.name
    for suffix in (".gz",):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    stem = name.rsplit(".", 1)[0] if "." in name else name
    return _LABEL.sub("_", stem).strip("_") or "questions"


def _looks_like_path(spec: str) -> bool:
    return os.sep in spec or "/" in spec or bool(re.search(r"\.(json|jsonl|ndjson|csv|tsv)(\.gz)?$", spec.lower()))


def _is_name(spec: str) -> bool:
    text = spec.strip()
    return "=" not in text and not _looks_like_path(text) and is_dataset_name(text)


def resolve_source(spec: str, *, fmt: str | None = None, data_dir: Path | str | None = None) -> DatasetSource:
    """A source from what a user typed: a benchmark name, a file path, or ``NAME=PATH``.

    A file's format is ``fmt`` when given, else detected from its first record (which is read now,
    so a file that cannot be read fails before anything else starts)."""
    text = spec.strip()
    label, sep, rest = text.partition("=")
    if sep and label.strip() and rest.strip():
        label, target = label.strip(), rest.strip()
    else:
        label, target = "", text
    if not target:
        raise DatasetError("an empty dataset was given", where=option("dataset"),
                           fix=f"give a dataset name ({', '.join(DATASETS)}) or the path of a question file")
    if not label and not _looks_like_path(target) and is_dataset_name(target):
        key = canonical_name(target)
        file = default_path(key, Path(data_dir) if data_dir else None)
        if not file.is_file():
            raise _missing_default(key, data_dir)
        return DatasetSource(label=key, path=file, format=key, named=True)
    path = Path(target).expanduser()
    if not path.is_file():
        if not label and not _looks_like_path(target):
            raise DatasetError(f"'{target}' is neither a dataset name nor a file",
                               where=option("dataset"),
                               fix=f"use one of {', '.join(DATASETS)}, or the path of a question file "
                                   "(.json, .jsonl, .csv or .tsv)")
        from explorer.outputs import missing_reason

        what = "a folder" if path.is_dir() else "not found" if not path.is_symlink() else missing_reason(path)
        raise DatasetError(f"question file {what}: {path}", where=option("dataset"),
                           fix="check the path (a question file is .json, .jsonl, .csv or .tsv, optionally .gz)")
    shape, detected = sniff_format(path, fmt)
    return DatasetSource(label=label or label_for(path), path=path.resolve(), format=shape, detected=detected)


def resolve_sources(specs: Iterable[str], *, fmt: str | None = None,
                    data_dir: Path | str | None = None) -> list[DatasetSource]:
    """Several sources; ``fmt`` applies to every one given as a file. Two sources may not share a name."""
    specs = list(specs)
    if fmt:
        check_format(fmt)
        if specs and all(_is_name(s) for s in specs):
            name = option("dataset_format") or "the format"
            raise DatasetError(f"{name} applies to question files, and only benchmark names were given "
                               f"({', '.join(specs)})", fix=f"leave {name} out, or give a file path")
    sources: list[DatasetSource] = []
    for spec in specs:
        source = resolve_source(spec, fmt=fmt, data_dir=data_dir)
        clash = next((s for s in sources if s.label == source.label), None)
        if clash is not None:
            if clash.path == source.path:
                continue
            name = option("dataset")
            raise DatasetError(f"two question sources are both named '{source.label}' ({clash.path} and "
                               f"{source.path})",
                               fix="name them apart, e.g. " + (f"{name} " if name else "")
                                   + f"{source.label}_a={clash.path},{source.label}_b={source.path}")
        sources.append(source)
    return sources


def load_source(source: DatasetSource, limit: int | None = None) -> list[Question]:
    """The first ``limit`` questions of a source (all when None)."""
    return source.load(limit)
