"""Take docs/screenshots/lesson-projector.png and lesson-phone.png: a lesson on a recorded case study.

The projector is a 1280x720 page presenting DRAGIN's recorded case (``?case=dragin``) with the
lesson panel's follow link, code and QR code shown; the phone is a 390x844 page following it
(``?follow=CODE``), on the same decision. Both are taken in Debian's chromium, as the browser tests
do, on an app started with a throw-away database. The recorded case needs no model call, so the app
loads the tiny random model (``random:tiny``) to start at once.

Run from the repository root::

    .venv/bin/python docs/screenshots/take_lesson.py [--out docs/screenshots] [--step N]

The PNGs are reduced to a palette of 256 colours so each stays under 300 KB.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.browser_support import chromium_browser, start_app  # noqa: E402

PROJECTOR = {"viewport": {"width": 1280, "height": 720}}
#: One image pixel per CSS pixel, so the picture shows the phone's screen at the size a page shows it.
PHONE = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True, "device_scale_factor": 1}
LIMIT = 300_000


def small_png(path: Path) -> int:
    """Rewrite a screenshot with a 256-colour palette (screens of text lose nothing visible); its size."""
    from PIL import Image

    with Image.open(path) as image:
        image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
    return path.stat().st_size


def take(out: Path, step: int) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    projector_png, phone_png = out / "lesson-projector.png", out / "lesson-phone.png"
    with tempfile.TemporaryDirectory(prefix="lesson-shot-") as work:
        app = start_app(Path(work), name="lesson-shot", timeout=240, extra_args=("--model", "random:tiny"))
        try:
            with chromium_browser() as browser:
                projector = browser.new_context(**PROJECTOR).new_page()
                projector.goto(app.url + "?case=dragin", timeout=120_000)
                projector.wait_for_selector("#run-view .dre-run[data-view=done]", timeout=120_000)
                projector.wait_for_function("() => !document.querySelector('#run-view .dre-plot:not([data-done])')",
                                            timeout=60_000)
                projector.locator("#present-toggle").click()
                projector.wait_for_selector("#dre-lesson .dre-ls-code", timeout=30_000)
                code = projector.locator("#dre-lesson .dre-ls-code").inner_text()
                for _ in range(step):
                    projector.keyboard.press("ArrowRight")

                phone = browser.new_context(**PHONE).new_page()
                phone.goto(app.url + f"?follow={code}", timeout=120_000)
                want = projector.locator("#dre-presenter").get_attribute("data-index")
                phone.wait_for_function(
                    "(w) => document.querySelector('#dre-presenter')?.getAttribute('data-index') === w",
                    arg=want, timeout=60_000)
                projector.wait_for_function("() => /1 following/.test(document.querySelector('#dre-lesson')"
                                            ".innerText)", timeout=30_000)
                projector.locator("#dre-lesson [data-qr]").click()  # the QR code, for the class to scan
                projector.wait_for_selector("#dre-lesson-qr img", timeout=10_000)
                projector.wait_for_timeout(500)
                phone.wait_for_timeout(500)
                projector.screenshot(path=str(projector_png))
                phone.screenshot(path=str(phone_png))
        finally:
            app.stop()
    for path in (projector_png, phone_png):
        size = small_png(path)
        print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {size / 1000:.0f} KB")
        if size > LIMIT:
            raise SystemExit(f"{path} is {size} bytes, over {LIMIT}: take it at a smaller size")
    return [projector_png, phone_png]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--step", type=int, default=0,
                        help="decisions to step on from the first before the shots (default 0: the first)")
    args = parser.parse_args()
    take(args.out, args.step)


if __name__ == "__main__":
    main()
