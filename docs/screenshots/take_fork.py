"""Take docs/screenshots/fork.png: a DRAGIN run forked from a token's menu, the fork beside its parent.

Run from the repository root (it starts the app on the demo corpus with a throw-away database
and drives Debian's chromium, as the browser tests do)::

    .venv/bin/python docs/screenshots/take_fork.py [--out docs/screenshots/fork.png]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.browser_support import (  # noqa: E402
    browser_context,
    click_run,
    open_app,
    pick_question,
    set_methods,
    set_param,
    start_app,
    wait_done,
    wait_ready,
)

QUERY = "Androscoggin Bank Colisée seating capacity"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots" / "fork.png")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fork-shot-") as work:
        app = start_app(Path(work), name="fork-shot")
        try:
            with browser_context() as ctx:
                page = ctx.new_page()
                open_app(page, app.url)
                wait_ready(page)
                pick_question(page, "seating capacity")
                set_methods(page, ["dragin"])
                for name, value in (("max_length", 32), ("fewshot", 2), ("answer_tokens", 8), ("threshold", 0.3)):
                    set_param(page, "dragin", name, value)
                click_run(page)
                wait_done(page)
                # the menu of a token early in the text, where DRAGIN did not retrieve: force it there
                tokens = page.locator("#run-view .dre-span:not(.group) .tok")
                for i in range(2, tokens.count()):
                    tokens.nth(i).click()
                    page.wait_for_selector(".dre-forkmenu [role=menuitem]")
                    if page.locator(".dre-forkmenu [data-kind=force_retrieval]").is_enabled():
                        break
                    page.keyboard.press("Escape")
                page.locator(".dre-forkmenu [data-kind=force_retrieval]").click()
                page.locator(".dre-forkmenu .dre-fm-query").fill(QUERY)
                page.locator(".dre-forkmenu .dre-fm-go").click()
                page.wait_for_selector("#run-view .dre-forkpair", timeout=240_000)
                wait_done(page, runs=2)
                # page coordinates (a full-page clip): from the top of the view to the end of the two strips
                clip = page.evaluate("""() => {
                    const view = document.querySelector('#run-view').getBoundingClientRect();
                    const strips = [...document.querySelectorAll('#run-view .dre-forkpair [data-panel=strip]')];
                    const bottom = Math.max(...strips.map((s) => s.getBoundingClientRect().bottom));
                    return {x: view.left + window.scrollX, y: view.top + window.scrollY, width: view.width,
                            height: bottom - view.top + 12};
                }""")
                args.out.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(args.out), clip=clip, full_page=True)
                print(f"wrote {args.out}")
        finally:
            app.stop()


if __name__ == "__main__":
    main()
