"""A lesson: one presenter steps through a view, followers' pages show the same step as it changes.

The presenter's position (which runs the view shows, which decision, whether its question is
still open or revealed) is state here on the server, in a :class:`Lesson` named by a short join
code. The presenter's page sends each position as it steps (``POST /lesson/CODE/position``, with
the secret key only that page was given); every follower's page holds one server-sent-events
stream (``GET /lesson/CODE/events``) and gets each new position at once, then draws that step from
the same stored traces in its own view (nothing is recomputed: a step is a decision the trace
already holds). While a decision is asked rather than revealed, followers send their guesses
(``POST /lesson/CODE/answer``) and the presenter's stream carries the tally; followers see it once
the presenter reveals the answer.

These are plain routes of the app's web server (:func:`routes`), behind the same login as the rest
(:mod:`explorer.ui.serving.guard`). Nothing here is stored: a lesson lives as long as the server, and
lessons idle for :data:`IDLE_SECONDS` are forgotten.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import re
import secrets
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

#: Letters of a join code: no 0/O, 1/I/L, so it can be read off a projector and typed on a phone.
CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 6
#: Lessons one server keeps at once (the oldest idle one is forgotten to make room).
MAX_LESSONS = 64
#: A lesson nobody stepped or followed for this long is forgotten.
IDLE_SECONDS = 6 * 3600
#: Followers (voters) one lesson hands out at most.
MAX_FOLLOWERS = 2000
#: Seconds between the comments that keep an idle event stream open through proxies.
KEEPALIVE = 15.0
#: The largest request body a lesson route reads.
MAX_BODY = 16_384
#: Runs one position may name (a comparison of every method, with room to spare).
MAX_RUNS = 16

_RUN_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
_WORD = re.compile(r"^[a-z][a-z0-9 _-]{0,39}$")
_CASE = re.compile(r"^[a-z0-9-]{1,40}$")


class LessonError(ValueError):
    """A request a lesson refuses, with the HTTP status it answers."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Position:
    """Where the presenter is: the view (what a follower's page opens) and the decision shown in it."""

    #: The runs of the view, in the order the view shows them (a follower checks its view shows the same).
    runs: list[str] = field(default_factory=list)
    #: What a follower's page opens to show them: {"run": ID}, {"compare": "A,B"} or {"case": NAME}.
    view: dict[str, str] = field(default_factory=dict)
    #: The decision shown (0 = the first of the view's decisions) and how many the view has.
    step: int = 0
    total: int = 0
    #: The decision's kind as the view names it (fired, kept, retrieval, answer, ...).
    kind: str = ""
    #: The decision is shown as a question first: followers may answer until it is revealed.
    asking: bool = False
    revealed: bool = True
    #: The answers a follower can give to the question (empty when nothing is asked).
    choices: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"runs": list(self.runs), "view": dict(self.view), "step": self.step, "total": self.total,
                "kind": self.kind, "asking": self.asking, "revealed": self.revealed, "choices": list(self.choices)}


def parse_position(data: Any, known: Callable[[str], bool] | None = None) -> Position:
    """A position from the presenter's page, every field checked (sizes, shapes, run ids that exist)."""
    if not isinstance(data, dict):
        raise LessonError("a position is a JSON object")
    runs = data.get("runs")
    if not isinstance(runs, list) or len(runs) > MAX_RUNS or not all(
            isinstance(r, str) and _RUN_ID.match(r) for r in runs):
        raise LessonError(f"runs must be a list of at most {MAX_RUNS} run ids")
    view = data.get("view") or {}
    if not isinstance(view, dict) or len(view) > 1:
        raise LessonError('view must be {"run": ID}, {"compare": "ID,ID"} or {"case": NAME}')
    for key, value in view.items():
        parts = str(value).split(",") if key == "compare" else [str(value)]
        if key not in ("run", "compare", "case") or not isinstance(value, str) or not parts or len(parts) > MAX_RUNS:
            raise LessonError('view must be {"run": ID}, {"compare": "ID,ID"} or {"case": NAME}')
        pattern = _CASE if key == "case" else _RUN_ID
        if not all(pattern.match(p) for p in parts):
            raise LessonError(f"view names {value[:80]!r}, which is not a run id or case name")
    if runs and not view:
        raise LessonError("a position with runs says how to open them (view)")
    numbers = {}
    for name in ("step", "total"):
        value = data.get(name, 0)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 10_000:
            raise LessonError(f"{name} must be a whole number from 0 to 10000")
        numbers[name] = value
    kind = data.get("kind") or ""
    if not isinstance(kind, str) or (kind and not _WORD.match(kind)):
        raise LessonError("kind must be a short word")
    choices = data.get("choices") or []
    if not isinstance(choices, list) or len(choices) > 4 or not all(
            isinstance(c, str) and _WORD.match(c) for c in choices):
        raise LessonError("choices must be at most 4 short words")
    asking = bool(data.get("asking")) and bool(choices)
    revealed = bool(data.get("revealed", True)) or not asking
    if known is not None:
        missing = [r for r in runs if not known(r)]
        if missing:
            raise LessonError(f"no stored run {missing[0]!r}", status=404)
    return Position(runs=list(runs), view={k: str(v) for k, v in view.items()}, step=numbers["step"],
                    total=numbers["total"], kind=kind, asking=asking, revealed=revealed, choices=list(choices))


