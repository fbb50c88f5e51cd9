"""Where a question can come from: typed, the demo questions, the papers' case studies, a benchmark,
or a question file the user loads.

Picked questions carry their gold answers and gold passage ids into the trace
(``trace.gold``), so panels can mark gold passages and the header can say whether the answer
matches. Benchmark questions need ``../shared/data`` (or ``EXPLORER_DATA``) or files fetched with
``explorer data fetch``; without them that source is simply not offered, with a note saying why.
A loaded file (any format :mod:`explorer.eval.datasets` reads, detected or chosen) becomes a
source of its own, named after the file.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from pathlib import Path
from typing import Any

from explorer.eval.datasets import DATASETS, Question, default_path, load_dataset, resolve_source
from explorer.options import using
from explorer.paths import data_dirs

log = logging.getLogger("explorer.ui")

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
    """Benchmarks whose question file is present (in the shared data folder or among the fetched files)."""
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


#: Question files a browser loaded, by source name. Kept per browser session (in a ``gr.State``)
#: so one visitor's file never appears in another's menu.
Loaded = dict[str, tuple[Question, ...]]


def sources(loaded: Loaded | None = None) -> list[str]:
    """The question sources to offer: built-in ones, benchmark files present, then this browser's files."""
    return [TYPED, DEMO, CASES] + [DATASET_PREFIX + n for n in benchmark_names()] + list(loaded or {})


def load_file(path: str | Path, fmt: str | None = None, *, name: str | None = None,
              loaded: Loaded | None = None) -> str:
    """Read a question file (format detected unless ``fmt``) into ``loaded``; returns the source's name.

    Errors are :class:`~explorer.errors.DatasetError` naming the file, the line and the fix (in the
    app's own words: the Format menu, not a command-line option)."""
    with using(APP_HINTS):
        source = resolve_source(str(path), fmt=None if not fmt or fmt == AUTO_FORMAT else fmt)
        found = tuple(source.load(DATASET_LIMIT))
    if not found:
        from explorer.errors import DatasetError

        raise DatasetError(f"{Path(path).name} holds no questions", fix="load a file with at least one question")
    key = f"{FILE_PREFIX}{name or Path(path).name} ({source.title}, {len(found)} questions)"
    if loaded is not None:
        loaded.pop(key, None)
        loaded[key] = found
    return key


def data_note() -> str:
    if benchmark_names():
        return ""
    log.info("no benchmark data in %s", " or ".join(str(d) for d in data_dirs()))  # server folders: its log only
    return ("Benchmark questions are not offered: this server has no benchmark data (whoever runs it fetches "
            "them with `python -m explorer data fetch hotpotqa musique`, or sets EXPLORER_DATA to the folder "
            "holding hotpotqa/, musique/, ...).")


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


def _questions(source: str, loaded: Loaded | None = None) -> tuple[Question, ...]:
    if source.startswith(FILE_PREFIX):
        return (loaded or {}).get(source, ())
    return _load(source)


def questions(source: str, loaded: Loaded | None = None) -> list[Question]:
    return list(_questions(source, loaded))


def choices(source: str, loaded: Loaded | None = None) -> list[tuple[str, str]]:
    """(label, key) pairs for a dropdown; the key finds the question again with :func:`find`."""
    out = []
    for q in _questions(source, loaded):
        case = q.extra.get("case_study") if source == CASES else None
        label = (f"[{case}] " if case else "") + q.question
        out.append((label if len(label) <= 140 else label[:139] + "…", f"{q.dataset}:{q.id}"))
    return out


def find(source: str, key: str | None, loaded: Loaded | None = None) -> Question | None:
    if not key:
        return None
    return next((q for q in _questions(source, loaded) if f"{q.dataset}:{q.id}" == key), None)


def gold_of(question: Question | None) -> dict[str, Any]:
    """What a trace records about the right answer (empty for a typed question)."""
    if question is None:
        return {}
    return question.gold()
