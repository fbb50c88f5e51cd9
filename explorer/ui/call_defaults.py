"""Optional API arguments stay optional over plain HTTP.

``gradio_client`` fills in a named endpoint's optional arguments before it sends a call, but a
script that posts JSON itself (``curl``, ``requests``) sends only what it gives, and Gradio refuses
a call with fewer values than the endpoint has parameters with an empty error (``{"error":
null}``). So an endpoint that gained an optional parameter (``/run``'s ``idempotency_key``) would
break every such script, and a script could never leave the trailing settings out. The guard
(:mod:`explorer.ui.guard`) pads such calls with the endpoint's declared defaults before Gradio
reads them; a call that leaves out a parameter without a default still gets Gradio's refusal.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable
from typing import Any

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]

#: Routes that take a named endpoint's values as ``{"data": [...]}``.
CALL_PREFIXES = ("/gradio_api/call/", "/gradio_api/run/", "/gradio_api/api/")
#: A call body larger than this is passed on unread (no public endpoint takes that much).
MAX_PADDED_BODY = 1 << 20


def api_defaults(blocks: Any) -> dict[str, tuple[Any, ...]]:
    """Each named endpoint's parameter defaults, in order (``inspect.Parameter.empty`` where a value is required)."""
    found: dict[str, tuple[Any, ...]] = {}
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
            found[str(name)] = tuple(p.default for p in params)
    return found


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


async def padded(scope: Scope, receive: Receive, defaults: tuple[Any, ...]) -> tuple[Scope, Receive]:
    """Read a call's body and, where values are missing, hand the app the padded body instead."""
    chunks: list[bytes] = []
    size = 0
    ended: dict[str, Any] | None = None
    while True:
        message = await receive()
        if message.get("type") != "http.request":
            ended = message
            break
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        if not message.get("more_body") or size > MAX_PADDED_BODY:
            break
    body = b"".join(chunks)
    complete = ended is None and size <= MAX_PADDED_BODY
    better = pad(body, defaults) if complete else None
    if better is not None:
        body = better
        headers = [(k, v) for k, v in scope.get("headers") or [] if k != b"content-length"]
        scope = {**scope, "headers": [*headers, (b"content-length", str(len(body)).encode())]}
    replay: list[dict[str, Any]] = [{"type": "http.request", "body": body,
                                     "more_body": not complete and ended is None}]
    if ended is not None:
        replay.append(ended)

    async def receive_again() -> dict[str, Any]:
        return replay.pop(0) if replay else await receive()

    return scope, receive_again
