"""Optional API arguments stay optional over plain HTTP.

``gradio_client`` fills in a named endpoint's optional arguments before it sends a call, but a
script that posts JSON itself (``curl``, ``requests``) sends only what it gives, and Gradio refuses
a call with fewer values than the endpoint has parameters with an empty error (``{"error":
null}``). So an endpoint that gained an optional parameter (``/run``'s ``idempotency_key``) would
break every such script, and a script could never leave the trailing settings out. The guard
(:mod:`explorer.ui.serving.guard`) pads such calls with the endpoint's declared defaults before Gradio
reads them.

The same reading refuses what Gradio would answer with a bare 500 (too few values: a traceback in
the log) or a generic 400/422 (a body that is not UTF-8, not JSON, nested too deeply, not an
object, or whose ``data`` is not a list), each with what is wrong, where, and how to fix it
(:func:`call_problem`), and a body larger than :data:`MAX_PADDED_BODY` is refused (:func:`too_long`).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable
from typing import Any

from explorer.errors import ExplorerError, NestedTooDeeply, json_problem, parse_json

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]

#: Routes that take a named endpoint's values as ``{"data": [...]}``.
CALL_PREFIXES = ("/gradio_api/call/", "/gradio_api/run/", "/gradio_api/api/")
#: The largest call body read; a larger one is refused (no public endpoint takes that much).
MAX_PADDED_BODY = 1 << 20


def _api_params(blocks: Any) -> dict[str, list[inspect.Parameter]]:
    """Each named endpoint's parameters, in order (those its function takes from the call's ``data``)."""
    found: dict[str, list[inspect.Parameter]] = {}
    for fn in getattr(blocks, "fns", {}).values():
        name, target = getattr(fn, "api_name", None), getattr(fn, "fn", None)
        if not name or target is None:
            continue
        try:
            params = [p for p in inspect.signature(target).parameters.values()
                      if p.name != "request" and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        except (TypeError, ValueError):
            continue
        if len(params) == len(getattr(fn, "inputs", ()) or ()):
            found[str(name)] = params
    return found


def api_defaults(blocks: Any) -> dict[str, tuple[Any, ...]]:
    """Each named endpoint's parameter defaults, in order (``inspect.Parameter.empty`` where a value is required)."""
    return {name: tuple(p.default for p in params) for name, params in _api_params(blocks).items()}


def api_names(blocks: Any) -> dict[str, tuple[str, ...]]:
    """Each named endpoint's parameter names, in order (for the messages of :func:`call_problem`)."""
    return {name: tuple(p.name for p in params) for name, params in _api_params(blocks).items()}


def call_problem(body: bytes, endpoint: str, names: tuple[str, ...], defaults: tuple[Any, ...]) -> ExplorerError | None:
    """What is wrong with a call's whole ``body`` before Gradio reads it, or None when Gradio can take it."""
    values = ", ".join(names)
    example = '{"data": [' + ", ".join(f'"{n.upper()}"' for n, d in zip(names, defaults, strict=True)
                                       if d is inspect.Parameter.empty) + "]}"
    shape = f"send a JSON object whose data lists /{endpoint}'s values in order ({values}), e.g. {example}"
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return ExplorerError(f"the body is not UTF-8 text (byte 0x{body[exc.start]:02X} at byte {exc.start + 1})",
                             where="request body", fix="encode the JSON as UTF-8 (JSON libraries do by default)")
    try:
        payload = parse_json(text)
    except NestedTooDeeply:
        return ExplorerError("the body's arrays or objects are nested too deeply to read", where="request body",
                             fix=shape)
    except json.JSONDecodeError as exc:
        return ExplorerError(f"the body is not valid JSON ({json_problem(exc)})", where="request body", fix=shape)
    if not isinstance(payload, dict):
        return ExplorerError(f"the body is a JSON {_kind(payload)}, not an object", where="request body", fix=shape)
    data = payload.get("data")
    if not isinstance(data, list):
        got = "missing" if "data" not in payload else f"a JSON {_kind(data)}, not a list"
        return ExplorerError(f"data is {got}", where="request body", fix=shape)
    required = sum(1 for d in defaults if d is inspect.Parameter.empty)
    if len(data) < required or len(data) > len(names):
        takes = f"{required} to {len(names)}" if required != len(names) else str(len(names))
        return ExplorerError(f"/{endpoint} takes {takes} value(s) ({values}), the call sent {len(data)}",
                             where="data", fix=shape)
    return None


def too_long(endpoint: str) -> ExplorerError:
    return ExplorerError(f"the call is larger than {MAX_PADDED_BODY // (1 << 20)} MB; no value of /{endpoint} needs "
                         "that much", where="request body",
                         fix="send shorter values (a question is a sentence or two, a run id 32 characters)")


def _kind(value: Any) -> str:
    return {dict: "object", list: "list", str: "string", bool: "true/false", type(None): "null"}.get(
        type(value), "number")


def endpoint_of(path: str) -> str | None:
    """The endpoint a call route names (``/gradio_api/call/run`` -> ``run``), or None for other routes."""
    for prefix in CALL_PREFIXES:
        if path.startswith(prefix):
            name = path[len(prefix):].strip("/")
            return name if name and "/" not in name else None
    return None


def pad(body: bytes, defaults: tuple[Any, ...]) -> bytes | None:
    """``body`` with its ``data`` list completed from ``defaults``, or None when there is nothing to complete
    (not a JSON object with a list, already complete, or a missing value that has no default)."""
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):  # the endpoint reports bad JSON in its own words
        return None
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list) or len(data) >= len(defaults):
        return None
    missing = defaults[len(data):]
    if any(value is inspect.Parameter.empty for value in missing):
        return None
    payload["data"] = [*data, *missing]
    return json.dumps(payload).encode()


async def read_body(receive: Receive, limit: int = MAX_PADDED_BODY) -> tuple[bytes, bool, Receive]:
    """A request's body read up to ``limit`` bytes: (what was read, whether that is the whole body, a
    ``receive`` that hands the app the same messages again and then the rest of the request)."""
    chunks: list[bytes] = []
    size = 0
    whole = False
    ended: dict[str, Any] | None = None
    while True:
        message = await receive()
        if message.get("type") != "http.request":
            ended = message
            break
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        if not message.get("more_body"):
            whole = True
            break
        if size > limit:
            break
    body = b"".join(chunks)
    replay: list[dict[str, Any]] = [{"type": "http.request", "body": body, "more_body": not whole and ended is None}]
    if ended is not None:
        replay.append(ended)

    async def receive_again() -> dict[str, Any]:
        return replay.pop(0) if replay else await receive()

    return body, whole and size <= limit, receive_again


def with_body(scope: Scope, receive: Receive, better: bytes | None) -> tuple[Scope, Receive]:
    """The request as the app gets it from :func:`read_body`'s ``receive``: unchanged, or with ``better`` in place
    of the body it read whole."""
    if better is None:
        return scope, receive
    headers = [(k, v) for k, v in scope.get("headers") or [] if k != b"content-length"]
    sent = False

    async def receive_better() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            await receive()  # the original body, already read whole
            return {"type": "http.request", "body": better, "more_body": False}
        return await receive()

    return {**scope, "headers": [*headers, (b"content-length", str(len(better)).encode())]}, receive_better
