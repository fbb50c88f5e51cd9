"""Starting the app in a subprocess and driving it with Debian's chromium (shared by browser tests and the UI bench).

Never a downloaded browser: Playwright launches /usr/bin/chromium with a fresh profile. The
app is started exactly as users start it (``python app.py``) on a free port, with its own
database and, where a test needs one, its own corpus.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
ARTIFACTS = ROOT / "test-artifacts"
#: axe-core, installed by `make test` (npm ci) from package.json / package-lock.json.
AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"
#: The WCAG 2.2 AA rules axe checks (A and AA of 2.0, 2.1 and 2.2).
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class App:
    """A running app: where it listens, its database, its process and log."""

    url: str
    db: Path
    proc: subprocess.Popen
    log: Path
    requests: list[str] = field(default_factory=list)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def write_corpus(path: Path, extra: list[dict[str, Any]]) -> Path:
    """The demo passages plus ``extra`` ones, as a passages JSONL file."""
    demo = (ROOT / "corpora" / "demo" / "passages.jsonl").read_text(encoding="utf-8").splitlines()
    lines = [line for line in demo if line.strip()] + [json.dumps(p, ensure_ascii=False) for p in extra]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def start_app(workdir: Path, *, corpus: str = "demo", name: str = "app", timeout: float = 120.0,
              extra_args: tuple[str, ...] = (), db: Path | None = None) -> App:
    port = free_port()
    db = db or workdir / f"{name}.sqlite"
    ARTIFACTS.mkdir(exist_ok=True)
    log = ARTIFACTS / f"server-{name}.log"
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    env.setdefault("EXPLORER_CACHE", str(ROOT / ".cache"))
    # One torch thread: on a shared 2-core machine two OpenMP threads contending with other work
    # were measured 11x slower (86 s against 7.8 s for the same DRAGIN run).
    env.setdefault("OMP_NUM_THREADS", "1")
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", str(port), "--db", str(db),
                                 "--corpus", corpus, *extra_args], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the app exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return App(url=url, db=db, proc=proc, log=log)
        except urllib.error.HTTPError:  # answering, behind a login
            return App(url=url, db=db, proc=proc, log=log)
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError(f"the app did not answer within {timeout} s:\n{log.read_text()[-3000:]}")


@contextmanager
def browser_context(**kwargs: Any) -> Iterator[Any]:
    """A persistent context on a fresh, throw-away profile of Debian's chromium."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p, tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        context = p.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1360, "height": 1000}, accept_downloads=True, **kwargs)
        try:
            yield context
        finally:
            context.close()


@contextmanager
def chromium_browser() -> Iterator[Any]:
    """One headless Debian chromium for many contexts (each its own cookies: a student's own browser)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


# -- page helpers ------------------------------------------------------------------------------------
def sign_in(page: Any, url: str, user: str, password: str, timeout: float = 120_000) -> None:
    """Open ``url`` on an app with a login, sign in on its login form, and wait for the app's controls."""
    page.goto(url, timeout=timeout)
    page.wait_for_selector("input[type=password]", timeout=timeout)
    page.locator("input[type=text]").first.fill(user)
    page.locator("input[type=password]").fill(password)
    page.keyboard.press("Enter")
    page.wait_for_selector("#question", timeout=timeout)


def open_app(page: Any, url: str, timeout: float = 120_000) -> None:
    """Load the app's page and wait for its controls. The page opens with a recorded run drawn in it,
    so on a busy 2-core machine the first paint can take well over Playwright's default 30 s."""
    page.goto(url, timeout=timeout)
    page.wait_for_selector("#question", timeout=timeout)


def open_settings_panel(page: Any) -> None:
    """Unfold Settings (question sources, retriever, method settings), folded under the Run band."""
    if not page.locator("#method-settings").is_visible():
        page.locator("#settings > button, #settings .label-wrap").first.click()
        page.locator("#method-settings").wait_for(state="visible", timeout=10_000)


def choose(page: Any, elem_id: str, text: str) -> None:
    """Pick the option containing ``text`` in a Gradio dropdown (unfolding Settings when it is in there)."""
    if not page.locator(f"#{elem_id}").is_visible():
        open_settings_panel(page)
    page.locator(f"#{elem_id} input").click()
    page.locator("ul[role=listbox] li").filter(has_text=text).first.click()


