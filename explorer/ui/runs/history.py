"""The history of stored runs: listing with filters, labels, actions and export files.

Thin functions over :class:`~explorer.store.RunStore` that the app's History tab and its tests
call; they return plain values (labels, file paths, messages) and raise ExplorerError for
anything a user can fix, such as acting on no selected run.
"""

from __future__ import annotations

import os
import re
import secrets
import tempfile
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from explorer.errors import ExplorerError
from explorer.store import RunStore
from explorer.trace import Trace
from explorer.ui.views import report

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2})?)?$")
ALL = "all"


def parse_date(value: str | None, where: str, *, end: bool = False) -> str | None:
    value = (value or "").strip()
    if not value:
        return None
    if not _DATE.match(value):
        raise ExplorerError(f"{value!r} is not a date", where=where, fix="write it as YYYY-MM-DD (or YYYY-MM-DD HH:MM)")
    value = value.replace(" ", "T")
    if end and "T" not in value:
        value += "T23:59:59"
    return value


def label(row: dict[str, Any]) -> str:
    """One line per run: when, what, how it ended, the answer, the question."""
    when = str(row.get("created_at", ""))[:16].replace("T", " ")
    name = f"“{row['name']}” · " if row.get("name") else ""
    tags = (" · #" + " #".join(row["tags"])) if row.get("tags") else ""
    question = str(row.get("question", ""))
    question = question if len(question) <= 90 else question[:89] + "…"
    return (f"{when} · {name}{row.get('method')}/{row.get('variant')} · {row.get('status')} · "
            f"answer: {row.get('answer') or '–'} · {question}{tags}")


def rows(store: RunStore, *, search: str = "", method: str = ALL, model: str = ALL, tag: str = "", since: str = "",
         until: str = "", limit: int = 200) -> list[dict[str, Any]]:
    return store.list(search=search or None, method=None if method in (ALL, "", None) else method,
                      model=None if model in (ALL, "", None) else model, tag=(tag or "").strip() or None,
                      since=parse_date(since, "since"), until=parse_date(until, "until", end=True), limit=limit)


def recorded_rows(recorded: list[tuple[str, Trace]], *, search: str = "", method: str = ALL, model: str = ALL,
                  tag: str = "", since: str = "", until: str = "") -> list[dict[str, Any]]:
    """The app's recorded case-study runs as history rows under the same filters (they carry no tags).

    ``recorded`` is (label, trace) per recorded run. They are listed after the stored runs, so they
    can be ticked with them: opened, compared and exported like any stored run."""
    if (tag or "").strip():
        return []
    first, last = parse_date(since, "since"), parse_date(until, "until", end=True)
    words = [w.lower() for w in (search or "").split()]
    out = []
    for name, t in recorded:
        text = f"{t.question} {t.answer or ''} {name}".lower()
        if words and not all(w in text for w in words):
            continue
        if method not in (ALL, "", None) and t.method != method:
            continue
        if model not in (ALL, "", None) and t.model.get("name") != model:
            continue
        if (first and t.created_at < first) or (last and t.created_at > last):
            continue
        out.append({"run_id": t.run_id, "created_at": t.created_at, "name": f"recorded: {name}", "method": t.method,
                    "variant": t.variant, "status": t.status, "answer": t.answer, "question": t.question, "tags": []})
    return out


def choices(found: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(label(r), r["run_id"]) for r in found]


def distinct(store: RunStore, column: str) -> list[str]:
    """Values present in the store for a filter dropdown (method, model)."""
    values = sorted({str(r.get(column) or "") for r in store.list(limit=100_000)} - {""})
    return [ALL, *values]


def require(selected: list[str] | None, *, at_least: int = 1, action: str = "do this") -> list[str]:
    selected = [s for s in (selected or []) if s]
    if len(selected) < at_least:
        what = "a run" if at_least == 1 else f"at least {at_least} runs"
        raise ExplorerError(f"select {what} to {action}", where="history", fix="tick runs in the list first")
    return selected


class TraceCache:
    """Stored traces by id (a finished trace never changes, so re-renders need not re-read it)."""

    def __init__(self, store: RunStore, size: int = 64) -> None:
        self.store = store
        self.size = size
        self._items: OrderedDict[str, Trace] = OrderedDict()
        #: Traces that are not in the store (the shipped recorded runs): always found, never evicted.
        self._pinned: dict[str, Trace] = {}

    def pin(self, trace: Trace) -> None:
        """Serve ``trace`` by its run id without the store (a recorded run shipped with the app)."""
        self._pinned[trace.run_id] = trace

    def get(self, run_id: str) -> Trace:
        pinned = self._pinned.get(run_id)
        if pinned is not None:
            return pinned
        trace = self._items.get(run_id)
        if trace is None:
            trace = self.store.get(run_id)
            self._items[run_id] = trace
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        else:
            self._items.move_to_end(run_id)
        return trace

    def forget(self, run_id: str) -> None:
        self._items.pop(run_id, None)


class Exports:
    """Writes export files, readable by this user only, into one private folder for the app's lifetime.

    Each export gets its own name (two users exporting at once never swap files), and files
    older than ``max_age`` seconds, or beyond the newest ``keep``, are deleted on the next
    export, so a long-running app does not fill the disk with reports.
    """

    def __init__(self, folder: Path | None = None, *, max_age: float = 3600.0, keep: int = 50) -> None:
        self.folder = folder or Path(tempfile.mkdtemp(prefix="explorer-exports-"))  # mkdtemp: mode 0700
        self.max_age = max_age
        self.keep = keep

    def _write(self, name: str, text: str) -> str:
        self.clean()
        stem, dot, ext = name.rpartition(".")
        stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
        path = self.folder / (f"{stem}-{stamp}.{ext}" if dot else f"{name}-{stamp}")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        return str(path)

    def clean(self) -> int:
        """Delete old exports; returns how many went."""
        now = time.time()
        files = sorted((p for p in self.folder.glob("*") if p.is_file()), key=lambda p: p.stat().st_mtime,
                       reverse=True)
        gone = 0
        for index, path in enumerate(files):
            if index >= self.keep or now - path.stat().st_mtime > self.max_age:
                path.unlink(missing_ok=True)
                gone += 1
        return gone

    def trace_json(self, trace: Trace) -> str:
        return self._write(report.safe_filename(f"run-{trace.method}-{trace.run_id[:8]}", ".json"),
                           report.trace_json(trace))

    def report(self, traces: list[Trace], signal: str = "prob", *, slides: bool = False, above: str = "") -> str:
        """One self-contained HTML file of the runs; ``slides``: large type, opening in presenting mode;
        ``above``: trusted markup over the runs (a recorded case study's caption)."""
        stem = (f"report-{traces[0].method}-{traces[0].run_id[:8]}" if len(traces) == 1
                else f"comparison-{len(traces)}-runs-{traces[0].run_id[:8]}")
        if slides:
            stem = "slides-" + stem.split("-", 1)[1]
        return self._write(report.safe_filename(stem, ".html"), report.report_html(traces, signal=signal,
                                                                                  slides=slides, above=above))

    def csv(self, text: str) -> str:
        return self._write("history.csv", text)