class Lesson:
    """One presenter's lesson: its position, who follows, and the answers to the question now asked."""

    def __init__(self, code: str) -> None:
        self.code = code
        self.key = secrets.token_urlsafe(24)
        self.position = Position()
        #: Grows with every change a stream shows (a position, an answer).
        self.version = 0
        self.touched = time.monotonic()
        self.followers = 0
        self._voters: set[str] = set()
        #: The question's answers: voter -> choice, for the position they were given at.
        self._answers: dict[str, str] = {}
        self._asked: tuple[Any, ...] | None = None
        self._changed: asyncio.Event | None = None

    # -- changes ----------------------------------------------------------------------------------
    def _question(self, position: Position) -> tuple[Any, ...]:
        return (tuple(position.runs), position.step, tuple(position.choices))

    def move(self, position: Position) -> None:
        """The presenter stepped: a new question starts with no answers; revealing keeps the tally."""
        if self._question(position) != self._asked:
            self._answers.clear()
            self._asked = self._question(position) if position.asking else None
        self.position = position
        self._bump()

    def join(self) -> str:
        """A new follower's voter token (what its answers are counted by)."""
        if len(self._voters) >= MAX_FOLLOWERS:
            raise LessonError(f"this lesson already has {MAX_FOLLOWERS} followers", status=429)
        voter = secrets.token_urlsafe(12)
        self._voters.add(voter)
        self.touched = time.monotonic()
        return voter

    def answer(self, voter: str, step: int, choice: str) -> None:
        """A follower's guess at the open question (a second guess replaces the first)."""
        if voter not in self._voters:
            raise LessonError("this page is not following the lesson (reload the follow link)", status=403)
        position = self.position
        if not position.asking or position.revealed:
            raise LessonError("no question is open now: the presenter has moved on or revealed it", status=409)
        if step != position.step:
            raise LessonError("that question is no longer the one asked", status=409)
        if choice not in position.choices:
            raise LessonError(f"choose one of {', '.join(position.choices)}")
        self._answers[voter] = choice
        self._bump()

    def follow(self, change: int) -> None:
        """A follower's stream opened (+1) or closed (-1)."""
        self.followers = max(0, self.followers + change)
        self._bump()

    def tally(self) -> dict[str, int]:
        counts = {c: 0 for c in self.position.choices}
        for choice in self._answers.values():
            if choice in counts:
                counts[choice] += 1
        return counts

    def _bump(self) -> None:
        self.version += 1
        self.touched = time.monotonic()
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def changed(self, timeout: float) -> None:
        """Wait until the next change (or ``timeout`` seconds)."""
        if self._changed is None:
            self._changed = asyncio.Event()
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except TimeoutError:
            pass

    # -- what a page sees ---------------------------------------------------------------------------
    def view_for(self, presenter: bool) -> dict[str, Any]:
        """The state a page is sent: followers see the tally only once the answer is revealed."""
        position = self.position
        out: dict[str, Any] = {"type": "position", "code": self.code, **position.to_dict()}
        if position.asking and (presenter or position.revealed):
            tally = self.tally()
            out["tally"] = tally
            out["answers"] = sum(tally.values())
        if presenter:
            out["followers"] = self.followers
        return out

    def is_key(self, key: Any) -> bool:
        return isinstance(key, str) and hmac.compare_digest(key.encode(), self.key.encode())


