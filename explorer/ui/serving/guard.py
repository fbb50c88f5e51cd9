"""What the web server refuses before Gradio sees a request: uploads it has no use for, API
schemas, and password guessing.

* Uploads (``/gradio_api/upload`` and the other routes that take files) are refused unless the
  app has a component that takes a file: :func:`needs_uploads` decides, and ``launch(uploads=)``
  can say so explicitly. When uploads are on, a file larger than
  :data:`~explorer.ui.serving.uploads.MAX_UPLOAD_BYTES` is refused, and when every file-taking component
  names its file types, so is a file whose name ends otherwise, as it streams in (Gradio itself
  checks the type only when the file is used, after it is already stored); the body is read with
  the multipart parser Gradio stores uploads with (:mod:`explorer.ui.serving.uploads`). This is the one
  place that policy lives.
* ``/openapi.json``, ``/docs`` and ``/redoc`` list every route of the server: closed. (Gradio's
  own API page for ``gradio_client`` stays, behind the login when there is one.)
* Gradio answers every error of its synchronous API routes (``/gradio_api/run/NAME``,
  ``/gradio_api/api/NAME``) with 500. The endpoints title their errors (:data:`BAD_REQUEST`,
  :data:`NOT_FOUND`), and the guard gives those answers the status they mean: 400 and 404; only a
  server fault stays 500.
* With a login, nothing answers before signing in but the login page itself: the page (``/``,
  which then holds only the login form: the API description Gradio embeds in it is taken out), the
  compiled Gradio frontend and fonts it loads
  (``/assets/...``, ``/static/...``, the same files in every Gradio install), the stock theme's
  stylesheet (``/theme.css``) and the form's target (``POST /login``). Every other route, present
  or added by a later Gradio, answers 401 until the browser holds a session (:data:`PUBLIC_ROUTES`,
  :func:`signed_in`). Gradio's own start-up call (``/gradio_api/startup-events``, made once by
  ``launch``) passes until the app has started.
* With a login, each client address gets :data:`FREE_ATTEMPTS` wrong passwords; after that it
  must wait before the next try, twice as long after each further failure (1 s, 2 s, 4 s, ...
  up to five minutes), and gets ``429 Too Many Requests`` with ``Retry-After`` meanwhile. A
  correct password resets the count. Each try is counted the moment it is let through, before it
  is judged (:meth:`LoginThrottle.attempt`), so logins sent together get no more tries than
  logins sent one after another.
* The client address is the connection's peer. ``X-Forwarded-For`` (and the other forwarding
  headers) count only when the peer is a proxy the operator named (:class:`ForwardedTrust`,
  ``--forwarded-allow-ips``); from anyone else they are dropped, so a client cannot pick its own
  throttle count by sending a new address with each guess. Behind an unnamed reverse proxy every
  client shares the proxy's address, so the backoff then applies to all of them together, never
  to none.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from explorer.ui.api.call_defaults import (
    MAX_PADDED_BODY,
    call_problem,
    endpoint_of,
    pad,
    read_body,
    too_long,
    with_body,
)
from explorer.ui.serving.forwarding import ForwardedTrust, apply_forwarding
from explorer.ui.serving.uploads import FRAMING_BYTES, UploadCheck, UploadRefused, too_large

FREE_ATTEMPTS = 5
BASE_DELAY = 1.0
MAX_DELAY = 300.0

#: The longest query string read (a link of the page names a few run ids; httpx, inside Gradio, fails past 64 kB).
MAX_QUERY = 8192
#: The most of a refused upload read (and dropped) before its answer; past it the connection is closed.
DRAIN_LIMIT = 64 * 1024 * 1024

UPLOAD_ROUTES = ("/gradio_api/upload", "/gradio_api/process_recording", "/upload")
UPLOAD_PREFIXES = ("/gradio_api/stream/",)  # streamed media inputs (webcam, microphone)
SCHEMA_ROUTES = ("/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc", "/gradio_api/docs")
LOGIN_ROUTES = ("/login", "/gradio_api/login")
SYNC_API_PREFIXES = ("/gradio_api/run/", "/gradio_api/api/")
#: Under a login, the routes that answer before signing in (the login page and what it loads), by method.
PUBLIC_ROUTES = {"/": ("GET", "HEAD"), "/theme.css": ("GET",)}
PUBLIC_PREFIXES = ("/assets/", "/static/")
STARTUP_ROUTE = "/gradio_api/startup-events"
#: Where Gradio's page template embeds the API description.
API_INFO_SCRIPT = b"<script>window.gradio_api_info = "

#: Titles of the API's error answers, and the HTTP status each stands for on the synchronous routes.
BAD_REQUEST, NOT_FOUND, SERVER_ERROR = "Invalid request", "Not found", "Server error"
ERROR_STATUS = {BAD_REQUEST: 400, NOT_FOUND: 404, SERVER_ERROR: 500}

#: Components through which a browser sends files to the server.
UPLOAD_COMPONENTS = ("File", "Files", "UploadButton", "Image", "ImageEditor", "Sketchpad", "Paint", "Audio", "Video",
                     "Model3D", "MultimodalTextbox", "Gallery", "ImageSlider", "SimpleImage")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def _upload_blocks(blocks: Any) -> list[Any]:
    return [block for block in getattr(blocks, "blocks", {}).values()
            if type(block).__name__ in UPLOAD_COMPONENTS and getattr(block, "interactive", None) is not False]


def needs_uploads(blocks: Any) -> bool:
    """True when the app has a file-taking component a user can use (an interactive File, Image, ...)."""
    return bool(_upload_blocks(blocks))


def upload_suffixes(blocks: Any) -> tuple[str, ...] | None:
    """The file-name endings the app's file inputs accept (lower case), or None when any input takes
    any file (no ``file_types``, or a category such as ``"image"`` that names no ending)."""
    suffixes: list[str] = []
    for block in _upload_blocks(blocks):
        types = getattr(block, "file_types", None)
        if not types or any(not str(kind).startswith(".") for kind in types):
            return None
        suffixes.extend(str(kind).lower() for kind in types)
    return tuple(dict.fromkeys(suffixes)) or None


class LoginThrottle:
    """Failed logins per client address, and how long each must wait before the next attempt."""

    def __init__(self, free: int = FREE_ATTEMPTS, base: float = BASE_DELAY, cap: float = MAX_DELAY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.free, self.base, self.cap, self.clock = free, base, cap, clock
        self._lock = threading.Lock()
        self._clients: dict[str, tuple[int, float]] = {}  # address -> (failures, blocked until)

    def wait(self, client: str) -> float:
        """Seconds before ``client`` may try again (0: now)."""
        with self._lock:
            _, until = self._clients.get(client, (0, 0.0))
        return max(0.0, until - self.clock())

    def attempt(self, client: str) -> float:
        """A login about to be judged: 0 when ``client`` may try now, and then the try is already counted
        as a failure (a correct password clears it, :meth:`succeeded`); else the seconds to wait. Checking
        and counting under one lock is what holds against a burst: logins sent together cannot all pass
        the check before the first of their failures is counted."""
        now = self.clock()
        with self._lock:
            failures, until = self._clients.get(client, (0, 0.0))
            if until > now:
                return until - now
            self._count(client, failures + 1, now)
        return 0.0

    def failed(self, client: str) -> float:
        """Count a wrong password; returns the wait it starts (0 while attempts are free)."""
        now = self.clock()
        with self._lock:
            return self._count(client, self._clients.get(client, (0, 0.0))[0] + 1, now)

    def _count(self, client: str, failures: int, now: float) -> float:
        delay = 0.0 if failures < self.free else min(self.cap, self.base * 2 ** (failures - self.free))
        self._clients[client] = (failures, now + delay)
        if len(self._clients) > 10_000:  # forget quiet addresses rather than grow without bound
            self._clients = {k: v for k, v in self._clients.items() if v[1] > now - 3600}
        return delay

    def succeeded(self, client: str) -> None:
        with self._lock:
            self._clients.pop(client, None)


@dataclass
class GuardSettings:
    uploads: bool = False
    login: bool = False
    #: With uploads on: the file-name endings accepted (None: any).
    upload_suffixes: tuple[str, ...] | None = None
    #: Proxies whose forwarding headers name the client (none by default).
    forwarded: ForwardedTrust = ForwardedTrust()
    #: Named endpoints' parameter defaults: a plain HTTP call that leaves optional values out gets them
    #: (:mod:`explorer.ui.api.call_defaults`).
    api_defaults: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    #: Their parameter names, for the messages that refuse a malformed call.
    api_names: dict[str, tuple[str, ...]] = field(default_factory=dict)


def _path(scope: Scope) -> str:
    path = scope.get("path", "")
    root = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root):]
    return path.rstrip("/") or "/"


async def _refuse(send: Send, status: int, detail: str, headers: list[tuple[bytes, bytes]] | None = None,
                  text: bool = False) -> None:
    """Answer ``detail`` as JSON (``{"detail": ...}``), or as plain text for a page a person opened (``text``)."""
    if not text:
        await _answer(send, status, {"detail": detail}, headers)
        return
    body = detail.encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode()), *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


async def _answer(send: Send, status: int, answer: dict[str, Any],
                  headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps(answer).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


async def _drain(receive: Receive, limit: int = DRAIN_LIMIT) -> None:
    """Read and drop the rest of a refused body (up to ``limit`` bytes), so that a client that sends its
    whole body before it reads the answer gets the answer instead of a broken connection."""
    read = 0
    while read <= limit:
        message = await receive()
        if message.get("type") != "http.request":
            return
        read += len(message.get("body", b""))
        if not message.get("more_body"):
            return


def error_status(send: Send) -> Send:
    """``send`` for a synchronous API call: a 500 answer is held until its body is read, then sent with
    the status its error title stands for (:data:`ERROR_STATUS`)."""
    held: list[dict[str, Any]] = []
    body: list[bytes] = []

    async def relay(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start" and message.get("status") == 500:
            held.append(message)
            return
        if not held or message["type"] != "http.response.body":
            await send(message)
            return
        body.append(message.get("body", b""))
        if message.get("more_body"):
            return
        whole = b"".join(body)
        try:
            answer = json.loads(whole)
        except ValueError:
            answer = None
        title = answer.get("title") if isinstance(answer, dict) else None
        await send({**held[0], "status": ERROR_STATUS.get(str(title), 500)})
        await send({"type": "http.response.body", "body": whole})

    return relay


def login_page(send: Send) -> Send:
    """``send`` for the page before signing in: Gradio renders the login form with the whole API description
    (every endpoint, parameter and docstring) in it; the page is held and sent without it (the description is
    served, behind the login, once signed in)."""
    held: list[dict[str, Any]] = []
    body: list[bytes] = []

    async def relay(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            held.append(message)
            return
        if message["type"] != "http.response.body":
            await send(message)
            return
        body.append(message.get("body", b""))
        if message.get("more_body"):
            return
        page = without_api_info(b"".join(body))
        headers = [(k, v) for k, v in held[0].get("headers", []) if k != b"content-length"]
        await send({**held[0], "headers": [*headers, (b"content-length", str(len(page)).encode())]})
        await send({"type": "http.response.body", "body": page})

    return relay


def without_api_info(page: bytes) -> bytes:
    """A Gradio page with its embedded API description replaced by null (its frontend then asks the server)."""
    start = page.find(API_INFO_SCRIPT)
    if start < 0:
        return page
    end = page.find(b";</script>", start)
    return page if end < 0 else page[:start] + API_INFO_SCRIPT + b"null" + page[end:]


def public(path: str, method: str) -> bool:
    """Whether a request may be answered without a session when the app has a login."""
    if path in PUBLIC_ROUTES:
        return method in PUBLIC_ROUTES[path]
    if path in LOGIN_ROUTES:
        return method == "POST"
    return method in ("GET", "HEAD") and path.startswith(PUBLIC_PREFIXES)


def signed_in(scope: Scope) -> bool:
    """Whether the request carries a session cookie the Gradio app issued at a login (fails closed)."""
    from starlette.requests import cookie_parser

    app = scope.get("app")
    tokens, cookie_id = getattr(app, "tokens", None), getattr(app, "cookie_id", None)
    if not isinstance(tokens, dict) or not cookie_id:
        return False
    header = b"; ".join(v for k, v in scope.get("headers") or [] if k == b"cookie").decode("latin-1")
    cookies = cookie_parser(header) if header else {}
    token = cookies.get(f"access-token-{cookie_id}") or cookies.get(f"access-token-unsecure-{cookie_id}")
    return token is not None and tokens.get(token) is not None


def _starting(scope: Scope, path: str) -> bool:
    """Gradio's launch calls its start-up route once itself; until then it must pass."""
    return path == STARTUP_ROUTE and getattr(scope.get("app"), "startup_events_triggered", True) is False


