"""What the web server exposes, with and without a login, and the options it refuses.

Two real apps (``python app.py --lazy``, so no model loads): one open on 127.0.0.1, one behind
``--auth``. Requests go over HTTP exactly as a browser or a script would send them.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import stat
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from explorer.errors import ExplorerError, hide_paths, public_message
from explorer.ui.serving import server
from explorer.ui.serving.guard import LoginThrottle
from tests.browser_support import CHROMIUM, ROOT, start_app

USER, PASSWORD = "alice", "correct-horse-battery"
PROXY = "127.0.0.2"  # the one reverse proxy the locked app is told to believe


def request(url: str, *, data: bytes | None = None, headers: dict[str, str] | None = None,
            method: str | None = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def upload(url: str, *files: tuple[str, str]) -> tuple[int, bytes]:
    """POST ``files`` ((name, content) pairs; by default one HTML page) to Gradio's upload route."""
    boundary = "----explorer-test"
    parts = "".join(f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"{name}\"\r\n"
                    f"Content-Type: application/octet-stream\r\n\r\n{content}\r\n"
                    for name, content in files or [("evil.html", "<script>alert(1)</script>")])
    status, _, body = request(url + "gradio_api/upload", data=(parts + f"--{boundary}--\r\n").encode(),
                              headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    return status, body


def login(url: str, password: str) -> tuple[int, dict[str, str]]:
    data = urllib.parse.urlencode({"username": USER, "password": password}).encode()
    status, headers, _ = request(url + "login", data=data,
                                 headers={"Content-Type": "application/x-www-form-urlencoded"})
    return status, headers


def send_from(url: str, source: str, method: str, path: str, body: str | None = None,
              headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
    """One request from the loopback address ``source`` (any 127.x address reaches the server on Linux);
    the response is read whole (a route that streams is answered only after a login, so never here)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30, source_address=(source, 0))
    try:
        conn.request(method, path, body, headers or {})
        response = conn.getresponse()
        response.body = response.read()  # type: ignore[attr-defined]
        return response
    finally:
        conn.close()


def login_from(url: str, source: str, password: str, forwarded_for: str | None = None) -> int:
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    if forwarded_for is not None:
        headers["X-Forwarded-For"] = forwarded_for
    form = urllib.parse.urlencode({"username": USER, "password": password})
    return send_from(url, source, "POST", "/login", form, headers).status


@pytest.fixture(scope="module")
def open_app(tmp_path_factory):
    app = start_app(tmp_path_factory.mktemp("open"), name="open", extra_args=("--lazy",))
    yield app
    app.stop()


@pytest.fixture(scope="module")
def locked_app(tmp_path_factory):
    app = start_app(tmp_path_factory.mktemp("locked"), name="locked",
                    extra_args=("--lazy", "--auth", f"{USER}:{PASSWORD}", "--forwarded-allow-ips", PROXY))
    yield app
    app.stop()


def test_without_a_login_no_schema_no_foreign_upload_no_file_outside_the_app(open_app) -> None:
    url = open_app.url
    assert request(url)[0] == 200
    for route in ("openapi.json", "docs", "redoc"):
        assert request(url + route)[0] == 404, route
    # the question-file input takes question files only; anything else is refused as it streams in
    status, body = upload(url)
    assert status == 403 and b"evil.html" in body and b".jsonl" in body
    big = "x" * 200_000  # the refused name comes in a later part, after a large accepted one
    assert upload(url, ("ok.jsonl", big), ("page.svg", "<svg/>"))[0] == 403
    status, body = upload(url, ("mine.jsonl", '{"question": "Who?", "answer": "x"}'))
    assert status == 200 and b"mine.jsonl" in body
    for path in ("/etc/passwd", str(open_app.db), str(ROOT / "app.py"), str(ROOT / "explorer" / "store.py"),
                 "../../../../etc/passwd"):
        status = request(url + "gradio_api/file=" + urllib.parse.quote(path))[0]
        assert status in (403, 404), (path, status)
    from explorer.ui.views.report import EXPLORER_JS

    assert request(url + "gradio_api/file=" + str(EXPLORER_JS))[0] == 200  # the app's own assets are served
    assert request(url + "gradio_api/info")[0] == 200  # the scripting API stays described for gradio_client


def post_upload(url: str, body: bytes, content_type: str) -> tuple[int, bytes]:
    status, _, answer = request(url + "gradio_api/upload", data=body, headers={"Content-Type": content_type})
    return status, answer


def test_an_upload_is_judged_by_the_name_gradio_stores_and_its_size_is_capped(open_app) -> None:
    url = open_app.url
    for spelled in ('filename ="evil.html"', 'filename\t="evil.html"'):
        status, body = post_upload(url, *multipart((f'name="files"; {spelled}', b"<script>alert(1)</script>")))
        assert status == 403 and b"evil.html" in body and b".jsonl" in body, (spelled, status, body)
    status, body = post_upload(url, *multipart(('name="files"; filename="big.jsonl"',
                                                b'{"question": "Q?", "answer": "x"}\n' * 600_000)))  # 20 MB
    detail = json.loads(body)["detail"]
    assert status == 413 and "larger than 10 MB" in detail and "Fix:" in detail, (status, body[:300])
    status, body = post_upload(url, *multipart(('name="files"; filename="mine.jsonl"', b'{"question": "Q?"}\n')))
    assert status == 200 and b"mine.jsonl" in body


def test_with_a_login_every_route_is_closed_until_signed_in(locked_app) -> None:
    url = locked_app.url
    for route in ("config", "gradio_api/info", "gradio_api/openapi.json", "gradio_api/file=" + str(locked_app.db),
                  "gradio_api/queue/status"):
        assert request(url + route)[0] in (401, 403), route
    for route in ("openapi.json", "docs", "redoc"):
        assert request(url + route)[0] == 404, route
    assert upload(url)[0] in (401, 403)
    assert upload(url, ("mine.jsonl", "{}"))[0] in (401, 403)
    from gradio_client import Client

    with pytest.raises(Exception):  # noqa: B017 - any refusal will do: the client cannot even read the API
        Client(url, verbose=False)
    client = Client(url, auth=(USER, PASSWORD), verbose=False)
    with pytest.raises(Exception, match="no run with id"):
        client.predict("0" * 32, api_name="/fetch_run")


#: What answers under --auth before signing in (docs/security.md): the login page, what
#: it loads (Gradio's compiled frontend, fonts and stock theme) and the form's target. Nothing else.
PUBLIC_UNDER_LOGIN = {("/", "GET"), ("/", "HEAD"), ("/theme.css", "GET"), ("/assets/{path:path}", "GET"),
                      ("/static/{path:path}", "GET"), ("/login", "POST"), ("/login/", "POST")}


#: Refused as they are with or without a login: the API schema (404) and uploads to an app that takes none (403).
REFUSED_BEFORE_LOGIN = {("/gradio_api/openapi.json", 404), ("/gradio_api/upload", 403),
                        ("/gradio_api/process_recording", 403)}


@pytest.fixture(scope="module")
def built_app(tmp_path_factory):
    """The app built in-process as ``python app.py`` builds it, from a corpus and a model given as absolute
    paths (the model is never loaded)."""
    from explorer.ui.page.app import AppSettings, build_app
    from tests.browser_support import write_corpus

    folder = tmp_path_factory.mktemp("routes")
    corpus = write_corpus(folder / "private_corpus.jsonl", [])
    return build_app(AppSettings(db=folder / "r.sqlite", model=str(folder / "models" / "my-model"),
                                 corpus=str(corpus), preload=False, embedder=str(folder / "encoders" / "my-encoder")))


@pytest.fixture(scope="module")
def route_table(built_app) -> list[tuple[str, str]]:
    """Every (path, method) of the app's FastAPI route table, made as ``launch`` makes it."""
    import gradio as gr
    from fastapi.routing import iter_route_contexts

    from explorer.ui.serving.lesson import routes

    app = gr.routes.App.create_app(built_app, app_kwargs={"docs_url": None, "redoc_url": None, "openapi_url": None,
                                                          "routes": routes(built_app.explorer_lessons)})
    assert ("/lesson/{code}/events", "GET") in {(r.path, m) for r in app.routes for m in (getattr(r, "methods", None)
                                                                                         or ())}
    return sorted({(r.path, m) for r in iter_route_contexts(app.routes) for m in (r.methods or ())})


def test_status_names_the_model_and_corpus_without_a_server_path(built_app, tmp_path_factory) -> None:
    status = next(fn.fn for fn in built_app.fns.values() if fn.api_name == "status")()
    assert "model my-model, corpus private_corpus.jsonl" in status["message"], status
    assert str(tmp_path_factory.getbasetemp()) not in str(status) and "/" not in status["message"]


def test_the_page_shows_no_server_path_and_offers_only_the_servers_embedders(built_app, tmp_path_factory) -> None:
    from explorer.ui.runs.embedders import page_embedder, page_embedders

    folder = str(tmp_path_factory.getbasetemp())
    boxes = {b.elem_id: b for b in built_app.blocks.values() if getattr(b, "elem_id", None) in ("corpus", "embedder")}
    assert boxes["corpus"].value == "private_corpus.jsonl" and boxes["embedder"].value == "my-encoder"
    assert folder not in json.dumps(built_app.config, default=str)  # nowhere in the page
    started = f"{folder}/encoders/my-encoder"
    offered = page_embedders(started)
    assert page_embedder("my-encoder", offered) == started
    assert page_embedder("embedded", offered) is None and page_embedder("all-MiniLM-L6-v2", offered) is None
    # Any other text gets one refusal, whatever is on the server's disk: no folder can be probed, and the
    # language model's own folder is never opened as a sentence encoder.
    real = tmp_path_factory.mktemp("encoder-like")
    (real / "config.json").write_text("{}")
    refusals = set()
    for text in (str(real), "/no/such/folder", str(ROOT / ".cache"), str(ROOT), "bert-base-uncased"):
        with pytest.raises(ExplorerError) as refused:
            page_embedder(text, offered)
        assert refused.value.where == "Embedder" and "--embedder" in refused.value.fix
        refusals.add(refused.value.message.replace(text, "TEXT"))
    assert len(refusals) == 1, refusals


def test_with_a_login_no_route_of_the_app_answers_but_the_login_page(locked_app, route_table) -> None:
    """Every route of the table is asked without a session: only the documented login page answers, so a
    route a later Gradio adds is closed by default and this test names it if it is not."""
    assert len(route_table) > 60 and ("/gradio_api/heartbeat/{session_hash}", "GET") in route_table
    answered = set()
    for path, method in route_table:
        concrete = re.sub(r"\{[^}]+\}", "x", path)
        response = send_from(locked_app.url, "127.0.0.4", method, concrete, "{}" if method == "POST" else None,
                             {"Content-Type": "application/json"})
        refused = response.status == 401 or (concrete, response.status) in REFUSED_BEFORE_LOGIN
        if not refused:
            answered.add((path, method))
    assert answered == PUBLIC_UNDER_LOGIN
    login_page = send_from(locked_app.url, "127.0.0.4", "GET", "/").body
    assert b"auth_required" in login_page  # the page is the login form...
    for described in (b"fetch_run", b"idempotency_key", b"parameter_name", b"Fork a stored run"):
        assert described not in login_page, described  # ...and does not describe the API
    assert b"window.gradio_api_info = null;" in login_page
    # signed in, the closed routes answer
    form = urllib.parse.urlencode({"username": USER, "password": PASSWORD})
    signed = send_from(locked_app.url, "127.0.0.4", "POST", "/login", form,
                       {"Content-Type": "application/x-www-form-urlencoded"})
    assert signed.status == 200
    cookie = "; ".join(c.split(";", 1)[0] for c in signed.headers.get_all("set-cookie"))
    for path in ("/manifest.json", "/gradio_api/startup-events", "/config"):
        assert send_from(locked_app.url, "127.0.0.4", "GET", path, headers={"Cookie": cookie}).status == 200, path
    assert send_from(locked_app.url, "127.0.0.4", "GET", "/config", headers={"Cookie": "access-token-x=forged"}
                     ).status == 401


@pytest.mark.browser
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is missing: `make browser`")
def test_the_login_page_signs_in_without_the_api_description(locked_app) -> None:
    """In a real browser: the login form works with no API description in the page, and the app opens."""
    from tests.browser_support import browser_context

    with browser_context() as context:
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(locked_app.url, timeout=120_000)
        page.wait_for_selector("input[type=password]", timeout=60_000)
        assert page.evaluate("window.gradio_api_info") is None
        page.fill("input[type=text]", USER)
        page.fill("input[type=password]", PASSWORD)
        page.keyboard.press("Enter")
        page.wait_for_selector("#question", timeout=120_000)
        assert not errors, errors


def test_wrong_passwords_back_off_and_the_right_one_resets(locked_app) -> None:
    url = locked_app.url
    started = time.monotonic()
    for _ in range(5):
        assert login(url, "wrong")[0] == 400
    status, headers = login(url, "wrong")
    assert status == 429 and int(headers["retry-after"]) >= 1
    assert login(url, PASSWORD)[0] == 429  # not even the right password while it waits
    time.sleep(int(headers["retry-after"]) + 0.2)
    assert login(url, "wrong")[0] == 400  # one more try, now a longer wait
    status, headers = login(url, PASSWORD)
    assert status == 429 and int(headers["retry-after"]) >= 2
    time.sleep(int(headers["retry-after"]) + 0.2)
    assert login(url, PASSWORD)[0] == 200
    assert login(url, "wrong")[0] == 400  # counting starts again
    assert time.monotonic() - started < 30


def test_forwarding_headers_count_only_from_named_proxies() -> None:
    from explorer.ui.serving.forwarding import ForwardedTrust, apply_forwarding, parse_proxies

    trust = ForwardedTrust(parse_proxies("10.0.0.0/8, ::1"))
    scope = {"type": "http", "client": ("10.2.3.4", 5), "scheme": "http",
             "headers": [(b"x-forwarded-for", b"1.1.1.1, [2001:db8::1]:443"), (b"x-forwarded-proto", b"https"),
                         (b"x-forwarded-host", b"evil.example"), (b"host", b"app")]}
    named = apply_forwarding(scope, trust)
    assert named["client"] == ("2001:db8::1", 0) and named["scheme"] == "https"
    stranger = apply_forwarding({**scope, "client": ("192.0.2.7", 5)}, trust)
    assert stranger["client"] == ("192.0.2.7", 5) and stranger["scheme"] == "http"
    assert stranger["headers"] == [(b"host", b"app")]  # Gradio never sees a stranger's forwarded host
    assert apply_forwarding(scope, ForwardedTrust())["client"] == ("10.2.3.4", 5)  # the default names no proxy
    with pytest.raises(ValueError):
        parse_proxies("10.0.0.1,not-an-address")


def test_the_throttle_doubles_its_wait_up_to_a_cap() -> None:
    now = [0.0]
    throttle = LoginThrottle(free=3, base=1.0, cap=8.0, clock=lambda: now[0])
    waits = [throttle.failed("a") for _ in range(8)]
    assert waits == [0.0, 0.0, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert throttle.wait("a") == 8.0 and throttle.wait("b") == 0.0  # per address
    now[0] = 8.5
    assert throttle.wait("a") == 0.0
    throttle.succeeded("a")
    assert throttle.failed("a") == 0.0


def test_uploads_are_allowed_only_when_a_component_takes_files() -> None:
    import gradio as gr

    from explorer.ui.serving.guard import needs_uploads, upload_suffixes

    with gr.Blocks() as plain:
        gr.Textbox()
        gr.File(interactive=False)  # a download slot, like the exports
    with gr.Blocks() as with_file:
        gr.File(file_types=[".jsonl"])
    with gr.Blocks() as with_button:
        gr.UploadButton("Load a question file")
    assert not needs_uploads(plain) and needs_uploads(with_file) and needs_uploads(with_button)
    assert upload_suffixes(with_file) == (".jsonl",) and upload_suffixes(with_button) is None


def multipart(*parts: tuple[str, bytes], boundary: str = "b0undary") -> tuple[bytes, str]:
    """A multipart body of (Content-Disposition parameters, content) parts, and its Content-Type."""
    body = b"".join(f"--{boundary}\r\nContent-Disposition: form-data; {disposition}\r\n"
                    "Content-Type: application/octet-stream\r\n\r\n".encode() + content + b"\r\n"
                    for disposition, content in parts)
    return body + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def refused_by_check(body: bytes, content_type: str, chunk: int = 7) -> str | None:
    from explorer.ui.serving.uploads import UploadCheck, UploadRefused

    check = UploadCheck(content_type, (".jsonl",), limit=1000)
    try:
        for start in range(0, len(body), chunk):  # fed in small pieces: a header split across chunks is still read
            check.feed(body[start:start + chunk])
    except UploadRefused as exc:
        return exc.name or exc.message
    return None


def test_upload_names_are_read_as_the_multipart_parser_reads_them() -> None:
    ok = 'name="files"; filename="a.JSONL"'
    assert refused_by_check(*multipart((ok, b"{}"))) is None
    assert refused_by_check(*multipart((ok, b"{}"), ('name="files"; filename="b.exe"', b"x"))) == "b.exe"
    for spelled in ('filename ="evil.html"', 'filename\t="evil.html"', "filename=evil.html",
                    'FILENAME="evil.html"', 'filename="evil.html"; filename*=UTF-8\'\'a.jsonl'):
        assert refused_by_check(*multipart((f'name="files"; {spelled}', b"<script>"))) == "evil.html", spelled
    assert "a file without a name" in refused_by_check(*multipart(('name="files"; filename=""', b"x")))
    assert "larger than" in refused_by_check(*multipart((ok, b"x" * 1001)))
    unreadable = refused_by_check(b"--b0undary\r\nno headers end", "multipart/form-data; boundary=b0undary")
    assert "cannot be read" in unreadable


def test_a_burst_of_logins_sent_together_gets_no_more_tries_than_one_by_one(locked_app) -> None:
    """Sixty logins from one address, each on its own connection, released together (the right password among
    them): the throttle checks and counts each try at once, so only the free tries are judged."""
    import threading

    from explorer.ui.serving.guard import FREE_ATTEMPTS

    parts = urllib.parse.urlsplit(locked_app.url)
    passwords = ["wrong"] * 59 + [PASSWORD]
    connections = [http.client.HTTPConnection(parts.hostname, parts.port, timeout=60, source_address=("127.0.0.6", 0))
                   for _ in passwords]
    for conn in connections:
        conn.connect()
    start = threading.Barrier(len(connections))
    statuses: list[int] = []

    def send(conn: http.client.HTTPConnection, password: str) -> None:
        form = urllib.parse.urlencode({"username": USER, "password": password})
        start.wait(timeout=30)
        try:
            conn.request("POST", "/login", form, {"Content-Type": "application/x-www-form-urlencoded"})
            statuses.append(conn.getresponse().status)
        finally:
            conn.close()

    threads = [threading.Thread(target=send, args=pair) for pair in zip(connections, passwords, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(statuses) == len(passwords)
    judged = [s for s in statuses if s != 429]
    assert len(judged) <= FREE_ATTEMPTS and statuses.count(429) >= len(passwords) - FREE_ATTEMPTS, sorted(statuses)


def test_a_forged_forwarded_address_does_not_escape_the_throttle(locked_app) -> None:
    """Last of the locked app's tests: it leaves 127.0.0.1 (the peer uvicorn itself would believe) throttled."""
    url = locked_app.url
    statuses = [login_from(url, "127.0.0.1", "wrong", f"10.0.0.{n}") for n in range(30)]
    # one count, the real peer's (which may hold a failure from the test before): at most 5 tries, then 429s
    assert set(statuses[:5]) <= {400, 429} and set(statuses[5:]) == {429}, statuses
    assert login_from(url, "127.0.0.1", PASSWORD, "10.0.0.99") == 429
    # the named proxy's word is taken: each client it reports is counted apart
    assert [login_from(url, PROXY, "wrong", "10.1.0.1") for _ in range(6)] == [400] * 5 + [429]
    assert login_from(url, PROXY, "wrong", "10.1.0.9, 10.1.0.1") == 429  # a client's own claim, left of the proxy's
    assert login_from(url, PROXY, "wrong", "10.1.0.2") == 400
    assert login_from(url, PROXY, PASSWORD, "10.1.0.2") == 200


# -- options ---------------------------------------------------------------------------------------------


def run_main(argv: list[str], capsys) -> tuple[int, str]:
    code = server.main(argv)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("argv,expected", [
    (["--host", ""], "--host (or EXPLORER_HOST): the address to serve on is empty"),
    (["--host", "   "], "the address to serve on is empty"),
    (["--port", "99999"], "99999 is not a TCP port"),
    (["--port", "0"], "0 is not a TCP port"),
    (["--port", "-1"], "-1 is not a TCP port"),
    (["--host", "host.invalid"], "cannot resolve the address"),
    (["--auth", "nocolon"], "--auth must be USER:PASSWORD"),
    (["--forwarded-allow-ips", "10.0.0.1,proxy.example"], "--forwarded-allow-ips (or EXPLORER_FORWARDED_ALLOW_IPS)"),
])
def test_bad_server_options_are_refused_before_anything_loads(argv, expected, capsys, tmp_path) -> None:
    code, err = run_main([*argv, "--db", str(tmp_path / "x.sqlite"), "--lazy"], capsys)
    assert code == 2 and expected in err and "Fix:" in err and "Traceback" not in err
    assert not (tmp_path / "x.sqlite").exists()


def test_a_taken_port_is_named_with_a_way_out(capsys, tmp_path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, err = run_main(["--port", str(port), "--db", str(tmp_path / "x.sqlite"), "--lazy"], capsys)
    assert code == 2 and f"port {port} on 127.0.0.1 is already in use" in err and "--port" in err
    assert "GRADIO_SERVER_PORT" not in err and "Traceback" not in err


def test_the_port_error_of_a_late_collision_is_the_same_message() -> None:
    err = server.port_error("127.0.0.1", 7860, OSError("Cannot find empty port in range: 7860-7860. You can ..."))
    assert "port 7860 on 127.0.0.1 is already in use" in err.message and "Fix:" in err.message


# -- exports and temporary files -----------------------------------------------------------------------------


def test_exports_are_owner_only_unique_and_cleaned(tmp_path: Path) -> None:
    from explorer.ui.runs.history import Exports

    exports = Exports(tmp_path, max_age=60, keep=3)
    first, second = exports.csv("a,b\n"), exports.csv("a,b\n")
    assert first != second  # two users exporting at once never share a file
    for path in (first, second):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    old = time.time() - 3600
    os.utime(first, (old, old))
    exports.csv("c\n")
    assert not Path(first).exists() and Path(second).exists()  # an hour old: gone
    for _ in range(4):
        exports.csv("d\n")
    assert len(list(tmp_path.iterdir())) <= 4  # the newest few (3), plus the one just written
    default = Exports()
    assert stat.S_IMODE(default.folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(server.private_temp_dir().stat().st_mode) == 0o700


# -- messages ------------------------------------------------------------------------------------------


def test_clients_see_no_server_path() -> None:
    exc = ExplorerError("no run with id 'x'", where="/srv/data/runs.sqlite", fix="pick a run from the history list")
    assert public_message(exc, "run_id") == "run_id: no run with id 'x' Fix: pick a run from the history list"
    assert public_message(exc) == "no run with id 'x' Fix: pick a run from the history list"
    assert hide_paths("bad line /home/me/corpus/x.jsonl:12 and ~/m/model.gguf") == "bad line x.jsonl:12 and model.gguf"
    assert hide_paths("see http://127.0.0.1:7860/ or use [0, 1]") == "see http://127.0.0.1:7860/ or use [0, 1]"


def test_a_model_that_failed_to_load_says_fix_once(tmp_path: Path) -> None:
    from explorer.errors import ModelError
    from explorer.store import RunStore
    from explorer.ui.page.controls import build_specs
    from explorer.ui.runs.controller import RunController, RuntimeHolder

    def fail():
        raise ModelError("the GGUF file is truncated or corrupt", where="/models/x.gguf", fix="download it again")

    holder = RuntimeHolder(fail, describe="model x")
    controller = RunController(RunStore(tmp_path / "r.sqlite"), holder)
    updates = list(controller.stream("Who?", build_specs(["wo"], {}, {}), gold=None, session="s"))
    status = updates[-1].status
    assert status.count("Fix:") == 1 and "truncated or corrupt" in status and "/models/" not in status
    assert holder.status().count("Fix:") == 1
    with pytest.raises(ModelError) as info:
        holder.get()
    assert str(info.value).count("Fix:") == 1



def test_a_plain_http_call_that_leaves_optional_values_out_gets_their_defaults() -> None:
    import inspect

    from explorer.ui.api.call_defaults import endpoint_of, pad

    defaults = ("", "dragin", "", "{}", "")
    defaults = (inspect.Parameter.empty, *defaults[1:])
    assert endpoint_of("/gradio_api/call/run") == "run" and endpoint_of("/gradio_api/run/fetch_run") == "fetch_run"
    assert endpoint_of("/gradio_api/queue/join") is None and endpoint_of("/gradio_api/call/run/abc") is None
    padded = json.loads(pad(json.dumps({"data": ["Q?", "wo"], "session_hash": "x"}).encode(), defaults))
    assert padded == {"data": ["Q?", "wo", "", "{}", ""], "session_hash": "x"}
    assert pad(json.dumps({"data": []}).encode(), defaults) is None  # the question has no default: Gradio refuses
    assert pad(json.dumps({"data": ["Q?", "wo", "", "{}", "k"]}).encode(), defaults) is None  # complete already
    assert pad(b"[" * 50_000, defaults) is None and pad(b"not json", defaults) is None  # the endpoint says why


def test_the_server_takes_a_thread_count_or_auto_and_refuses_anything_else(capsys, monkeypatch) -> None:
    import torch

    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # "auto" chooses only where the environment has not
        monkeypatch.delenv(name, raising=False)

    before = torch.get_num_threads()
    try:
        assert server.parse_args(["--threads", "1"]).threads == 1
        assert server.apply_server_threads(1) == "1 torch thread (--threads)" and torch.get_num_threads() == 1
        assert server.parse_args(["--threads", "auto"]).threads == "auto"
        assert "cores, load" in server.apply_server_threads("auto")
        assert server.parse_args([]).threads is None and server.apply_server_threads(None) is None
        for bad in ("0", "many"):
            with pytest.raises(SystemExit):
                server.parse_args(["--threads", bad])
            assert "--threads" in capsys.readouterr().err
    finally:
        torch.set_num_threads(before)