class Lessons:
    """The lessons of one server, by join code."""

    def __init__(self, known: Callable[[str], bool] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        #: Whether a run id names a run the page can open (stored or recorded).
        self.known = known
        self.clock = clock
        self._lessons: dict[str, Lesson] = {}

    def start(self, key: Any = None, code: Any = None) -> Lesson:
        """The presenter's lesson: the one its key opens (a reloaded page goes on), else a new one."""
        self._forget_idle()
        found = self._lessons.get(str(code or "").upper())
        if found is not None and found.is_key(key):
            found.touched = self.clock()
            return found
        if len(self._lessons) >= MAX_LESSONS:
            oldest = min(self._lessons.values(), key=lambda lesson: lesson.touched)
            del self._lessons[oldest.code]
        while True:
            new = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
            if new not in self._lessons:
                break
        lesson = Lesson(new)
        self._lessons[new] = lesson
        return lesson

    def get(self, code: str) -> Lesson:
        lesson = self._lessons.get(str(code or "").upper())
        if lesson is None:
            raise LessonError(f"no lesson {str(code)[:12]!r} on this server (it has ended, or the code is mistyped)",
                              status=404)
        return lesson

    def presenting(self, code: str, key: Any) -> Lesson:
        lesson = self.get(code)
        if not lesson.is_key(key):
            raise LessonError("only the presenter's page can move this lesson", status=403)
        return lesson

    def _forget_idle(self) -> None:
        now = self.clock()
        for code, lesson in list(self._lessons.items()):
            if lesson.followers == 0 and now - lesson.touched > IDLE_SECONDS:
                del self._lessons[code]

    def __len__(self) -> int:
        return len(self._lessons)


def follow_link(page_url: str, code: str) -> str:
    """The address a follower opens: the presenter's page address with only ``?follow=CODE``."""
    parts = urlsplit(page_url or "")
    if parts.scheme not in ("http", "https") or not parts.netloc or len(page_url) > 500:
        raise LessonError("the page address must be an http(s) address")
    return f"{parts.scheme}://{parts.netloc}{parts.path or '/'}?follow={code}"


def qr_data_uri(text: str) -> str:
    """The QR code of ``text`` as an SVG data URI (dark on light, with its quiet zone), made here."""
    import segno

    return segno.make(text, error="m").svg_data_uri(scale=6, dark="#111827", light="#ffffff")


def reachable_from_elsewhere(link: str) -> bool:
    """False when the link names this machine only (localhost): other devices cannot open it."""
    host = (urlsplit(link).hostname or "").lower()
    return not (host in ("localhost", "::1") or host.startswith("127."))


# -- the routes -------------------------------------------------------------------------------------
async def _json_body(request: Any) -> Any:
    """A request's JSON body, refused past :data:`MAX_BODY` bytes or when it is not JSON."""
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY:
            raise LessonError("the request is too large", status=413)
    try:
        return json.loads(raw or b"{}")
    except ValueError:
        raise LessonError("the request is not JSON") from None


def _refused(exc: LessonError) -> Any:
    """The JSON answer to a refused lesson request, with the refusal's status."""
    from starlette.responses import JSONResponse

    return JSONResponse({"error": str(exc)}, status_code=exc.status, headers={"cache-control": "no-store"})


async def _stream(lesson: Lesson, presenter: bool, voter: str | None) -> AsyncIterator[str]:
    """A page's event stream: a hello with its voter token, the position at each change, a keep-alive between."""
    if not presenter:
        lesson.follow(1)  # the presenter's count of followers changes
    try:
        yield f"event: hello\ndata: {json.dumps({'voter': voter, 'presenter': presenter})}\n\n"
        sent = None
        while True:
            now = json.dumps(lesson.view_for(presenter), separators=(",", ":"))
            if now != sent:
                sent = now
                yield f"data: {now}\n\n"
            version = lesson.version
            await lesson.changed(KEEPALIVE)
            if lesson.version == version:
                yield ": still here\n\n"
    finally:
        if not presenter:
            lesson.follow(-1)


def routes(lessons: Lessons) -> list[Any]:
    """The lesson routes, for the app's web server (added in front of Gradio's own)."""
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    async def start(request: Request) -> Response:
        """Open (or, with the key a reloaded page kept, resume) the presenter's lesson."""
        try:
            data = await _json_body(request)
            data = data if isinstance(data, dict) else {}
            lesson = lessons.start(data.get("key"), data.get("code"))
            link = follow_link(str(data.get("page") or ""), lesson.code)
        except LessonError as exc:
            return _refused(exc)
        return JSONResponse({"code": lesson.code, "key": lesson.key, "link": link, "qr": qr_data_uri(link),
                             "reachable": reachable_from_elsewhere(link), **lesson.view_for(True)},
                            headers={"cache-control": "no-store"})

    async def position(request: Request) -> Response:
        try:
            data = await _json_body(request)
            data = data if isinstance(data, dict) else {}
            lesson = lessons.presenting(request.path_params["code"], data.get("key"))
            known = lessons.known
            checked = await run_in_threadpool(parse_position, data.get("position"), known)
            lesson.move(checked)
        except LessonError as exc:
            return _refused(exc)
        return JSONResponse({"version": lesson.version, **lesson.view_for(True)}, headers={"cache-control": "no-store"})

    async def answer(request: Request) -> Response:
        try:
            data = await _json_body(request)
            data = data if isinstance(data, dict) else {}
            lesson = lessons.get(request.path_params["code"])
            step = data.get("step")
            if not isinstance(step, int) or isinstance(step, bool):
                raise LessonError("step must be a whole number")
            lesson.answer(str(data.get("voter") or ""), step, str(data.get("choice") or ""))
        except LessonError as exc:
            return _refused(exc)
        return JSONResponse({"ok": True}, headers={"cache-control": "no-store"})

    async def events(request: Request) -> Response:
        """The lesson's stream: a hello with the page's voter token, then the position at each change."""
        try:
            lesson = lessons.get(request.path_params["code"])
            presenter = lesson.is_key(request.query_params.get("key"))
            voter = None if presenter else lesson.join()
        except LessonError as exc:
            return _refused(exc)

        return StreamingResponse(_stream(lesson, presenter, voter), media_type="text/event-stream",
                                 headers={"cache-control": "no-store", "x-accel-buffering": "no"})

    return [Route("/lesson/start", start, methods=["POST"]),
            Route("/lesson/{code}/position", position, methods=["POST"]),
            Route("/lesson/{code}/answer", answer, methods=["POST"]),
            Route("/lesson/{code}/events", events, methods=["GET"])]
