"""The line beside Run that says, before a live run, how long it will take on this server, and offers the
recorded run of the same method instead (it opens at once, with no model call).

The figure comes from :meth:`~explorer.ui.runs.controller.RunController.wait_estimate`: run lengths
measured on this server per method and model, or a first estimate that says it is one. The offer is
an ordinary case-study link (``?case=KEY``), so the page's script opens it in place like the links
above the view.
"""

from __future__ import annotations

from typing import Any

from explorer.ui.page import links
from explorer.ui.runs import gallery
from explorer.ui.views.html import esc


def recorded_for(shelf: gallery.Gallery, method: str) -> gallery.Item | None:
    """The recorded run of ``method``: its own paper's case study when it has one, else the first case that ran it."""
    own = [i for i in shelf.items if i.method == method]
    return next((i for i in own if i.case == method), own[0] if own else None)


def offer_html(shelf: gallery.Gallery, methods: list[str]) -> str:
    """Links to the recorded runs of ``methods`` (those that have one); "" when none has."""
    found = [(m, item) for m in methods if (item := recorded_for(shelf, m)) is not None]
    if not found:
        return ""
    alone = len(found) == 1
    each = " · ".join(f'<a href="?case={esc(item.key)}" data-case="{esc(item.key)}" '
                      f'aria-label="open the recorded {esc(links.method_title(m))} run of the '
                      f'{esc(gallery.CASE_TITLES.get(item.case, item.case))} case study, no wait">'
                      f"{esc(links.method_title(m))}{' run' if alone else ''}</a>" for m, item in found)
    return f' <span class="dre-wait-offer">No wait: the recorded {each if alone else "runs of " + each}.</span>'


def wait_html(controller: Any, shelf: gallery.Gallery, methods: list[str]) -> str:
    """The line for the ticked ``methods``: the live run's likely length here, and the recorded runs instead."""
    methods = list(methods or [])
    if not methods:
        return ""
    estimate = controller.wait_estimate(methods)
    names = " + ".join(links.method_title(m) for m in methods)
    return (f'<div class="dre-root dre-note dre-wait" data-measured="{int(estimate.measured)}">'
            f"Live run of {esc(names)}: "
            f"{esc(estimate.describe())}.{offer_html(shelf, methods)}</div>")
