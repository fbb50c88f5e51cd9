"""Runs of every method exported to a real Arize Phoenix server and read back through Phoenix's REST API.

Phoenix runs from its own venv (``make phoenix``: ``.cache/phoenix-venv``, or the ``phoenix``
executable named by EXPLORER_PHOENIX), with its SQLite working folder in a temporary folder, one
server for the whole module. ``explorer export --otlp`` sends to its OTLP/HTTP endpoint
(``/v1/traces``); the spans are read back from ``/v1/projects/<project>/spans``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from explorer.cli import main
from explorer.otel import SERVICE
from explorer.store import RunStore
from tests.test_otel_export import runs  # noqa: F401  (the fixture: every method's runs and a fork)

pytestmark = pytest.mark.slow  # a Phoenix server starts (about 30 s)

ROOT = Path(__file__).resolve().parent.parent


def _phoenix() -> Path | None:
    given = os.environ.get("EXPLORER_PHOENIX")
    for candidate in ([Path(given)] if given else []) + [ROOT / ".cache" / "phoenix-venv" / "bin" / "phoenix"]:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return json.loads(reply.read())


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory):
    executable = _phoenix()
    if executable is None:
        pytest.skip("Arize Phoenix is not installed: `make phoenix` installs it into .cache/phoenix-venv "
                    "(needs network once), or set EXPLORER_PHOENIX to a `phoenix` executable")
    work = tmp_path_factory.mktemp("phoenix")
    port = _free_port()
    env = {**os.environ, "PHOENIX_WORKING_DIR": str(work), "PHOENIX_PORT": str(port), "PHOENIX_HOST": "127.0.0.1",
           "PHOENIX_GRPC_PORT": str(_free_port()), "PHOENIX_TELEMETRY_ENABLED": "false"}
    log = (work / "server.log").open("w")
    server = subprocess.Popen([str(executable), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(url + "/healthz", timeout=2).read()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("Phoenix did not start:\n" + (work / "server.log").read_text()[-3000:]) from None
                time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def _spans(url: str, expected: int) -> list[dict]:
    """Every span of the explorer's project, waiting for Phoenix to have written them all."""
    deadline = time.monotonic() + 60
    while True:
        spans, cursor = [], None
        while True:
            try:
                page = _get(f"{url}/v1/projects/{SERVICE}/spans?limit=1000" + (f"&cursor={cursor}" if cursor else ""))
            except urllib.error.HTTPError as exc:  # the project exists once Phoenix has written its first span
                if exc.code != 404:
                    raise
                page = {"data": []}
            spans += page["data"]
            cursor = page.get("next_cursor")
            if not cursor:
                break
        if len(spans) >= expected or time.monotonic() > deadline:
            return spans
        time.sleep(0.5)


def test_every_method_appears_in_phoenix_with_its_decisions(phoenix, runs, tmp_path, capsys) -> None:  # noqa: F811
    db = tmp_path / "runs.sqlite"
    store = RunStore(db)
    for trace in runs:
        store.save(trace)
    assert main(["export", "--all", "--otlp", phoenix, "--db", str(db)]) == 0
    sent = int(capsys.readouterr().err.split(" spans ->")[0].split()[-1])
    spans = _spans(phoenix, sent)
    assert len(spans) == sent
    chains = [s for s in spans if s["span_kind"] == "CHAIN"]
    assert len(chains) == len(runs)
    assert {s["attributes"]["explorer.method"] for s in chains} == {t.method for t in runs}
    assert {s["span_kind"] for s in spans} >= {"CHAIN", "LLM", "RETRIEVER"}
    retrievers = [s for s in spans if s["span_kind"] == "RETRIEVER"]
    assert any(k.startswith("retrieval.documents") for s in retrievers for k in s["attributes"])
    events = [(e["name"], e.get("attributes") or {}) for s in spans for e in s.get("events") or []]
    names = {name for name, _ in events}
    assert {"check", "trigger", "truncation", "continuation", "uncertainty", "filter", "classifier"} <= names
    checks = [a for name, a in events if name == "check"]
    assert checks and all("check.threshold" in a for a in checks)  # RIND/θ, U/δ: the value against its bar
    forks = [s for s in chains if s["attributes"].get("explorer.fork.parent_run_id")]
    assert len(forks) == 1
    assert forks[0]["attributes"]["explorer.fork.parent_run_id"] in {s["attributes"]["explorer.run_id"] for s in chains}
