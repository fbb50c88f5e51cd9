"""Exports: a run's trace as JSON, one or more runs as a self-contained HTML report, the history as CSV.

The report is the app's own view of the runs (same renderer, same stylesheet and chart script)
with Plotly's JavaScript taken from the installed ``plotly`` package and inlined, so it opens
from a file with no network at all. A Content-Security-Policy forbids every fetch and every
inline event handler: only the report's own scripts, identified by their hashes, may run.
"""

from __future__ import annotations

import base64
import hashlib
import re
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

import plotly

from explorer.paths import ASSETS_DIR
from explorer.trace import Trace
from explorer.ui.views.html import esc
from explorer.ui.views.render import render_comparison, render_runs

PLOTLY_JS = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"
EXPLORER_JS = ASSETS_DIR / "explorer.js"
EXPLORER_CSS = ASSETS_DIR / "explorer.css"
#: An export for slides: the type a room can read (presenting mode in the app uses the same sizes).
SLIDES_CSS = ("body.dre-slides .dre-root{font-size:20px}body.dre-slides .dre-tokens{font-size:21px}"
              "body.dre-slides .dre-panel h3{font-size:22px}body.dre-slides .dre-title{font-size:26px}"
              "body.dre-slides{padding-bottom:160px}")


@cache
def _asset(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _inline_script(code: str) -> tuple[str, str]:
    """A <script> element for ``code`` and its CSP hash (a closing tag inside is neutralised)."""
    code = re.sub(r"</(script)", r"<\\/\1", code, flags=re.IGNORECASE)
    digest = base64.b64encode(hashlib.sha256(code.encode("utf-8")).digest()).decode("ascii")
    return f"<script>{code}</script>", f"'sha256-{digest}'"


def safe_filename(text: str, suffix: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:80] or "run"
    return f"{stem}{suffix}"


def report_html(traces: list[Trace], *, signal: str = "prob", title: str | None = None, slides: bool = False,
                above: str = "") -> str:
    """A standalone HTML page showing ``traces`` (side by side, compared when there are several).

    ``slides``: for a class, the page opens in presenting mode (large type; the arrow keys step from
    one decision to the next with its explanation, as in the app); ``above``: trusted markup written
    by the explorer between the head line and the runs (a recorded case study's caption)."""
    if not traces:
        raise ValueError("a report needs at least one run")
    title = title or (f"{traces[0].method}/{traces[0].variant}: {traces[0].question}" if len(traces) == 1
                      else f"Comparison of {len(traces)} runs: {traces[0].question}")
    body = (render_runs(traces, signal=signal) if len(traces) == 1
            else render_comparison(traces, signal=signal, compact=False))
    scripts, hashes = [], []
    start = "window.DRE.render(document.body);" + (" window.DRE.present(true);" if slides else "")
    for code in (_asset(PLOTLY_JS), _asset(EXPLORER_JS), start):
        tag, digest = _inline_script(code)
        scripts.append(tag)
        hashes.append(digest)
    csp = (f"default-src 'none'; script-src {' '.join(hashes)} 'unsafe-eval'; style-src 'unsafe-inline'; "
           "img-src data: blob:; font-src data:")
    generated = datetime.now(UTC).isoformat(timespec="seconds")
    # A panel title's "?" and a word's glossary link open the app's help tab; a report has none.
    style = _asset(EXPLORER_CSS) + ".dre-help,.dre-term-link{display:none}" + (SLIDES_CSS if slides else "")
    head = (f'<div class="dre-root dre-report-head"><b>Dynamic RAG Explorer</b> · report generated {esc(generated)} · '
            f"{len(traces)} run(s) · opens offline; hover a token or a bar for its values"
            + (" · → and ← step through the decisions, Esc stops presenting" if slides else "") + "</div>")
    return (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{esc(csp)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>body{{margin:16px;background:#f8fafc}}{style}</style>"
        f'</head><body class="{"dre-slides" if slides else "dre-report"}">{head}{above}{body}{"".join(scripts)}'
        "</body></html>")


def trace_json(trace: Trace) -> str:
    return trace.to_json(indent=1)