class Guard:
    """ASGI middleware applying :class:`GuardSettings` in front of the Gradio app."""

    def __init__(self, app: Callable[..., Awaitable[None]], settings: GuardSettings,
                 throttle: LoginThrottle | None = None) -> None:
        self.app = app
        self.settings = settings
        self.throttle = throttle or LoginThrottle()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        scope = apply_forwarding(scope, self.settings.forwarded)
        path, method = _path(scope), scope.get("method", "GET")
        if scope.get("type") != "http":
            if self.settings.login and not signed_in(scope):
                await send({"type": "websocket.close", "code": 1008})
                return
            await self.app(scope, receive, send)
            return
        if len(scope.get("query_string") or b"") > MAX_QUERY:
            await _refuse(send, 414, f"address: the query after '?' is {len(scope['query_string']):,} characters, "
                                     f"more than the {MAX_QUERY:,} this app reads Fix: a link names at most a few "
                                     "run ids (?run=ID, ?compare=ID1,ID2); copy it again from the page",
                          text=path == "/")
            return
        if path in SCHEMA_ROUTES:
            await _refuse(send, 404, "not found")
            return
        if method == "POST" and not self.settings.uploads and (
                path in UPLOAD_ROUTES or path.startswith(UPLOAD_PREFIXES)):
            await _refuse(send, 403, "this app takes no file uploads")
            return
        if method == "POST" and self.settings.login and path in LOGIN_ROUTES:
            await self._login(scope, receive, send)
            return
        if self.settings.login and not public(path, method) and not _starting(scope, path) and not signed_in(scope):
            await _refuse(send, 401, "sign in first: this server requires a login (open its page to sign in)")
            return
        if self.settings.login and path == "/" and method == "GET" and not signed_in(scope):
            headers = [(k, v) for k, v in scope.get("headers") or [] if k != b"accept-encoding"]  # a body to edit
            await self.app({**scope, "headers": headers}, receive, login_page(send))
            return
        if method == "POST" and self.settings.uploads and (path in UPLOAD_ROUTES or path.startswith(UPLOAD_PREFIXES)):
            await self._upload(scope, receive, send, self.settings.upload_suffixes)
            return
        endpoint = endpoint_of(path) if method == "POST" else None
        if endpoint in self.settings.api_defaults:
            defaults = self.settings.api_defaults[endpoint]
            body, whole, receive = await read_body(receive)
            problem = call_problem(body, endpoint, self.settings.api_names.get(endpoint, ()), defaults) if whole \
                else too_long(endpoint) if len(body) > MAX_PADDED_BODY else None
            if problem is not None and not whole:
                await _drain(receive)
                await _answer(send, 413, {"title": BAD_REQUEST, "error": problem.message})
                return
            if problem is not None:
                await _answer(send, 400, {"title": BAD_REQUEST, "error": problem.message})
                return
            scope, receive = with_body(scope, receive, pad(body, defaults) if whole else None)
        if method == "POST" and path.startswith(SYNC_API_PREFIXES):
            await self.app(scope, receive, error_status(send))
            return
        await self.app(scope, receive, send)

    async def _upload(self, scope: Scope, receive: Receive, send: Send, suffixes: tuple[str, ...] | None) -> None:
        """Pass the upload through while reading its parts (:class:`~explorer.ui.serving.uploads.UploadCheck`); at
        the first file it refuses (another ending, too large, unreadable), tell the app the client left (so
        it stops reading and drops the partial file) and answer with the reason ourselves."""
        refused: list[UploadRefused] = []
        started = False
        headers = dict(scope.get("headers") or [])
        try:
            check = UploadCheck(headers.get(b"content-type", b""), suffixes)
            length = int(headers.get(b"content-length", b"0") or 0)
        except UploadRefused as exc:
            await _refuse(send, exc.status, exc.message)
            return
        except ValueError:
            length = 0
        if length > check.limit + FRAMING_BYTES:  # refused before a byte of it is stored
            problem = too_large(check.limit)
            await _drain(receive)
            await _refuse(send, problem.status, problem.message)
            return

        ended = False  # the whole body has been received

        async def watched() -> dict[str, Any]:
            nonlocal ended
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            ended = message.get("type") != "http.request" or not message.get("more_body")
            if message.get("type") == "http.request":
                try:
                    check.feed(message.get("body", b""))
                except UploadRefused as exc:
                    refused.append(exc)
                    return {"type": "http.disconnect"}
            return message

        async def held(message: dict[str, Any]) -> None:
            nonlocal started
            if refused:
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, watched, held)
        except Exception:
            if not refused:
                raise
        if refused and not started:
            if not ended:
                await _drain(receive)
            await _refuse(send, refused[0].status, refused[0].message)

    async def _login(self, scope: Scope, receive: Receive, send: Send) -> None:
        client = (scope.get("client") or ("unknown", 0))[0]
        wait = self.throttle.attempt(client)
        if wait > 0:
            seconds = math.ceil(wait)
            await _refuse(send, 429, f"too many failed logins from this address; try again in {seconds} s",
                          [(b"retry-after", str(seconds).encode())])
            return
        status: list[int] = []

        async def watch(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
            await send(message)

        await self.app(scope, receive, watch)
        if status and status[0] < 300:
            self.throttle.succeeded(client)