def pick_question(page: Any, text: str) -> None:
    """Pick a listed question and wait until the app has put it in the question box.

    The page opens on the case studies; from there the demo questions (which include them and
    many more) are chosen first. Any other source chosen before (a loaded file) is kept."""
    open_settings_panel(page)
    if page.locator("#question-source input").input_value().startswith("Case studies"):
        choose(page, "question-source", "Demo questions")
        page.wait_for_function("() => document.querySelector('#question-pick input').value === ''")
    choose(page, "question-pick", text)
    page.wait_for_function("(t) => document.querySelector('#question textarea').value.includes(t)", arg=text)


def open_settings(page: Any, method: str) -> None:
    open_settings_panel(page)
    page.locator(f"#settings-{method}-button").click()


def set_param(page: Any, method: str, name: str, value: Any) -> None:
    open_settings(page, method)
    page.locator(f"#param-{method}-{name} input").fill(str(value))


def set_methods(page: Any, wanted: list[str]) -> None:
    """Tick exactly ``wanted`` (method names, as the checkboxes' names carry them)."""
    for label in page.locator("#methods label").all():
        box = label.locator("input")
        want = box.get_attribute("name") in wanted
        if box.is_checked() != want:
            label.click()


def ticked_methods(page: Any) -> list[str]:
    return [box.get_attribute("name") for box in page.locator("#methods input").all() if box.is_checked()]


def set_whatif(page: Any, value: float, view: str = "#run-view", run: int = 0) -> None:
    """Move a run's what-if θ' slider (beside its decision chart) to ``value`` and let go of it."""
    slider = page.locator(f"{view} .dre-whatif-ctl .dre-theta").nth(run)
    slider.evaluate("(el, v) => { el.value = String(v); el.dispatchEvent(new Event('input', {bubbles: true}));"
                    " el.dispatchEvent(new Event('change', {bubbles: true})); }", value)


def click_run(page: Any) -> None:
    """Press Run, first marking the current view stale so waiting cannot mistake it for the new one."""
    page.evaluate("document.querySelector('#run-view .dre-root')?.setAttribute('data-stale', '1')")
    page.locator("#run").click()


def wait_ready(page: Any, timeout: float = 180_000) -> None:
    """The model and corpus are loaded (the app loads them in the background at start)."""
    page.wait_for_function("document.querySelector('#model-status')?.innerText.includes('ready')", timeout=timeout)


def wait_tokens(page: Any, view: str = "#run-view", timeout: float = 120_000) -> None:
    """Tokens of the run just started are in the view (not those of the view shown before Run)."""
    page.wait_for_selector(f"{view} .dre-root:not([data-stale]) .dre-tokens .tok", timeout=timeout)


def wait_done(page: Any, view: str = "#run-view", runs: int = 1, timeout: float = 240_000) -> None:
    page.wait_for_function(
        """([view, runs]) => {
            const root = document.querySelector(view + ' .dre-root');
            return root && !root.dataset.stale && root.dataset.busy === '0' &&
                   root.querySelectorAll('.dre-run[data-view=done]').length >= runs;
        }""", arg=[view, runs], timeout=timeout)
    page.wait_for_function("(view) => !document.querySelector(view + ' .dre-plot:not([data-done])')", arg=view,
                           timeout=30_000)


def shot(page: Any, name: str, selector: str | None = None) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    if selector:
        page.locator(selector).first.screenshot(path=str(path))
    else:
        page.screenshot(path=str(path), full_page=True)
    return path


def external(urls: list[str], base: str) -> list[str]:
    """Requests that left the app (or, for a file page, the file): must stay empty offline."""
    return [u for u in urls if not (u.startswith(base) or u.startswith(("data:", "blob:", "file:")))]


def axe_violations(page: Any, context: str = "body", impacts: tuple[str, ...] = ("serious", "critical")) -> list[dict]:
    """axe-core's WCAG 2.2 AA violations of ``impacts`` inside ``context``, each with the nodes it found."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    result = page.evaluate("""async ([context, tags]) => {
        const r = await window.axe.run(document.querySelector(context) || document,
                                       {runOnly: {type: 'tag', values: tags}, resultTypes: ['violations']});
        return r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
            nodes: v.nodes.slice(0, 5).map(n => n.target.join(' ') + ' :: ' + n.failureSummary.slice(0, 160))}));
    }""", [context, AXE_TAGS])
    return [v for v in result if v["impact"] in impacts]
