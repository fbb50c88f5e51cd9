"""What the web server refuses before Gradio sees a request: uploads it has no use for, API
schemas, and password guessing.

* Uploads (``/gradio_api/upload`` and the other routes that take files) are refused unless the
  app has a component that takes a file: :func:`needs_uploads` decides, and ``launch(uploads=)``
  can say so explicitly. This is the one place that policy lives.
* ``/openapi.json``, ``/docs`` and ``/redoc`` list every route of the server: closed. (Gradio's
  own API page for ``gradio_client`` stays, behind the login when there is one.)
* With a login, each client address gets :data:`FREE_ATTEMPTS` wrong passwords; after that it
  must wait before the next try, twice as long after each further failure (1 s, 2 s, 4 s, ...
  up to five minutes), and gets ``429 Too Many Requests`` with ``Retry-After`` meanwhile. A
  correct password resets the count. Behind a reverse proxy every client shares the proxy's
  address, so the backoff then applies to all of them together, never to none.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

FREE_ATTEMPTS = 5
BASE_DELAY = 1.0
MAX_DELAY = 300.0
#: The largest file an upload may carry when uploads are on.
MAX_UPLOAD = "200mb"

UPLOAD_ROUTES = ("/gradio_api/upload", "/gradio_api/process_recording", "/upload")
UPLOAD_PREFIXES = ("/gradio_api/stream/",)  # streamed media inputs (webcam, microphone)
SCHEMA_ROUTES = ("/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc", "/gradio_api/docs")
LOGIN_ROUTES = ("/login", "/gradio_api/login")

#: Components through which a browser sends files to the server.
UPLOAD_COMPONENTS = ("File", "Files", "UploadButton", "Image", "ImageEditor", "Sketchpad", "Paint", "Audio", "Video",
                     "Model3D", "MultimodalTextbox", "Gallery", "ImageSlider", "SimpleImage")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def needs_uploads(blocks: Any) -> bool:
    """True when the app has a file-taking component a user can use (an interactive File, Image, ...)."""
    for block in getattr(blocks, "blocks", {}).values():
        if type(block).__name__ in UPLOAD_COMPONENTS and getattr(block, "interactive", None) is not False:
            return True
    return False


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

    def failed(self, client: str) -> float:
        """Count a wrong password; returns the wait it starts (0 while attempts are free)."""
        now = self.clock()
        with self._lock:
            failures = self._clients.get(client, (0, 0.0))[0] + 1
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


def _path(scope: Scope) -> str:
    path = scope.get("path", "")
    root = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root):]
    return path.rstrip("/") or "/"


async def _refuse(send: Send, status: int, detail: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


class Guard:
    """ASGI middleware applying :class:`GuardSettings` in front of the Gradio app."""

    def __init__(self, app: Callable[..., Awaitable[None]], settings: GuardSettings,
                 throttle: LoginThrottle | None = None) -> None:
        self.app = app
        self.settings = settings
        self.throttle = throttle or LoginThrottle()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        path, method = _path(scope), scope.get("method", "GET")
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
        await self.app(scope, receive, send)

    async def _login(self, scope: Scope, receive: Receive, send: Send) -> None:
        client = (scope.get("client") or ("unknown", 0))[0]
        wait = self.throttle.wait(client)
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
        elif status and status[0] in (400, 401, 403):
            self.throttle.failed(client)
