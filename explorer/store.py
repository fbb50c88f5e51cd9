"""Runs kept in SQLite: every trace, searchable, taggable, and plain enough to browse in Datasette.

One row per run in ``runs``, with the columns people filter and sort on (question, method,
model, corpus, status, answer, costs, evaluation) beside the full trace JSON, plus ``tags`` and
``evaluations`` tables. The file is in WAL mode and every write is one transaction, so a reader
never sees half a run and a process killed mid-run leaves every earlier run intact. Each call
opens its own connection, which makes the store safe to use from the web app's worker threads.
"""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlite_utils

from explorer.errors import ExplorerError
from explorer.trace import Trace

SCHEMA_VERSION = 1
SUMMARY_COLUMNS = ("run_id", "created_at", "name", "question", "method", "variant", "model", "corpus", "status",
                   "answer", "gold", "evaluation", "dataset", "question_id", "retrievals", "llm_calls",
                   "forward_passes", "generated_tokens", "discarded_tokens", "sampled_sequences", "wall_time", "error")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _row(trace: Trace, *, evaluation: str | None, dataset: str | None, question_id: str | None) -> dict[str, Any]:
    c = trace.costs
    answers = trace.gold.get("answers") if isinstance(trace.gold, dict) else None
    return {
        "run_id": trace.run_id, "created_at": trace.created_at, "question": trace.question, "method": trace.method,
        "variant": trace.variant, "model": str(trace.model.get("name", "")),
        "corpus": str(trace.corpus.get("name", "")),
        "status": trace.status, "answer": trace.answer, "gold": json.dumps(answers) if answers else None,
        "evaluation": evaluation, "dataset": dataset, "question_id": question_id,
        "retrievals": c.retrievals, "llm_calls": c.llm_calls, "forward_passes": c.forward_passes,
        "generated_tokens": c.generated_tokens, "discarded_tokens": c.discarded_tokens,
        "sampled_sequences": c.sampled_sequences, "wall_time": round(c.total_time, 4), "error": trace.error,
        "config": json.dumps(trace.config, sort_keys=True), "trace_version": trace.version,
        "trace": trace.to_json(),
    }


