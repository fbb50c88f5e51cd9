"""A local stand-in for the Hugging Face hub (and for a plain download host), for fetching without the internet.

A real HTTP server on 127.0.0.1, in a thread, answering the requests huggingface_hub makes, the way
the hub answers them:

- ``HEAD|GET /datasets/{repo}/resolve/{revision}/{path}``: a small file is served directly with
  ``ETag`` = its git blob SHA-1, ``Content-Length`` and ``X-Repo-Commit``; a large (LFS) file
  answers ``302`` to its CDN address (another host name) with ``X-Linked-Etag`` = the SHA-256 of its bytes,
  ``X-Linked-Size`` and ``X-Repo-Commit``; a missing path answers ``404`` with
  ``X-Error-Code: EntryNotFound``;
- ``GET /cdn/{sha256}`` and ``GET /files/{name}`` (a plain host, S3-style MD5 ``ETag``) serve the
  bytes with ``Range`` support (``206`` and ``Content-Range``).

Faults a real network has are switched on per file: ``corrupt`` serves other bytes under the
stated checksum; ``hang_after`` sends that many bytes and then goes silent until released (a
stalled connection, for interrupting a download mid-way). Every request is logged with its
``Range`` header, so tests can see a download resume.
"""

from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class Served:
    data: bytes
    lfs: bool = False
    corrupt: bytes | None = None
    hang_after: int | None = None
    etag: str | None = None  # a plain host's ETag; None: the MD5 of the bytes (an S3 single-part upload)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def git_sha1(self) -> str:
        return hashlib.sha1(f"blob {len(self.data)}\0".encode() + self.data).hexdigest()


@dataclass
class HubStandIn:
    """Files by repository path (``repo/path``) and by plain name; start() serves them."""

    files: dict[str, Served] = field(default_factory=dict)
    plain: dict[str, Served] = field(default_factory=dict)
    log: list[tuple[str, str, str | None]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    stalled: threading.Event = field(default_factory=threading.Event)

    def start(self) -> HubStandIn:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def do_HEAD(self) -> None:
                hub.answer(self, body=False)

            def do_GET(self) -> None:
                hub.answer(self, body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def cdn(self) -> str:
        """The same server under another host name, as the hub's CDN is another host (a redirect there is not
        followed by the metadata request, so the hub's own headers are read from the redirect)."""
        return f"http://localhost:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def by_sha(self, sha: str) -> Served | None:
        return next((f for f in self.files.values() if f.lfs and f.sha256 == sha), None)

    def requests(self, method: str | None = None) -> list[tuple[str, str, str | None]]:
        return [r for r in self.log if method is None or r[0] == method]

    # --- answering ------------------------------------------------------------------------------

    def answer(self, handler: BaseHTTPRequestHandler, *, body: bool) -> None:
        path = handler.path.split("?", 1)[0]
        self.log.append((handler.command, path, handler.headers.get("Range")))
        resolve = re.fullmatch(r"/datasets/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if resolve:
            repo, _, rel = resolve.groups()
            served = self.files.get(f"{repo}/{rel}")
            if served is None:
                self._status(handler, 404, {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": COMMIT})
                return
            if served.lfs:
                self._status(handler, 302, {"Location": f"{self.cdn}/cdn/{served.sha256}", "X-Repo-Commit": COMMIT,
                                            "X-Linked-Etag": f'"{served.sha256}"',
                                            "X-Linked-Size": str(len(served.data)), "ETag": f'"{served.git_sha1}"'})
                return
            self._bytes(handler, served, {"ETag": f'"{served.git_sha1}"', "X-Repo-Commit": COMMIT}, body)
            return
        cdn = re.fullmatch(r"/cdn/([0-9a-f]{64})", path)
        if cdn and (served := self.by_sha(cdn.group(1))) is not None:
            self._bytes(handler, served, {"ETag": f'"{served.sha256}"'}, body)
            return
        plain = re.fullmatch(r"/files/(.+)", path)
        if plain and (served := self.plain.get(plain.group(1))) is not None:
            etag = served.etag if served.etag is not None else hashlib.md5(served.data).hexdigest()
            self._bytes(handler, served, {"ETag": f'"{etag}"'} if etag else {}, body)
            return
        self._status(handler, 404, {})

    def _status(self, handler: BaseHTTPRequestHandler, code: int, headers: dict[str, str]) -> None:
        handler.send_response(code)
        for key, value in headers.items():
            handler.send_header(key, value)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    def _bytes(self, handler: BaseHTTPRequestHandler, served: Served, headers: dict[str, str], body: bool) -> None:
        data = served.corrupt if served.corrupt is not None else served.data
        start = 0
        wanted = re.fullmatch(r"bytes=(\d+)-", handler.headers.get("Range") or "")
        if wanted:
            start = int(wanted.group(1))
            if start >= len(data):
                self._status(handler, 416, {"Content-Range": f"bytes */{len(data)}"})
                return
        handler.send_response(206 if wanted else 200)
        for key, value in headers.items():
            handler.send_header(key, value)
        handler.send_header("Accept-Ranges", "bytes")
        handler.send_header("Content-Length", str(len(data) - start))
        if wanted:
            handler.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        handler.end_headers()
        if not body:
            return
        if served.hang_after is not None and not wanted:
            handler.wfile.write(data[: served.hang_after])
            handler.wfile.flush()
            self.stalled.set()
            self.release.wait(60)  # silent until the test lets go (the client is interrupted meanwhile)
            handler.close_connection = True
            return
        handler.wfile.write(data[start:])
