"""Opening the run database: connection modes, the schema version, migrations and their backups.

The schema version is kept twice, in ``PRAGMA user_version`` (what SQLite tools show) and in the
``meta`` table (what Datasette users browse); the higher of the two counts. A file written by a
newer explorer is refused rather than written to, because an older explorer cannot know which of
its writes would damage it. An older file is migrated in one transaction, after a backup copy is
taken next to it, so a failed or unwanted migration never costs a stored run.

A file that cannot be written (permissions, a read-only mount, a read-only medium) is opened
read-only: listing, reopening and reporting work, and every write says why it cannot happen.
"""

from __future__ import annotations

import shutil
import sqlite3
import stat
from datetime import UTC, datetime
from pathlib import Path

import sqlite_utils

from explorer.errors import ExplorerError

#: 1: runs, tags, evaluations, meta.
#: 2: live_runs and live_events, the checkpoints of runs still in progress.
#: 3: runs.parent_run_id and runs.root_run_id, the family of a fork (indexed for the family tree).
#: 4: run_requests, the idempotency keys of API calls (a retried call gets the run the first one made).
SCHEMA_VERSION = 4

RUN_COLUMNS: dict[str, type] = {
    "run_id": str, "created_at": str, "name": str, "question": str, "method": str, "variant": str,
    "model": str, "corpus": str, "status": str, "answer": str, "gold": str, "evaluation": str,
    "dataset": str, "question_id": str, "retrievals": int, "llm_calls": int, "forward_passes": int,
    "generated_tokens": int, "discarded_tokens": int, "sampled_sequences": int, "wall_time": float,
    "error": str, "config": str, "trace_version": int, "trace": str, "parent_run_id": str, "root_run_id": str,
}
TABLES_V1 = ("runs", "tags", "evaluations", "meta")
LIVE_TABLES = ("live_runs", "live_events", "run_requests")

_DB_FIX = "point --db (or EXPLORER_DB) at another file; a new path starts an empty run database"


def db_error(path: Path, what: str, fix: str = _DB_FIX) -> ExplorerError:
    return ExplorerError(what, where=str(path), fix=fix)