class RunStore:
    """The run database at ``path`` (created with its tables on first use)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._db() as db:
                self._migrate(db)
        except sqlite3.DatabaseError as exc:
            raise ExplorerError(f"cannot open the run database: {exc}", where=str(self.path),
                                fix="point --db (or EXPLORER_DB) at a writable SQLite file, or a new path") from exc

    @contextmanager
    def _db(self) -> Iterator[sqlite_utils.Database]:
        conn = sqlite3.connect(str(self.path), timeout=30.0, check_same_thread=False)
        try:
            conn.execute("PRAGMA busy_timeout = 30000")
            yield sqlite_utils.Database(conn)
        finally:
            conn.close()

    def _migrate(self, db: sqlite_utils.Database) -> None:
        db.conn.execute("PRAGMA journal_mode = WAL")
        if "runs" not in db.table_names():
            with db.conn:
                db["runs"].create({
                    "run_id": str, "created_at": str, "name": str, "question": str, "method": str, "variant": str,
                    "model": str, "corpus": str, "status": str, "answer": str, "gold": str, "evaluation": str,
                    "dataset": str, "question_id": str, "retrievals": int, "llm_calls": int, "forward_passes": int,
                    "generated_tokens": int, "discarded_tokens": int, "sampled_sequences": int, "wall_time": float,
                    "error": str, "config": str, "trace_version": int, "trace": str,
                }, pk="run_id")
                for cols in (["created_at"], ["method"], ["model"], ["evaluation", "question_id"], ["status"]):
                    db["runs"].create_index(cols)
                db["tags"].create({"run_id": str, "tag": str}, pk=("run_id", "tag"),
                                  foreign_keys=[("run_id", "runs", "run_id")])
                db["evaluations"].create({"name": str, "created_at": str, "settings": str, "status": str},
                                         pk="name")
                db["meta"].insert({"key": "schema_version", "value": str(SCHEMA_VERSION)}, pk="key")
            db["runs"].enable_fts(["question", "answer", "name"], create_triggers=True)

    # -- writing ----------------------------------------------------------------------------------
    def save(self, trace: Trace, *, evaluation: str | None = None, dataset: str | None = None,
             question_id: str | None = None) -> str:
        """Insert or replace a run (a running run is saved again when it ends); returns its id."""
        self.save_many([trace], evaluation=evaluation, dataset=dataset, question_ids=[question_id])
        return trace.run_id

    def save_many(self, traces: Iterable[Trace], *, evaluation: str | None = None, dataset: str | None = None,
                  question_ids: Iterable[str | None] | None = None) -> list[str]:
        """Write several runs in ONE transaction (the evaluation runner's batched writes)."""
        traces = list(traces)
        qids = list(question_ids) if question_ids is not None else [None] * len(traces)
        rows = [_row(t, evaluation=evaluation, dataset=dataset, question_id=q)
                for t, q in zip(traces, qids, strict=True)]
        with self._db() as db, db.conn:
            for row in rows:
                existing = db.execute("SELECT name FROM runs WHERE run_id = ?", [row["run_id"]]).fetchone()
                row["name"] = existing[0] if existing else ""
                db["runs"].upsert(row, pk="run_id")
        return [r["run_id"] for r in rows]

    def rename(self, run_id: str, name: str) -> None:
        self._require(run_id)
        with self._db() as db, db.conn:
            db["runs"].update(run_id, {"name": name.strip()})

    def tag(self, run_id: str, *tags: str) -> None:
        self._require(run_id)
        clean = [t.strip() for t in tags if t.strip()]
        with self._db() as db, db.conn:
            db["tags"].upsert_all([{"run_id": run_id, "tag": t} for t in clean], pk=("run_id", "tag"))

    def untag(self, run_id: str, tag: str) -> None:
        with self._db() as db, db.conn:
            db.execute("DELETE FROM tags WHERE run_id = ? AND tag = ?", [run_id, tag])

    def delete(self, run_id: str) -> None:
        self._require(run_id)
        with self._db() as db, db.conn:
            db.execute("DELETE FROM tags WHERE run_id = ?", [run_id])
            db["runs"].delete(run_id)

    def start_evaluation(self, name: str, settings: dict[str, Any]) -> None:
        """Create (or reopen, for a resumed evaluation) a named evaluation."""
        with self._db() as db, db.conn:
            if db["evaluations"].count_where("name = ?", [name]) == 0:
                db["evaluations"].insert({"name": name, "created_at": _now(), "settings": json.dumps(settings),
                                          "status": "running"})

    def finish_evaluation(self, name: str, status: str = "complete") -> None:
        with self._db() as db, db.conn:
            db["evaluations"].update(name, {"status": status})

    def update_evaluation(self, name: str, *, settings: dict[str, Any] | None = None,
                          status: str | None = None) -> None:
        """Replace a named evaluation's settings and/or status (a resumed evaluation that grew more methods)."""
        changes: dict[str, Any] = {}
        if settings is not None:
            changes["settings"] = json.dumps(settings)
        if status is not None:
            changes["status"] = status
        if not changes:
            return
        with self._db() as db, db.conn:
            if db["evaluations"].count_where("name = ?", [name]) == 0:
                raise ExplorerError(f"no evaluation named {name!r}", where=str(self.path),
                                    fix="start it first (python -m explorer eval --name ...)")
            db["evaluations"].update(name, changes)

    def discard_incomplete(self, evaluation: str) -> int:
        """Delete an evaluation's runs that did not complete (errors, cancels) before a resume redoes them.

        Without this a resumed evaluation would hold two runs for the same question and method.
        Returns how many runs were deleted.
        """
        with self._db() as db, db.conn:
            ids = [r[0] for r in db.execute(
                "SELECT run_id FROM runs WHERE evaluation = ? AND status != 'complete'", [evaluation])]
            for run_id in ids:
                db.execute("DELETE FROM tags WHERE run_id = ?", [run_id])
                db["runs"].delete(run_id)
        return len(ids)

    # -- reading ----------------------------------------------------------------------------------
    def _require(self, run_id: str) -> None:
        with self._db() as db:
            if db["runs"].count_where("run_id = ?", [run_id]) == 0:
                raise ExplorerError(f"no run with id {run_id!r}", where=str(self.path),
                                    fix="pick a run from the history list")

    def get(self, run_id: str) -> Trace:
        """The stored trace, exactly as it was saved."""
        with self._db() as db:
            row = db.execute("SELECT trace FROM runs WHERE run_id = ?", [run_id]).fetchone()
        if row is None:
            raise ExplorerError(f"no run with id {run_id!r}", where=str(self.path), fix="pick a run from the history")
        return Trace.from_json(row[0])

    def tags_of(self, run_id: str) -> list[str]:
        with self._db() as db:
            return [r[0] for r in db.execute("SELECT tag FROM tags WHERE run_id = ? ORDER BY tag", [run_id])]

    def list(self, *, search: str | None = None, method: str | None = None, model: str | None = None,
             status: str | None = None, tag: str | None = None, evaluation: str | None = None,
             since: str | None = None, until: str | None = None, limit: int = 200) -> list[dict[str, Any]]:
        """Summary rows, newest first. ``search`` matches question, answer and name (full text, then substring)."""
        where, params = [], []
        for column, value in (("method", method), ("model", model), ("status", status), ("evaluation", evaluation)):
            if value:
                where.append(f"{column} = ?")
                params.append(value)
        if since:
            where.append("created_at >= ?")
            params.append(since)
        if until:
            where.append("created_at <= ?")
            params.append(until)
        if tag:
            where.append("run_id IN (SELECT run_id FROM tags WHERE tag = ?)")
            params.append(tag)
        if search and search.strip():
            where.append("(question LIKE ? OR answer LIKE ? OR name LIKE ?)")
            params += [f"%{search.strip()}%"] * 3
        sql = f"SELECT {', '.join(SUMMARY_COLUMNS)} FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at DESC, rowid DESC LIMIT ?"
        params.append(int(limit))
        with self._db() as db:
            rows = [dict(zip(SUMMARY_COLUMNS, r, strict=True)) for r in db.execute(sql, params)]
            for row in rows:
                row["tags"] = [t[0] for t in db.execute("SELECT tag FROM tags WHERE run_id = ? ORDER BY tag",
                                                        [row["run_id"]])]
        return rows

    def run_keys(self, evaluation: str) -> set[tuple[str, str, str, str]]:
        """(dataset, question_id, method, variant) of the COMPLETE runs of an evaluation: what a resume skips."""
        with self._db() as db:
            return {tuple(r) for r in db.execute(
                "SELECT dataset, question_id, method, variant FROM runs WHERE evaluation = ? AND status = 'complete'",
                [evaluation])}

    def run_configs(self, evaluation: str) -> set[tuple[str, str, str, str, str]]:
        """Like :meth:`run_keys`, with the run's config (sorted-key JSON) as a fifth element.

        A threshold sweep runs the same method and variant on the same question once per value,
        so only the config tells those runs apart.
        """
        with self._db() as db:
            return {tuple(r) for r in db.execute(
                "SELECT dataset, question_id, method, variant, config FROM runs "
                "WHERE evaluation = ? AND status = 'complete'", [evaluation])}

    def evaluations(self) -> list[dict[str, Any]]:
        with self._db() as db:
            return list(db["evaluations"].rows_where(order_by="created_at desc"))

    def evaluation(self, name: str) -> dict[str, Any] | None:
        """One evaluation's row with its settings decoded and its run counts, or None when there is none."""
        with self._db() as db:
            rows = list(db["evaluations"].rows_where("name = ?", [name]))
            if not rows:
                return None
            row = dict(rows[0])
            counts = dict(db.execute("SELECT status, COUNT(*) FROM runs WHERE evaluation = ? GROUP BY status",
                                     [name]).fetchall())
        try:
            row["settings"] = json.loads(row.get("settings") or "{}")
        except ValueError:
            row["settings"] = {}
        row["runs"] = counts
        return row

    def traces(self, *, evaluation: str) -> Iterator[tuple[dict[str, Any], Trace]]:
        """Every run of an evaluation with its trace, for metrics and reports."""
        with self._db() as db:
            cur = db.execute(f"SELECT {', '.join(SUMMARY_COLUMNS)}, trace FROM runs WHERE evaluation = ? "
                             "ORDER BY dataset, question_id, method, variant", [evaluation])
            for r in cur:
                yield dict(zip(SUMMARY_COLUMNS, r[:-1], strict=True)), Trace.from_json(r[-1])

    def export_csv(self, **filters: Any) -> str:
        """The history (summary columns and tags) as CSV text."""
        rows = self.list(limit=filters.pop("limit", 1_000_000), **filters)
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=[*SUMMARY_COLUMNS, "tags"])
        writer.writeheader()
        for row in rows:
            writer.writerow({**row, "tags": ";".join(row["tags"])})
        return out.getvalue()

    def integrity_check(self) -> str:
        with self._db() as db:
            return str(db.execute("PRAGMA integrity_check").fetchone()[0])
