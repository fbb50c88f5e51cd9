"""``explorer export``: stored runs of every method as OpenInference spans, read back by a real OTLP/HTTP receiver.

The receiver is a small HTTP server on 127.0.0.1 that decodes what the OpenTelemetry OTLP/HTTP
exporter posts (``ExportTraceServiceRequest`` protobuf, opentelemetry-proto), as a collector or
Phoenix would. The runs are the shipped gallery's recorded runs (BlendFilter, DRAGIN, FLARE, SEAKR,
DR-RAG, SR, wo) and FL-RAG and FS-RAG runs made here on the tiny model, with a fork of one.
"""

from __future__ import annotations

import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from explorer.cli import main
from explorer.engine.generation import Engine
from explorer.errors import ExplorerError
from explorer.forks import ForkPlan, ForkPoint, fork_run
from explorer.methods.base import run_question
from explorer.paths import ASSETS_DIR
from explorer.runtime import Runtime
from explorer.store import RunStore
from explorer.trace import Trace

SAVILLE = "Who lived longer, Alejandro Jodorowsky or Philip Saville?"


class Receiver:
    """An OTLP/HTTP traces endpoint keeping every span it is sent, decoded from protobuf."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
            ExportTraceServiceResponse,
        )

        self.spans: list = []
        self.resources: list = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                ok = self.path == "/v1/traces" and self.headers.get("Content-Type") == "application/x-protobuf"
                if ok:
                    request = ExportTraceServiceRequest.FromString(body)
                    for resource_spans in request.resource_spans:
                        receiver.resources.append(resource_spans.resource)
                        for scope in resource_spans.scope_spans:
                            receiver.spans.extend(scope.spans)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if ok else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def attrs(span) -> dict:
    """A protobuf span's attributes as a plain dict."""
    out = {}
    for kv in span.attributes:
        value = kv.value
        kind = value.WhichOneof("value")
        out[kv.key] = [getattr(v, v.WhichOneof("value")) for v in value.array_value.values] \
            if kind == "array_value" else getattr(value, kind)
    return out


@pytest.fixture(scope="module")
def runs(tiny_lm, demo_retriever) -> list[Trace]:
    recorded = []
    for file in sorted((ASSETS_DIR / "gallery").glob("*-*.json")):  # <case>-<method>.json, recorded runs
        data = json.loads(file.read_text())
        recorded.append(Trace.from_dict(data.get("trace", data)))
    runtime = Runtime(engine=Engine(tiny_lm), retriever=demo_retriever, corpus={"name": "demo"})
    made = [run_question(m, SAVILLE, runtime, config={"max_length": 24, "answer_tokens": 4}) for m in ("fl", "fs")]
    first = made[0].of_kind("generation")[-1]
    fork = fork_run(made[0], ForkPlan(made[0].run_id, ForkPoint(span=first.id, token=0)), runtime, raise_errors=True)
    return recorded + made + [fork]


@pytest.fixture()
def receiver():
    r = Receiver()
    yield r
    r.stop()