def connect(path: Path, *, readonly: bool, immutable: bool = False) -> sqlite3.Connection:
    """A connection with a busy timeout; read-only ones never create or change a file."""
    if readonly:
        mode = "immutable=1" if immutable else "mode=ro"
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?{mode}", uri=True, timeout=30.0, check_same_thread=False)
    else:
        conn = sqlite3.connect(str(path), timeout=30.0, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 30000")
    return conn


def check_location(path: Path) -> None:
    """Refuse, with the reason, a path where no database file can be (or is) kept: a folder, a device,
    a named pipe or socket (or a link to one), a symbolic link loop, or a path under a file."""
    from explorer.outputs import kind_of, look

    found = look(path, "--db")
    if path.is_dir():
        raise db_error(path, "this is a folder, not a database file",
                       fix="name a file inside it, e.g. --db " + str(path / "runs.sqlite"))
    if found is not None and not stat.S_ISREG(found.st_mode):
        link = "a symbolic link to " if path.is_symlink() else ""
        raise db_error(path, f"this is {link}{kind_of(found.st_mode)}, not a database file",
                       fix="name a regular file, e.g. --db runs.sqlite")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise db_error(path, f"cannot create the run database: {parent} is a file, not a folder",
                               fix="choose a --db path inside a folder (e.g. ./runs.sqlite), or move that file")
            break


def tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def stored_version(conn: sqlite3.Connection, path: Path) -> int:
    """The schema version the file says it has (0 for an empty file)."""
    user_version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    meta = 0
    names = tables(conn)
    if "meta" in names:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is not None:
            try:
                meta = int(str(row[0]).strip())
            except ValueError:
                raise db_error(path, f"the schema version in its meta table is not a number ({row[0]!r})") from None
    version = max(user_version, meta)
    if version == 0 and "runs" in names:
        version = 1  # the first schema did not set user_version and may lack the meta row
    return version


def check_known(conn: sqlite3.Connection, path: Path) -> int:
    """The stored version, refusing a newer one and a file that belongs to another program."""
    version = stored_version(conn, path)
    if version > SCHEMA_VERSION:
        raise db_error(path, f"this run database has schema version {version}, written by a newer explorer "
                             f"(this one reads up to version {SCHEMA_VERSION}); it was left untouched",
                       fix="upgrade the explorer (git pull; make install) to use it, or point --db at another file")
    names = tables(conn)
    if version == 0 and names - {"sqlite_sequence"}:
        shown = ", ".join(sorted(names)[:6])
        raise db_error(path, f"this SQLite file belongs to another program (its tables: {shown}); "
                             "the explorer's tables are not in it")
    return version


def check_columns(conn: sqlite3.Connection, path: Path, *, live: bool) -> None:
    """Refuse a file whose tables lack what this explorer reads and writes."""
    names = tables(conn)
    missing_tables = [t for t in TABLES_V1 + (LIVE_TABLES if live else ()) if t not in names]
    if missing_tables:
        raise db_error(path, f"the run database lacks the table(s) {', '.join(missing_tables)}",
                       fix="it was changed by hand or is damaged: restore it from a backup, or " + _DB_FIX)
    have = {r[1] for r in conn.execute("PRAGMA table_info(runs)")}
    missing = [c for c in RUN_COLUMNS if c not in have]
    if missing:
        raise db_error(path, f"the runs table lacks the column(s) {', '.join(missing)}",
                       fix="it was changed by hand or is damaged: restore it from a backup, or " + _DB_FIX)


# -- creating and migrating ---------------------------------------------------------------------------


def _create_live(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE IF NOT EXISTS live_runs (run_id TEXT PRIMARY KEY, owner TEXT NOT NULL, "
                 "started_at TEXT, updated_at TEXT, pending TEXT)")
    conn.execute("CREATE TABLE IF NOT EXISTS live_events (run_id TEXT NOT NULL, id INTEGER NOT NULL, "
                 "event TEXT NOT NULL, PRIMARY KEY (run_id, id))")


def _create_requests(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE IF NOT EXISTS run_requests (key TEXT PRIMARY KEY, run_id TEXT NOT NULL, "
                 "request TEXT NOT NULL, created_at TEXT NOT NULL)")
    conn.execute("CREATE INDEX IF NOT EXISTS idx_run_requests_run_id ON run_requests (run_id)")


def _set_version(conn: sqlite3.Connection, version: int) -> None:
    conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
    conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)", [str(version)])
    conn.execute(f"PRAGMA user_version = {int(version)}")


def _create(conn: sqlite3.Connection) -> None:
    db = sqlite_utils.Database(conn)
    db["runs"].create(RUN_COLUMNS, pk="run_id")
    for cols in (["created_at"], ["method"], ["model"], ["evaluation", "question_id"], ["status"],
                 ["parent_run_id"], ["root_run_id"]):
        db["runs"].create_index(cols)
    db["tags"].create({"run_id": str, "tag": str}, pk=("run_id", "tag"), foreign_keys=[("run_id", "runs", "run_id")])
    db["evaluations"].create({"name": str, "created_at": str, "settings": str, "status": str}, pk="name")
    _create_live(conn)
    _create_requests(conn)
    _set_version(conn, SCHEMA_VERSION)


def _add_family(conn: sqlite3.Connection) -> None:
    """Forks name their parent and their family's first run; runs stored before have neither."""
    have = {r[1] for r in conn.execute("PRAGMA table_info(runs)")}
    for column in ("parent_run_id", "root_run_id"):
        if column not in have:
            conn.execute(f"ALTER TABLE runs ADD COLUMN {column} TEXT")
    conn.execute("CREATE INDEX IF NOT EXISTS idx_runs_parent_run_id ON runs (parent_run_id)")
    conn.execute("CREATE INDEX IF NOT EXISTS idx_runs_root_run_id ON runs (root_run_id)")


#: Steps from version N to N + 1, each run inside the migration's one transaction.
MIGRATIONS = {1: _create_live, 2: _add_family, 3: _create_requests}


def backup_path(path: Path, version: int) -> Path:
    candidate = path.with_name(f"{path.name}.v{version}-backup")
    if candidate.exists():
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        candidate = path.with_name(f"{path.name}.v{version}-backup-{stamp}")
    return candidate


def backup(conn: sqlite3.Connection, path: Path, version: int) -> Path:
    """A consistent copy of the whole database (WAL included) beside it, before anything changes."""
    target = backup_path(path, version)
    try:
        with sqlite3.connect(str(target)) as copy:
            conn.backup(copy)
        copy.close()
        shutil.copymode(path, target)
    except (sqlite3.Error, OSError) as exc:
        target.unlink(missing_ok=True)
        raise db_error(path, f"cannot write a backup copy before migrating it ({exc}); nothing was changed",
                       fix=f"free some space or make {path.parent} writable, then open it again") from exc
    return target


def prepare(conn: sqlite3.Connection, path: Path) -> Path | None:
    """Create the tables of a new file or migrate an older one; returns the backup copy it made, if any."""
    version = check_known(conn, path)  # before anything is written: a newer or foreign file stays as it is
    conn.execute("PRAGMA journal_mode = WAL")
    made: Path | None = None
    if version == 0:
        conn.execute("BEGIN IMMEDIATE")
        try:
            if check_known(conn, path) == 0:  # nobody created it meanwhile
                _create(conn)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        sqlite_utils.Database(conn)["runs"].enable_fts(["question", "answer", "name"], create_triggers=True,
                                                        replace=True)
    elif version < SCHEMA_VERSION:
        made = backup(conn, path, version)
        conn.execute("BEGIN IMMEDIATE")
        try:
            current = check_known(conn, path)  # another process may have migrated it meanwhile
            for step in range(current, SCHEMA_VERSION):
                MIGRATIONS[step](conn)
            if current < SCHEMA_VERSION:
                _set_version(conn, SCHEMA_VERSION)
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            conn.execute("ROLLBACK")
            raise db_error(path, f"migrating it from schema version {version} to {SCHEMA_VERSION} failed ({exc}); "
                                 f"it was left as it was, and a copy is at {made}") from exc
    check_columns(conn, path, live=True)
    return made
