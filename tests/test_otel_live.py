"""Live export: every finished run the app stores goes to an OTLP/HTTP collector as it is stored.

The collector is the real OTLP/HTTP receiver of :mod:`tests.test_otel_export`; the runs are the
shipped gallery's recorded runs (every method that has one), saved into a real SQLite store.
"""

from __future__ import annotations

import json
import logging
import socket
from dataclasses import replace

import pytest

from explorer.errors import ExplorerError
from explorer.otel import SERVICE
from explorer.otel_live import ENV, LiveExport, configured_endpoint
from explorer.paths import ASSETS_DIR
from explorer.store import RunStore
from explorer.trace import Trace
from tests.test_otel_export import Receiver, attrs


@pytest.fixture(scope="module")
def gallery() -> list[Trace]:
    runs = []
    for file in sorted((ASSETS_DIR / "gallery").glob("*-*.json")):
        data = json.loads(file.read_text())
        runs.append(Trace.from_dict(data.get("trace", data)))
    return runs


@pytest.fixture()
def receiver():
    r = Receiver()
    yield r
    r.stop()


def test_each_finished_run_is_streamed_as_it_is_stored(gallery, receiver, tmp_path) -> None:
    store = RunStore(tmp_path / "runs.sqlite")
    live = LiveExport(receiver.url).attach(store)
    running = replace(gallery[0], status="running")
    store.save(running)  # a run still in progress is not sent: its final save is
    assert live.flush(30)
    assert receiver.spans == []
    for trace in gallery:
        store.save(trace)
    assert live.flush(60)
    chains = [s for s in receiver.spans if attrs(s).get("openinference.span.kind") == "CHAIN"]
    assert len(chains) == len(gallery)
    methods = {t.method for t in gallery}
    assert {attrs(s)["explorer.method"] for s in chains} == methods
    assert {attrs(s)["explorer.run_id"] for s in chains} == {t.run_id for t in gallery}
    kinds = {attrs(s).get("openinference.span.kind") for s in receiver.spans}
    assert {"CHAIN", "LLM", "RETRIEVER"} <= kinds
    assert any(attrs(r).get("service.name") == SERVICE for r in receiver.resources)
    assert live.sent == len(gallery) and live.failed == 0
    live.close()


def test_an_absent_collector_is_logged_once_and_loses_no_run(gallery, tmp_path, caplog) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store = RunStore(tmp_path / "runs.sqlite")
    live = LiveExport(f"http://127.0.0.1:{port}", timeout=1.0).attach(store)
    with caplog.at_level(logging.WARNING, logger="explorer.otel"):
        for trace in gallery[:3]:
            assert store.save(trace) == trace.run_id
        assert live.flush(60)
    warnings = [r for r in caplog.records if "not reaching the OTLP collector" in r.getMessage()]
    assert len(warnings) == 1
    assert live.failed == 3 and live.sent == 0
    for trace in gallery[:3]:
        assert store.get(trace.run_id).run_id == trace.run_id
    live.close()


def test_the_setting_comes_from_the_flag_or_the_environment(monkeypatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert configured_endpoint(None) == ""
    assert configured_endpoint("http://localhost:6006") == "http://localhost:6006/v1/traces"
    monkeypatch.setenv(ENV, "http://collector:4318/")
    assert configured_endpoint(None) == "http://collector:4318/v1/traces"
    with pytest.raises(ExplorerError, match="not an http"):
        configured_endpoint("localhost:6006")


def test_serve_takes_the_setting() -> None:
    from explorer.ui.serving.server import parse_args

    assert parse_args(["--otlp", "http://localhost:6006"]).otlp == "http://localhost:6006"