def test_every_method_is_exported_as_openinference_spans(runs, receiver, tmp_path) -> None:
    db = tmp_path / "runs.sqlite"
    store = RunStore(db)
    for trace in runs:
        store.save(trace)
    assert {t.method for t in runs} >= {"wo", "sr", "fl", "fs", "flare", "dragin", "seakr", "blendfilter", "drrag"}
    assert main(["export", "--all", "--otlp", receiver.url, "--db", str(db)]) == 0

    by_trace: dict[str, list] = {}
    for span in receiver.spans:
        by_trace.setdefault(span.trace_id.hex(), []).append(span)
    assert set(by_trace) == {t.run_id for t in runs}  # one OpenTelemetry trace per run, its id the run id
    assert attrs(receiver.resources[0])["openinference.project.name"] == "dynamic-rag-explorer"
    chains = {}
    for trace in runs:
        spans = by_trace[trace.run_id]
        kinds = [attrs(s)["openinference.span.kind"] for s in spans]
        assert kinds.count("CHAIN") == 1
        assert kinds.count("LLM") == len(trace.of_kind("generation"))
        assert kinds.count("RETRIEVER") == len(trace.of_kind("retrieval"))
        chain = next(s for s in spans if attrs(s)["openinference.span.kind"] == "CHAIN")
        chains[trace.run_id] = chain
        a = attrs(chain)
        assert (a["explorer.method"], a["input.value"], a["explorer.costs.llm_calls"]) == \
            (trace.method, trace.question, trace.costs.llm_calls)
        assert json.loads(a["metadata"])["config"] == json.loads(json.dumps(trace.config))
        assert all(s.parent_span_id == chain.span_id for s in spans if s is not chain)

        generations = {e.id: e for e in trace.of_kind("generation")}
        for span in spans:
            a = attrs(span)
            if a["openinference.span.kind"] == "LLM":
                event = generations[a["explorer.event_id"]]
                assert a["llm.token_count.completion"] == len(event.payload["tokens"])
                assert a["llm.token_count.prompt"] == event.payload["prompt_tokens"]
                assert (a["input.value"], a["output.value"]) == (event.payload["prompt"], event.payload["text"])
                assert a["llm.model_name"] == trace.model["name"]
                assert span.end_time_unix_nano >= span.start_time_unix_nano
            if a["openinference.span.kind"] == "RETRIEVER":
                event = trace.event(a["explorer.event_id"])
                hits = event.payload["hits"]
                assert [a[f"retrieval.documents.{i}.document.id"] for i in range(len(hits))] == [h["id"] for h in hits]
                gold = set(trace.gold.get("gold_passages") or [])
                marks = [json.loads(a[f"retrieval.documents.{i}.document.metadata"])["gold"] for i in range(len(hits))]
                assert marks == [h["id"] in gold for h in hits]
                assert a["input.value"] == trace.event(event.payload["query"]).payload["text"]

        # every decision is a span event somewhere in the run, with its payload's values
        events = [(e.name, {kv.key: kv.value for kv in e.attributes}) for s in spans for e in s.events]
        decided = [e for e in trace.events if e.kind not in ("generation", "retrieval", "query")]
        assert sorted(name for name, _ in events) == sorted(e.kind for e in decided)

    dragin = next(t for t in runs if t.method == "dragin" and t.of_kind("trigger"))
    check = dragin.of_kind("check")[0]
    span = next(s for s in by_trace[dragin.run_id] if attrs(s).get("explorer.event_id") == check.payload["span"])
    event = next(e for e in span.events if e.name == "check")  # RIND against θ, on the span it judged
    values = {kv.key: kv.value for kv in event.attributes}
    assert (values["check.signal"].string_value, values["check.threshold"].double_value) == \
        ("rind", check.payload["threshold"])
    assert {e.name for e in span.events} >= {"check", "trigger", "truncation"}
    tokens = dragin.event(check.payload["span"]).payload["tokens"]  # the token strip, each token's signals
    assert attrs(span)["explorer.tokens"] == [t["text"] for t in tokens]
    rind = [t["signals"].get("rind") for t in tokens]
    assert [v for v in attrs(span)["explorer.signal.rind"] if v == v] == [v for v in rind if v is not None]
    seakr = next(t for t in runs if t.method == "seakr")
    names = {e.name for s in by_trace[seakr.run_id] for e in s.events}
    assert "uncertainty" in names  # U against δ
    assert "filter" in {e.name for s in by_trace[next(t for t in runs if t.method == "blendfilter").run_id]
                        for e in s.events}
    assert "classifier" in {e.name for s in by_trace[next(t for t in runs if t.method == "drrag").run_id]
                            for e in s.events}

    fork = runs[-1]  # linked to its parent's run span
    [link] = chains[fork.run_id].links
    parent = fork.fork["parent"]
    assert (link.trace_id.hex(), link.span_id) == (parent, chains[parent].span_id)


def test_an_evaluation_and_a_file(runs, receiver, tmp_path, capsys) -> None:
    db = tmp_path / "runs.sqlite"
    store = RunStore(db)
    store.start_evaluation("exp", {"model": "tiny"})
    for trace in runs[-3:]:
        store.save(trace, evaluation="exp", dataset="demo", question_id="q")
    store.save(runs[0])
    assert main(["export", "--evaluation", "exp", "--otlp", receiver.url, "--db", str(db)]) == 0
    assert {s.trace_id.hex() for s in receiver.spans} == {t.run_id for t in runs[-3:]}
    assert {attrs(s).get("session.id") for s in receiver.spans if not s.parent_span_id} == {"exp"}

    out = tmp_path / "spans.json"
    assert main(["export", "--run", runs[0].run_id[:10], "--otlp-json", str(out), "--db", str(db)]) == 0
    data = json.loads(out.read_text())
    spans = [s for r in data["resourceSpans"] for sc in r["scopeSpans"] for s in sc["spans"]]
    assert {s["traceId"] for s in spans} == {runs[0].run_id}  # OTLP/JSON: ids in hex
    assert len(spans) == 1 + len(runs[0].of_kind("generation")) + len(runs[0].of_kind("retrieval"))

    assert main(["export", "--otlp", receiver.url, "--db", str(db)]) == 1
    assert "say which runs to export" in capsys.readouterr().err
    assert main(["export", "--all", "--otlp", "localhost:4318", "--db", str(db)]) == 1
    assert "not an http(s) address" in capsys.readouterr().err


def test_a_collector_that_is_not_there_is_said_plainly(runs) -> None:
    import socket

    from explorer.otel import build_spans, send

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(ExplorerError, match="did not accept the spans"):
        send(build_spans(runs[:1]), f"http://127.0.0.1:{port}", timeout=1)



def test_a_wide_retrieval_and_a_long_run_lose_nothing() -> None:
    """More documents and decisions than the OpenTelemetry SDK keeps by default (128 of each per span)."""
    from explorer.otel import build_spans
    from explorer.trace import Event
    from tests.eval_helpers import make_trace

    trace = make_trace("dragin", "x", ["x"], hits=[[f"p{i}#0" for i in range(60)]], gold_passages=["p59#0"])
    for i in range(200):
        trace.events.append(Event(kind="note", payload={"message": f"note {i}"}, id=len(trace.events)))
    spans = build_spans([trace])
    [retriever] = [s for s in spans if s.attributes["openinference.span.kind"] == "RETRIEVER"]
    [run] = [s for s in spans if s.parent is None]
    assert retriever.attributes["retrieval.documents.59.document.id"] == "p59#0"
    assert json.loads(retriever.attributes["retrieval.documents.59.document.metadata"])["gold"] is True
    assert len(run.events) == 200 and run.events[-1].attributes["note.message"] == "note 199"
