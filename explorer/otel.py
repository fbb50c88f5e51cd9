"""Stored runs as OpenTelemetry spans in the OpenInference conventions, for Arize Phoenix and OTLP collectors.

Built from stored traces only (nothing recomputes a signal): one run is one OpenTelemetry trace,

- a CHAIN span for the run (question in, answer out; method, variant, config, model, corpus,
  gold answers and costs as metadata; status ERROR for a failed run);
- an LLM span per generated span (its prompt, its output, prompt and completion token counts,
  the model, the decoding settings), timed from the event's clock and its ``seconds``;
- a RETRIEVER span per retrieval (the query, and each document with its id, text, score, rank
  and whether it is a gold passage);
- every decision as a span event where it happened: DRAGIN's RIND check against θ, the trigger,
  the cut and the continuation on the LLM span they concern; SEAKR's uncertainty U against δ and
  its choices, BlendFilter's filter verdicts, DR-RAG's classifier calls, selections, re-rankings
  and notes on the span of the retrieval or generation they name, else on the run's span.

Span and trace ids are derived from the run id and event ids, so exporting a run twice gives the
same ids (a collector deduplicates), and a fork's run span links to its parent's run span.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from explorer.errors import ExplorerError
from explorer.trace import Event, Trace

SERVICE = "dynamic-rag-explorer"
#: Payload keys that are the span itself rather than a decision about it (kept out of event attributes).
_BULK = {"tokens", "prompt", "prompt_segments", "hits"}
#: Event kinds that are decisions, recorded as span events.
DECISIONS = ("check", "trigger", "truncation", "continuation", "uncertainty", "rerank", "filter", "classifier",
             "selection", "choice", "note", "answer")


def _id(*parts: Any, bits: int = 64) -> int:
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=bits // 8).digest()
    return int.from_bytes(digest, "big") or 1


def trace_id_of(run_id: str) -> int:
    """A run's OpenTelemetry trace id: its run id when that is 32 hex digits (it is, as the store makes them)."""
    try:
        value = int(run_id, 16)
        if len(run_id) == 32 and value:
            return value
    except ValueError:
        pass
    return _id(run_id, bits=128)


def run_span_id(run_id: str) -> int:
    return _id(run_id, "run")


def _epoch_ns(trace: Trace) -> int:
    try:
        return int(datetime.fromisoformat(trace.created_at).timestamp() * 1e9)
    except ValueError:
        return 0


def _value(value: Any) -> Any:
    """An attribute value OpenTelemetry accepts: scalars as they are, lists of scalars, anything else as JSON."""
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
        return list(value)
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                          for v in value):
        return [float(v) for v in value]
    return json.dumps(value, ensure_ascii=False, default=str)


def _attributes(payload: dict[str, Any], prefix: str) -> dict[str, Any]:
    return {f"{prefix}.{k}": _value(v) for k, v in payload.items() if v is not None and k not in _BULK}


class _Ids:
    """Ids for the spans being started, set before each start (deterministic, see the module docstring)."""

    def __init__(self) -> None:
        self.trace_id = 1
        self.span_id = 1

    def generate_trace_id(self) -> int:
        return self.trace_id

    def generate_span_id(self) -> int:
        return self.span_id


class _Collected:
    """A span exporter that keeps what it is given (the spans are then sent or written in one go)."""

    def __init__(self) -> None:
        self.spans: list[Any] = []

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        self.spans.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 0) -> bool:
        return True


