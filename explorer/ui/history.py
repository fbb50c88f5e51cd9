"""The history of stored runs: listing with filters, labels, actions and export files.

Thin functions over :class:`~explorer.store.RunStore` that the app's History tab and its tests
call; they return plain values (labels, file paths, messages) and raise ExplorerError for
anything a user can fix, such as acting on no selected run.
"""

from __future__ import annotations

import re
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

from explorer.errors import ExplorerError
from explorer.store import RunStore
from explorer.trace import Trace
from explorer.ui import report

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

    def get(self, run_id: str) -> Trace:
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
    """Writes export files into one temporary folder for the app's lifetime."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder or Path(tempfile.mkdtemp(prefix="explorer-exports-"))

    def _write(self, name: str, text: str) -> str:
        path = self.folder / name
        path.write_text(text, encoding="utf-8")
        return str(path)

    def trace_json(self, trace: Trace) -> str:
        return self._write(report.safe_filename(f"run-{trace.method}-{trace.run_id[:8]}", ".json"),
                           report.trace_json(trace))

    def report(self, traces: list[Trace], signal: str = "prob") -> str:
        stem = (f"report-{traces[0].method}-{traces[0].run_id[:8]}" if len(traces) == 1
                else f"comparison-{len(traces)}-runs-{traces[0].run_id[:8]}")
        return self._write(report.safe_filename(stem, ".html"), report.report_html(traces, signal=signal))

    def csv(self, text: str) -> str:
        return self._write("history.csv", text)
