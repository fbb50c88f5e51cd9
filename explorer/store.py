"""Runs kept in SQLite: every trace, searchable, taggable, and plain enough to browse in Datasette.

One row per run in ``runs``, with the columns people filter and sort on (question, method,
model, corpus, status, answer, costs, evaluation) beside the full trace JSON, plus ``tags`` and
``evaluations`` tables. The file is in WAL mode and every write is one transaction, so a reader
never sees half a run and a process killed mid-run leaves every earlier run intact. Each call
opens its own connection, which makes the store safe to use from the web app's worker threads.

A run is stored from its start (status ``running``) and checkpointed while it runs (see
:mod:`explorer.journal`); a run whose process died is reopened as ``interrupted`` with its
partial trace. Opening, versions, migrations and read-only files: :mod:`explorer.store_schema`.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import re
import shutil
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlite_utils

from explorer.csvsafe import safe_row
from explorer.errors import ExplorerError, NotFound
from explorer.journal import assemble, header, owner_gone
from explorer.store_schema import SCHEMA_VERSION, check_columns, check_known, check_location, connect, db_error, prepare
from explorer.trace import Event, Trace

__all__ = ["SCHEMA_VERSION", "SUMMARY_COLUMNS", "RunStore"]

log = logging.getLogger("explorer.store")

SUMMARY_COLUMNS = ("run_id", "created_at", "name", "question", "method", "variant", "model", "corpus", "status",
                   "answer", "gold", "evaluation", "dataset", "question_id", "retrievals", "llm_calls",
                   "forward_passes", "generated_tokens", "discarded_tokens", "sampled_sequences", "wall_time", "error",
                   "parent_run_id", "root_run_id")
_READONLY_FIX = ("copy the file somewhere writable and point --db at the copy, or make the file and its folder "
                 "writable")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _row(trace: Trace, *, evaluation: str | None, dataset: str | None, question_id: str | None,
         trace_json: str | None = None) -> dict[str, Any]:
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
        "trace": trace.to_json() if trace_json is None else trace_json,
        "parent_run_id": (trace.fork or {}).get("parent"), "root_run_id": (trace.fork or {}).get("root"),
    }


def _looks_writable(path: Path) -> bool:
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)


def _is_readonly_error(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return "readonly" in text or "read-only" in text or "unable to open" in text


#: Free space below which a failed write is put down to a full disk.
LOW_DISK = 1 << 20


def _sidecars(path: Path) -> list[Path]:
    """A SQLite database file and the files SQLite keeps beside it."""
    return [path, *(path.with_name(path.name + suffix) for suffix in ("-wal", "-shm", "-journal"))]


def _free_bytes(folder: Path) -> int | None:
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


class RunStore:
    """The run database at ``path`` (created with its tables on first use).

    ``readonly=None`` opens a file that cannot be written read-only instead of failing;
    ``readonly=True`` never creates, migrates or changes anything (reports, exports).
    ``backup`` is the copy taken when an older file was migrated on this open, else None.
    """

    def __init__(self, path: str | Path, *, readonly: bool | None = None) -> None:
        self.path = Path(path).expanduser()
        self.backup: Path | None = None
        self._immutable = False
        self._live = True
        #: Called with the finished runs of each save once it is committed (e.g. a live OTLP export);
        #: a listener's failure is logged, never raised: the run is already stored.
        self.on_saved: list[Callable[[list[Trace]], None]] = []
        check_location(self.path)
        if readonly is None:
            readonly = self.path.exists() and not _looks_writable(self.path)
        self.readonly = readonly
        created = [p for p in _sidecars(self.path) if not p.exists()] if not self.path.exists() else []
        try:
            self._open(readonly)
        except BaseException:
            # A new database that could not be made (a full disk) leaves nothing behind: no empty file, no
            # -wal or -shm, that a later start would mistake for a run database.
            for leftover in created:
                leftover.unlink(missing_ok=True)
            raise

    def _open(self, readonly: bool) -> None:
        if not readonly:
            try:
                self._open_writable()
            except sqlite3.OperationalError as exc:
                if not (self.path.exists() and _is_readonly_error(exc)):
                    raise self._failure(exc, "cannot open the run database") from exc
                log.warning("%s cannot be written (%s); opened read-only", self.path, exc)
                self.readonly = True
        if self.readonly:
            self._open_readonly()
        else:
            self._recover()

    def _open_writable(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise db_error(self.path, f"cannot create its folder ({exc.strerror or exc})",
                           fix="choose a --db path in a folder you can write to") from exc
        try:
            conn = connect(self.path, readonly=False)
        except sqlite3.Error as exc:
            raise self._failure(exc, "cannot open the run database") from exc
        try:
            self.backup = prepare(conn, self.path)
        except sqlite3.OperationalError:
            raise
        except sqlite3.DatabaseError as exc:
            raise self._failure(exc, "cannot open the run database") from exc
        finally:
            conn.close()
        if self.backup is not None:
            log.warning("migrated %s to schema version %d; the old file was copied to %s", self.path,
                        SCHEMA_VERSION, self.backup)

    def _open_readonly(self) -> None:
        if not self.path.exists():
            raise db_error(self.path, "there is no run database here",
                           fix="check the --db path (runs are stored where `run --db` or the app put them)")
        for immutable in (False, True):
            self._immutable = immutable
            try:
                conn = connect(self.path, readonly=True, immutable=immutable)
                try:
                    version = check_known(conn, self.path)
                    self._live = version >= 2
                    check_columns(conn, self.path, live=self._live)
                finally:
                    conn.close()
                return
            except sqlite3.OperationalError as exc:
                # A WAL file in a folder nobody may write to has no -shm file and cannot get one:
                # SQLite reads it only as immutable (safe, since no writer can be there either).
                if immutable or not _is_readonly_error(exc):
                    raise self._failure(exc, "cannot read the run database") from exc
            except sqlite3.DatabaseError as exc:
                raise self._failure(exc, "cannot read the run database") from exc

    def _failure(self, exc: sqlite3.Error, what: str = "the run database failed") -> ExplorerError:
        text = str(exc)
        low = text.lower()
        if "locked" in low or "busy" in low:
            return db_error(self.path, "the run database stayed locked by another program for 30 s",
                            fix="wait for the other writer (an evaluation, another app) to finish, then retry")
        if "readonly" in low or "read-only" in low:
            return db_error(self.path, "the run database is read-only", fix=_READONLY_FIX)
        if "not a database" in low or "malformed" in low or "encrypted" in low:
            return db_error(self.path, f"{what}: it is not a SQLite run database or it is damaged ({text})")
        if "no such column" in low or "no such table" in low or "has no column" in low:
            return db_error(self.path, f"{what}: its tables are not the explorer's ({text})",
                            fix="restore it from a backup, or point --db at another file (a new path starts "
                                "an empty run database)")
        free = _free_bytes(self.path.parent)  # SQLite names a full disk as an I/O error, or by what failed next
        if free is not None and free < LOW_DISK:
            return db_error(self.path, f"{what}: no space left on the disk that holds it ({free // 1024} kB free; "
                                       f"{text})", fix="free some space on that disk, or point --db at a file on "
                                                       "another disk")
        return db_error(self.path, f"{what}: {text}")

    @contextmanager
    def _db(self) -> Iterator[sqlite_utils.Database]:
        try:
            conn = connect(self.path, readonly=self.readonly, immutable=self._immutable)
        except sqlite3.Error as exc:
            raise self._failure(exc) from exc
        try:
            yield sqlite_utils.Database(conn)
        except sqlite3.Error as exc:
            raise self._failure(exc) from exc
        finally:
            conn.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite_utils.Database]:
        """One write transaction, holding the write lock from its start (so it never fails half-way on a busy file)."""
        self._writable()
        with self._db() as db:
            db.conn.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                if db.conn.in_transaction:
                    db.conn.execute("ROLLBACK")
                raise
            db.conn.execute("COMMIT")

    def _writable(self) -> None:
        if self.readonly:
            raise db_error(self.path, "the run database is read-only, so nothing can be stored or changed in it",
                           fix=_READONLY_FIX)

    # -- runs in progress -------------------------------------------------------------------------
    def begin_run(self, trace: Trace, *, owner: str, evaluation: str | None = None, dataset: str | None = None,
                  question_id: str | None = None) -> None:
        """Store a run that is starting (status ``running``), to be checkpointed and finished by its owner."""
        self._writable()
        row = _row(trace, evaluation=evaluation, dataset=dataset, question_id=question_id, trace_json=header(trace))
        row["name"] = ""
        with self._tx() as db:
            db["runs"].upsert(row, pk="run_id")
            db.execute("DELETE FROM live_events WHERE run_id = ?", [trace.run_id])
            db.execute("INSERT OR REPLACE INTO live_runs (run_id, owner, started_at, updated_at, pending) "
                       "VALUES (?, ?, ?, ?, NULL)", [trace.run_id, owner, _now(), _now()])
            for event in trace.events:
                db.execute("INSERT OR REPLACE INTO live_events (run_id, id, event) VALUES (?, ?, ?)",
                           [trace.run_id, event.id, json.dumps(event.to_dict(), ensure_ascii=False)])

    def checkpoint_run(self, trace: Trace, events: list[Event], pending: list[dict[str, Any]] | None) -> None:
        """Append a running run's new events and replace its costs and streamed tokens (one transaction)."""
        c = trace.costs
        with self._tx() as db:
            if db.execute("SELECT 1 FROM live_runs WHERE run_id = ?", [trace.run_id]).fetchone() is None:
                return  # deleted from the history while it ran, or already finished
            db.conn.executemany("INSERT OR REPLACE INTO live_events (run_id, id, event) VALUES (?, ?, ?)",
                                [(trace.run_id, e.id, json.dumps(e.to_dict(), ensure_ascii=False)) for e in events])
            db.execute("UPDATE runs SET trace = ?, retrievals = ?, llm_calls = ?, forward_passes = ?, "
                       "generated_tokens = ?, discarded_tokens = ?, sampled_sequences = ?, wall_time = ? "
                       "WHERE run_id = ?",
                       [header(trace), c.retrievals, c.llm_calls, c.forward_passes, c.generated_tokens,
                        c.discarded_tokens, c.sampled_sequences, round(c.total_time, 4), trace.run_id])
            if pending is not None:
                db.execute("UPDATE live_runs SET updated_at = ?, pending = ? WHERE run_id = ?",
                           [_now(), json.dumps(pending, ensure_ascii=False), trace.run_id])
            else:
                db.execute("UPDATE live_runs SET updated_at = ? WHERE run_id = ?", [_now(), trace.run_id])

    def _orphans(self, db: sqlite_utils.Database) -> list[str]:
        """Runs in progress whose process is gone."""
        if not self._live:
            return []
        return [run_id for run_id, owner in db.execute("SELECT run_id, owner FROM live_runs") if owner_gone(owner)]

    def _assembled(self, db: sqlite_utils.Database, run_id: str, head: str, *, interrupted: bool) -> Trace:
        events = [r[0] for r in db.execute("SELECT event FROM live_events WHERE run_id = ? ORDER BY id", [run_id])]
        row = db.execute("SELECT pending FROM live_runs WHERE run_id = ?", [run_id]).fetchone()
        pending = json.loads(row[0]) if row and row[0] else None
        return assemble(head, events, pending, interrupted=interrupted)

    def _recover(self) -> int:
        """Turn the runs of processes that are gone into ``interrupted`` runs with their partial traces."""
        recovered = 0
        with self._db() as db:
            orphans = self._orphans(db)
        for run_id in orphans:
            with self._tx() as db:
                row = db.execute("SELECT r.trace, r.name, r.evaluation, r.dataset, r.question_id FROM live_runs l "
                                 "JOIN runs r USING (run_id) WHERE l.run_id = ?", [run_id]).fetchone()
                if row is not None:  # another process may have recovered it meanwhile
                    trace = self._assembled(db, run_id, row[0], interrupted=True)
                    new = _row(trace, evaluation=row[2], dataset=row[3], question_id=row[4])
                    new["name"] = row[1] or ""
                    db["runs"].upsert(new, pk="run_id")
                    recovered += 1
                db.execute("DELETE FROM live_events WHERE run_id = ?", [run_id])
                db.execute("DELETE FROM live_runs WHERE run_id = ?", [run_id])
        if recovered:
            log.warning("%d run(s) in %s were interrupted (their process is gone); kept with their partial traces",
                        recovered, self.path)
        return recovered

    def _settle(self) -> None:
        """Recover runs whose process has gone since this store was opened (cheap when none is in progress)."""
        with self._db() as db:
            orphans = self._orphans(db)
        if orphans:
            self._recover()

    def _forget_live(self, db: sqlite_utils.Database, run_ids: list[str]) -> None:
        for run_id in run_ids:
            db.execute("DELETE FROM live_events WHERE run_id = ?", [run_id])
            db.execute("DELETE FROM live_runs WHERE run_id = ?", [run_id])

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
        with self._tx() as db:
            for row in rows:
                existing = db.execute("SELECT name FROM runs WHERE run_id = ?", [row["run_id"]]).fetchone()
                row["name"] = existing[0] if existing else ""
                db["runs"].upsert(row, pk="run_id")
            if self._live:
                self._forget_live(db, [r["run_id"] for r in rows])
        self._announce(traces)
        return [r["run_id"] for r in rows]

    def _announce(self, traces: list[Trace]) -> None:
        """Hand the finished runs just stored to the listeners; a running run waits for its final save."""
        finished = [t for t in traces if t.status != "running"]
        if not finished:
            return
        for listener in list(self.on_saved):
            try:
                listener(finished)
            except Exception:  # a listener never costs a stored run
                log.exception("a listener on saved runs failed; the runs are stored")

    def rename(self, run_id: str, name: str) -> None:
        self._require(run_id)
        with self._tx() as db:
            db["runs"].update(run_id, {"name": name.strip()})

    def tag(self, run_id: str, *tags: str) -> None:
        self._require(run_id)
        clean = [t.strip() for t in tags if t.strip()]
        with self._tx() as db:
            db["tags"].upsert_all([{"run_id": run_id, "tag": t} for t in clean], pk=("run_id", "tag"))

    def untag(self, run_id: str, tag: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM tags WHERE run_id = ? AND tag = ?", [run_id, tag])

    def delete(self, run_id: str) -> None:
        self._require(run_id)
        with self._tx() as db:
            db.execute("DELETE FROM tags WHERE run_id = ?", [run_id])
            db.execute("DELETE FROM run_requests WHERE run_id = ?", [run_id])
            db["runs"].delete(run_id)
            self._forget_live(db, [run_id])

    # -- idempotency keys of API calls ---------------------------------------------------------------
    def bind_request(self, key: str, run_id: str, request: str) -> None:
        """Remember that the call with idempotency ``key`` (asking for ``request``) made run ``run_id``."""
        with self._tx() as db:
            db.execute("INSERT OR IGNORE INTO run_requests (key, run_id, request, created_at) VALUES (?, ?, ?, ?)",
                       [key, run_id, request, _now()])

    def request_run(self, key: str) -> tuple[str, str] | None:
        """The run a call with idempotency ``key`` made and what it asked for, or None for a new key."""
        with self._db() as db:
            row = db.execute("SELECT run_id, request FROM run_requests WHERE key = ?", [key]).fetchone()
        return (str(row[0]), str(row[1])) if row is not None else None

    def start_evaluation(self, name: str, settings: dict[str, Any]) -> None:
        """Create (or reopen, for a resumed evaluation) a named evaluation."""
        with self._tx() as db:
            if db["evaluations"].count_where("name = ?", [name]) == 0:
                db["evaluations"].insert({"name": name, "created_at": _now(), "settings": json.dumps(settings),
                                          "status": "running"})

    def finish_evaluation(self, name: str, status: str = "complete") -> None:
        with self._tx() as db:
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
        with self._tx() as db:
            if db["evaluations"].count_where("name = ?", [name]) == 0:
                raise NotFound(f"no evaluation named {name!r}", where=str(self.path),
                           fix="start it first (python -m explorer eval --name ...)")
            db["evaluations"].update(name, changes)

    def discard_incomplete(self, evaluation: str) -> int:
        """Delete an evaluation's runs that did not complete (errors, cancels) before a resume redoes them.

        Without this a resumed evaluation would hold two runs for the same question and method.
        Returns how many runs were deleted.
        """
        with self._tx() as db:
            ids = [r[0] for r in db.execute(
                "SELECT run_id FROM runs WHERE evaluation = ? AND status != 'complete'", [evaluation])]
            for run_id in ids:
                db.execute("DELETE FROM tags WHERE run_id = ?", [run_id])
                db["runs"].delete(run_id)
            self._forget_live(db, ids)
        return len(ids)

    # -- reading ----------------------------------------------------------------------------------
    def _missing(self, run_id: str) -> ExplorerError:
        return NotFound(f"no run with id {run_id!r}", where=str(self.path),
                             fix="pick a run from the history list (or `python -m explorer report` for evaluations)")

    def _require(self, run_id: str) -> None:
        with self._db() as db:
            if db["runs"].count_where("run_id = ?", [run_id]) == 0:
                raise self._missing(run_id)

    def resolve_id(self, text: str) -> str:
        """The run id that ``text`` is, or the one run id it starts (as short ids are shown); else a clear error."""
        text = (text or "").strip()
        with self._db() as db:
            found = [r[0] for r in db.execute("SELECT run_id FROM runs WHERE run_id = ? OR run_id LIKE ? LIMIT 3",
                                              [text, text.replace("%", "").replace("_", "") + "%"])]
        if text in found:
            return text
        if len(found) == 1 and len(text) >= 4:
            return found[0]
        if not found or len(text) < 4:
            raise self._missing(text)
        raise ExplorerError(f"{text!r} starts more than one run id", where="run id", fix="give more of the id")

    def get(self, run_id: str) -> Trace:
        """The stored trace, exactly as it was saved; a run in progress up to its last checkpoint."""
        with self._db() as db:
            row = db.execute("SELECT trace, status FROM runs WHERE run_id = ?", [run_id]).fetchone()
            if row is None:
                raise self._missing(run_id)
            running = row[1] == "running" and self._live
            orphan = running and run_id in self._orphans(db)
            if not (orphan and not self.readonly):
                try:
                    if running:
                        return self._assembled(db, run_id, row[0], interrupted=orphan)
                    return Trace.from_json(row[0])
                except (ValueError, KeyError, TypeError) as exc:
                    raise self._unreadable(run_id, exc) from exc
        self._recover()  # its process is gone: store it as interrupted, then read that
        return self.get(run_id)

    def _unreadable(self, run_id: str, exc: Exception) -> ExplorerError:
        return ExplorerError(f"the stored trace of run {run_id!r} cannot be read ({exc})", where=str(self.path),
                             fix="it was written by another version or changed by hand: delete the run, or restore "
                                 "the file from a backup")

    def tags_of(self, run_id: str) -> list[str]:
        with self._db() as db:
            return [r[0] for r in db.execute("SELECT tag FROM tags WHERE run_id = ? ORDER BY tag", [run_id])]

    def list(self, *, search: str | None = None, method: str | None = None, model: str | None = None,
             status: str | None = None, tag: str | None = None, evaluation: str | None = None,
             since: str | None = None, until: str | None = None, limit: int = 200) -> list[dict[str, Any]]:
        """Summary rows, newest first. ``search`` matches question, answer and name through the full-text index.

        Every word of ``search`` must occur, as a word or the start of one ("Savil" finds "Saville");
        words are quoted, so FTS5 operators in user text are plain words.
        """
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
        if match := _fts_query(search):
            where.append("rowid IN (SELECT rowid FROM runs_fts WHERE runs_fts MATCH ?)")
            params.append(match)
        sql = f"SELECT {', '.join(SUMMARY_COLUMNS)} FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at DESC, rowid DESC LIMIT ?"
        params.append(int(limit))
        if not self.readonly:
            self._settle()
        with self._db() as db:
            rows = [dict(zip(SUMMARY_COLUMNS, r, strict=True)) for r in db.execute(sql, params)]
            orphans = set(self._orphans(db)) if self.readonly else set()
            tags = _tags_by_run(db, [row["run_id"] for row in rows])
            for row in rows:
                if row["run_id"] in orphans:
                    row["status"] = "interrupted"  # cannot be written here: shown as it will be stored
                row["tags"] = tags.get(row["run_id"], [])
        return rows

    def family(self, run_id: str) -> list[dict[str, Any]]:
        """The family of a run: its first run and every fork of it (forks of forks too), oldest first.

        Each row is a summary row (``parent_run_id`` links it to its parent) with the fork's ``at``
        and ``change`` (None for the first run). A run that was never forked is a family of one.
        """
        self._require(run_id)
        with self._db() as db:
            found = db.execute("SELECT root_run_id FROM runs WHERE run_id = ?", [run_id]).fetchone()
            root = (found[0] if found else None) or run_id
            cur = db.execute(f"SELECT {', '.join(SUMMARY_COLUMNS)}, json_extract(trace, '$.fork.at'), "
                             "json_extract(trace, '$.fork.change') FROM runs WHERE run_id = ? OR root_run_id = ? "
                             "ORDER BY created_at, rowid", [root, root])
            rows = []
            for r in cur:
                row = dict(zip(SUMMARY_COLUMNS, r[:-2], strict=True))
                row["at"], row["change"] = (json.loads(v) if v else None for v in r[-2:])
                rows.append(row)
        return rows

    def children(self, run_id: str) -> list[str]:
        """Run ids of the forks made directly from ``run_id``, oldest first."""
        with self._db() as db:
            return [r[0] for r in db.execute("SELECT run_id FROM runs WHERE parent_run_id = ? ORDER BY created_at, "
                                             "rowid", [run_id])]

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
                try:
                    trace = Trace.from_json(r[-1])
                except (ValueError, KeyError, TypeError) as exc:
                    raise self._unreadable(r[0], exc) from exc
                yield dict(zip(SUMMARY_COLUMNS, r[:-1], strict=True)), trace

    def export_csv(self, **filters: Any) -> str:
        """The history (summary columns and tags) as CSV text."""
        rows = self.list(limit=filters.pop("limit", 1_000_000), **filters)
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow([*SUMMARY_COLUMNS, "tags"])
        for row in rows:
            writer.writerow(safe_row([*(row[c] for c in SUMMARY_COLUMNS), ";".join(row["tags"])]))
        return out.getvalue()

    def integrity_check(self) -> str:
        with self._db() as db:
            return str(db.execute("PRAGMA integrity_check").fetchone()[0])


def _fts_query(search: str | None) -> str:
    """An FTS5 query requiring every word of ``search`` as a word or word prefix (each quoted: no operators)."""
    words = re.findall(r"\w+", search or "")
    return " ".join('"' + w.replace('"', '""') + '"*' for w in words)


def _tags_by_run(db: Any, run_ids: list[str]) -> dict[str, list[str]]:
    """Every listed run's tags in one query (not one per row)."""
    if not run_ids:
        return {}
    out: dict[str, list[str]] = {}
    marks = ", ".join("?" * len(run_ids))
    for run_id, tag in db.execute(f"SELECT run_id, tag FROM tags WHERE run_id IN ({marks}) ORDER BY tag", run_ids):
        out.setdefault(run_id, []).append(tag)
    return out