def build_spans(traces: Iterable[Trace], *, project: str = SERVICE, evaluation: str | None = None) -> list[Any]:
    """The finished OpenTelemetry spans (``ReadableSpan``) of every trace, in the OpenInference conventions."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import IdGenerator, SpanLimits, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    ids = _Ids()

    class Generator(IdGenerator):
        def generate_trace_id(self) -> int:
            return ids.generate_trace_id()

        def generate_span_id(self) -> int:
            return ids.generate_span_id()

    collected = _Collected()
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE,
                                                        "openinference.project.name": project}),
                              id_generator=Generator(),
                              # the SDK keeps 128 events and attributes per span by default: a long run has more
                              # decisions, a wide retrieval more documents, and none may be dropped silently
                              span_limits=SpanLimits(max_attributes=SpanLimits.UNSET, max_events=SpanLimits.UNSET,
                                                     max_span_attributes=SpanLimits.UNSET,
                                                     max_event_attributes=SpanLimits.UNSET))
    provider.add_span_processor(SimpleSpanProcessor(collected))
    tracer = provider.get_tracer("explorer.otel")
    for trace in traces:
        _trace_spans(tracer, ids, trace, evaluation)
    provider.shutdown()
    return collected.spans


def _trace_spans(tracer: Any, ids: _Ids, trace: Trace, evaluation: str | None) -> None:
    from openinference.semconv.trace import OpenInferenceSpanKindValues as Kind
    from openinference.semconv.trace import SpanAttributes as A
    from opentelemetry import trace as api
    from opentelemetry.trace import Link, SpanContext, Status, StatusCode, TraceFlags

    start = _epoch_ns(trace)
    last = max((e.t for e in trace.events), default=0.0)
    end = start + int(max(last, sum(trace.costs.wall_time.values())) * 1e9) + 1
    model = str((trace.model or {}).get("name") or "")
    gold_ids = set((trace.gold or {}).get("gold_passages") or [])
    attrs: dict[str, Any] = {
        A.OPENINFERENCE_SPAN_KIND: Kind.CHAIN.value, A.INPUT_VALUE: trace.question,
        A.OUTPUT_VALUE: trace.answer if trace.answer is not None else trace.output,
        A.METADATA: json.dumps({"method": trace.method, "variant": trace.variant, "config": trace.config,
                                "model": trace.model, "corpus": trace.corpus, "gold": trace.gold,
                                "costs": trace.costs.to_dict(), "status": trace.status, "fork": trace.fork,
                                "trace_version": trace.version}, ensure_ascii=False, default=str),
        A.TAG_TAGS: [trace.method, trace.variant] + ([evaluation] if evaluation else []),
        "explorer.run_id": trace.run_id, "explorer.method": trace.method, "explorer.variant": trace.variant,
        "explorer.status": trace.status, "explorer.output": trace.output,
        **{f"explorer.costs.{k}": v for k, v in trace.costs.to_dict().items() if isinstance(v, (int, float))},
    }
    if evaluation:
        attrs[A.SESSION_ID] = evaluation
    if (trace.gold or {}).get("answers"):
        attrs["explorer.gold.answers"] = [str(a) for a in trace.gold["answers"]]
    links = []
    if trace.fork and trace.fork.get("parent"):
        parent = str(trace.fork["parent"])
        attrs["explorer.fork.parent_run_id"] = parent
        attrs["explorer.fork"] = _value(trace.fork)
        links.append(Link(SpanContext(trace_id_of(parent), run_span_id(parent), is_remote=True,
                                      trace_flags=TraceFlags(TraceFlags.SAMPLED)),
                          {"explorer.link": "fork of", "explorer.run_id": parent}))
    ids.trace_id, ids.span_id = trace_id_of(trace.run_id), run_span_id(trace.run_id)
    root = tracer.start_span(f"{trace.method} run", attributes=attrs, start_time=start, links=links,
                             context=api.set_span_in_context(api.INVALID_SPAN))
    if trace.status not in ("complete", "running"):
        root.set_status(Status(StatusCode.ERROR, trace.error or trace.status))
    context = api.set_span_in_context(root)
    spans: dict[int, tuple[Any, int]] = {}  # event id -> (open span, its end time): generations, retrievals
    queries = {e.id: e for e in trace.events if e.kind == "query"}
    for event in trace.events:
        at = start + int(event.t * 1e9)
        began = max(start, at - int(float(event.payload.get("seconds") or 0.0) * 1e9))  # never before its run
        ids.span_id = _id(trace.run_id, event.id)
        if event.kind == "generation":
            spans[event.id] = _llm_span(tracer, context, event, model, trace, began), at
        elif event.kind == "retrieval":
            query = queries.get(event.payload.get("query"))
            spans[event.id] = _retriever_span(tracer, context, event, query, gold_ids, began), at
        elif event.kind != "query":  # a query is its retrieval span's input; everything else is a decision
            target = spans[_concerns(event)][0] if _concerns(event) in spans else root
            target.add_event(event.kind, attributes={"explorer.event_id": event.id, "explorer.step": event.step,
                                                     **_attributes(event.payload, event.kind)}, timestamp=at)
    for span, finished in spans.values():
        span.end(end_time=max(finished, span.start_time))
    root.end(end_time=max([end, *(finished for _, finished in spans.values())]))


def _concerns(event: Event) -> int | None:
    """The generation or retrieval event a decision is about (a check's span, a filter's retrieval...)."""
    p = event.payload
    for key in ("span", "retrieval", "generation"):
        value = p.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _llm_span(tracer: Any, context: Any, event: Event, model: str, trace: Trace, began: int) -> Any:
    from openinference.semconv.trace import OpenInferenceSpanKindValues as Kind
    from openinference.semconv.trace import SpanAttributes as A

    p = event.payload
    completion = len(p.get("tokens") or [])
    prompt_tokens = p.get("prompt_tokens")
    attrs: dict[str, Any] = {
        A.OPENINFERENCE_SPAN_KIND: Kind.LLM.value, A.LLM_MODEL_NAME: model,
        A.INPUT_VALUE: str(p.get("prompt") or ""), A.OUTPUT_VALUE: str(p.get("text") or ""),
        "llm.input_messages.0.message.role": "user", "llm.input_messages.0.message.content": str(p.get("prompt") or ""),
        "llm.output_messages.0.message.role": "assistant", "llm.output_messages.0.message.content": str(p.get("text")
                                                                                                         or ""),
        A.LLM_TOKEN_COUNT_COMPLETION: completion,
        A.LLM_INVOCATION_PARAMETERS: json.dumps({k: p[k] for k in ("max_new_tokens", "decoding") if k in p}),
        "explorer.event_id": event.id, "explorer.step": event.step, "explorer.purpose": str(p.get("purpose")),
        **_attributes({k: v for k, v in p.items() if k not in ("text", "purpose", "seconds")}, "explorer.generation"),
    }
    attrs.update(_token_signals(p.get("tokens") or []))
    if isinstance(prompt_tokens, int):
        attrs[A.LLM_TOKEN_COUNT_PROMPT] = prompt_tokens
        attrs[A.LLM_TOKEN_COUNT_TOTAL] = prompt_tokens + completion
    provider = (trace.model or {}).get("source")
    if provider:
        attrs["explorer.model.source"] = str(provider)
    return tracer.start_span(f"generate {p.get('purpose', '')}".strip(), context=context, attributes=attrs,
                             start_time=began)


def _token_signals(tokens: list[dict[str, Any]]) -> dict[str, Any]:
    """The span's tokens and each per-token signal as parallel lists (``explorer.signal.rind`` ...); a token
    without a value of a signal has NaN there (attribute lists hold one type and no nulls)."""
    if not tokens:
        return {}
    out: dict[str, Any] = {"explorer.tokens": [str(t.get("text", "")) for t in tokens]}
    names = sorted({name for t in tokens for name, v in (t.get("signals") or {}).items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool)})
    for name in names:
        values = [(t.get("signals") or {}).get(name) for t in tokens]
        out[f"explorer.signal.{name}"] = [float(v) if isinstance(v, (int, float)) and not isinstance(v, bool)
                                          else float("nan") for v in values]
    return out


def _retriever_span(tracer: Any, context: Any, event: Event, query: Event | None, gold: set[str], began: int) -> Any:
    from openinference.semconv.trace import DocumentAttributes as D
    from openinference.semconv.trace import OpenInferenceSpanKindValues as Kind
    from openinference.semconv.trace import SpanAttributes as A

    p = event.payload
    attrs: dict[str, Any] = {A.OPENINFERENCE_SPAN_KIND: Kind.RETRIEVER.value,
                             A.INPUT_VALUE: str(query.payload.get("text", "")) if query else "",
                             "explorer.event_id": event.id, "explorer.step": event.step,
                             **_attributes({k: v for k, v in p.items() if k not in ("query", "seconds")},
                                           "explorer.retrieval")}
    if query is not None:
        attrs.update(_attributes(query.payload, "explorer.query"))
        attrs["explorer.query.event_id"] = query.id
    hits = p.get("hits") or []
    for i, hit in enumerate(hits):
        base = f"{A.RETRIEVAL_DOCUMENTS}.{i}"
        attrs[f"{base}.{D.DOCUMENT_ID}"] = str(hit.get("id"))
        attrs[f"{base}.{D.DOCUMENT_CONTENT}"] = str(hit.get("text", ""))
        if isinstance(hit.get("score"), (int, float)):
            attrs[f"{base}.{D.DOCUMENT_SCORE}"] = float(hit["score"])
        attrs[f"{base}.{D.DOCUMENT_METADATA}"] = json.dumps(
            {"title": hit.get("title"), "rank": hit.get("rank", i + 1), "gold": hit.get("id") in gold},
            ensure_ascii=False)
    attrs["explorer.retrieval.gold_ids"] = [str(h.get("id")) for h in hits if h.get("id") in gold] or [""]
    attrs[A.OUTPUT_VALUE] = json.dumps([h.get("id") for h in hits])
    return tracer.start_span("retrieve", context=context, attributes=attrs, start_time=began)


# --- sending and writing ----------------------------------------------------------------------------


def otlp_endpoint(url: str) -> str:
    """The OTLP/HTTP traces address for what a user typed: a base URL gets ``/v1/traces``."""
    text = url.strip().rstrip("/")
    if not text.startswith(("http://", "https://")):
        raise ExplorerError(f"'{url}' is not an http(s) address", where="--otlp",
                            fix="give the collector's OTLP/HTTP address, e.g. http://localhost:6006/v1/traces "
                                "(Phoenix) or http://localhost:4318 (an OpenTelemetry collector)")
    return text if text.endswith("/v1/traces") else text + "/v1/traces"


def send(spans: Sequence[Any], url: str, *, timeout: float = 10.0, headers: dict[str, str] | None = None) -> int:
    """Send the spans over OTLP/HTTP (protobuf) in batches; returns how many were sent, or raises with the reason."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    endpoint = otlp_endpoint(url)
    exporter = OTLPSpanExporter(endpoint=endpoint, timeout=timeout, headers=headers)
    try:
        for first in range(0, len(spans), 512):
            if exporter.export(list(spans[first:first + 512])) is not SpanExportResult.SUCCESS:
                raise ExplorerError(f"the collector at {endpoint} did not accept the spans",
                                    fix="check that an OTLP/HTTP collector (Phoenix, an OpenTelemetry collector) "
                                        "listens there, or write a file with --otlp-json FILE")
    finally:
        exporter.shutdown()
    return len(spans)


def otlp_request(spans: Sequence[Any]) -> Any:
    """The ``ExportTraceServiceRequest`` protobuf message the spans make (what OTLP/HTTP sends)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return encode_spans(list(spans))


def otlp_json(spans: Sequence[Any]) -> str:
    """The OTLP/JSON encoding of the spans (ids in hex, enums as numbers), as a collector's file receiver reads."""
    from google.protobuf.json_format import MessageToDict

    data = MessageToDict(otlp_request(spans), use_integers_for_enums=True)

    def hexed(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: (base64.b64decode(v).hex() if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str)
                        else hexed(v)) for k, v in node.items()}
        if isinstance(node, list):
            return [hexed(v) for v in node]
        return node

    return json.dumps(hexed(data), ensure_ascii=False)
