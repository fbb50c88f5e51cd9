"""Where a question can come from: typed, the demo questions, the papers' case studies, a benchmark,
or a question file the user loads.

Picked questions carry their gold answers and gold passage ids into the trace
(``trace.gold``), so panels can mark gold passages and the header can say whether the answer
matches. Benchmark questions need ``../shared/data`` (or ``EXPLORER_DATA``); when it is absent
that source is simply not offered, with a note saying why. A loaded file (any format
:mod:`explorer.eval.datasets` reads, detected or chosen) becomes a source of its own, named
after the file.
"""

from __future__ import annotations

import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

from explorer.eval.datasets import DATASETS, Question, default_path, load_dataset, resolve_source
from explorer.options import using
from explorer.paths import shared_data_dir

TYPED = "Type your own"
DEMO = "Demo questions"
CASES = "Case studies from the papers"
DATASET_PREFIX = "Benchmark: "
FILE_PREFIX = "File: "
AUTO_FORMAT = "detect"
# How the app names the knobs that library messages may suggest (explorer.options).
APP_HINTS = {"dataset_format": "the Format menu"}
#: Questions offered per benchmark file (the dropdown stays usable; the eval runner does the rest).
DATASET_LIMIT = 200


def benchmark_names() -> list[str]:
    """Benchmarks whose question file is present under the shared data folder."""
    if not shared_data_dir().is_dir():
        return []
    out = []
    for name in DATASETS:
        if name == "demo":
            continue
        try:
            if default_path(name).exists():
                out.append(name)
        except Exception:  # a layout this build does not know: not offered
            continue
    return out


_files: dict[str, tuple[Question, ...]] = {}
_files_lock = threading.Lock()


def sources() -> list[str]:
    with _files_lock:
        loaded = list(_files)
    return [TYPED, DEMO, CASES] + [DATASET_PREFIX + n for n in benchmark_names()] + loaded


def load_file(path: str | Path, fmt: str | None = None, *, name: str | None = None) -> str:
    """Read a question file (format detected unless ``fmt``) and offer it as a source; returns the source's name.

    Errors are :class:`~explorer.errors.DatasetError` naming the file, the line and the fix (in the
    app's own words: the Format menu, not a command-line option)."""
    with using(APP_HINTS):
        source = resolve_source(str(path), fmt=None if not fmt or fmt == AUTO_FORMAT else fmt)
        loaded = tuple(source.load(DATASET_LIMIT))
    if not loaded:
        from explorer.errors import DatasetError

        raise DatasetError(f"{Path(path).name} holds no questions", fix="load a file with at least one question")
    key = f"{FILE_PREFIX}{name or Path(path).name} ({source.title}, {len(loaded)} questions)"
    with _files_lock:
        _files.pop(key, None)
        _files[key] = loaded
    return key


def data_note() -> str:
    if benchmark_names():
        return ""
    return (f"Benchmark questions are not offered: no data at {shared_data_dir()} "
            "(set EXPLORER_DATA to the folder holding hotpotqa/, musique/, ...).")


@lru_cache(maxsize=16)
def _load(source: str) -> tuple[Question, ...]:
    if source in (DEMO, CASES):
        questions = load_dataset("demo")
        if source == CASES:
            questions = [q for q in questions if q.extra.get("case_study")]
        return tuple(questions)
    if source.startswith(DATASET_PREFIX):
        return tuple(load_dataset(source[len(DATASET_PREFIX):], limit=DATASET_LIMIT))
    return ()


def _questions(source: str) -> tuple[Question, ...]:
    with _files_lock:
        loaded = _files.get(source)
    return loaded if loaded is not None else _load(source)


def questions(source: str) -> list[Question]:
    return list(_questions(source))


def choices(source: str) -> list[tuple[str, str]]:
    """(label, key) pairs for a dropdown; the key finds the question again with :func:`find`."""
    out = []
    for q in _questions(source):
        case = q.extra.get("case_study") if source == CASES else None
        label = (f"[{case}] " if case else "") + q.question
        out.append((label if len(label) <= 140 else label[:139] + "…", f"{q.dataset}:{q.id}"))
    return out


def find(source: str, key: str | None) -> Question | None:
    if not key:
        return None
    return next((q for q in _questions(source) if f"{q.dataset}:{q.id}" == key), None)


def gold_of(question: Question | None) -> dict[str, Any]:
    """What a trace records about the right answer (empty for a typed question)."""
    if question is None:
        return {}
    return question.gold()
