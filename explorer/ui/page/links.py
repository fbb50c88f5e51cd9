"""Addresses of what the page shows: ``?run=ID``, ``?compare=A,B``, ``?case=NAME`` (and ``&present=1``).

A teacher prepares a lesson as a list of links: each opens its view directly when the page loads
(or when a case-study link on the page is followed). A fork is a run, so ``?run=`` opens a fork
beside its parent; recorded case studies are runs too (their traces are pinned in the view's
cache), so they can be linked, compared and exported like stored runs. This module turns the
query into what to show, with a clear message for a link that names nothing known.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from explorer.errors import ExplorerError, public_message
from explorer.ui.page.viewblock import Shown
from explorer.ui.runs import gallery
from explorer.ui.runs.history import TraceCache

_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
#: The most runs one comparison link opens: every method ticked at once (nine) and the History tab's
#: larger selections, well under the view's trace cache (64), so a comparison never evicts its own runs.
MAX_COMPARE = 32


@dataclass
class Opened:
    """What a link opens: the runs to show, the recorded item among them (for its note), and a status line."""

    shown: Shown
    item: gallery.Item | None
    status: str


class LinkError(ExplorerError):
    """A link that names nothing known. Its message holds the link's own text and fixed words, never a server
    path, so it is shown as it is (:func:`link_problem`), not cut down to path-free text."""


def quoted(text: str, limit: int = 80) -> str:
    """The link's text as the visitor wrote it, in quotes: printable characters as they are (slashes, quotes,
    backslashes and markup included), others as ``\\uXXXX``, cut after ``limit`` characters."""
    shown = "".join(ch if ch.isprintable() else f"\\u{ord(ch):04x}" for ch in text[:limit])
    return f"“{shown}”" + (f" (first {limit} of {len(text)} characters)" if len(text) > limit else "")


def link_problem(exc: ExplorerError) -> str:
    """What the page says of a link that opens nothing."""
    return "This link opens nothing: " + (exc.message if isinstance(exc, LinkError) else public_message(exc))


def _run_id(text: str, where: str) -> str:
    text = (text or "").strip()
    if not _ID.match(text):
        raise LinkError(f"{quoted(text)} is not a run id", where=where,
                        fix="copy the link from the page again (a run id is letters, digits and dashes)")
    return text


def case_item(shelf: gallery.Gallery, name: str) -> gallery.Item:
    """A recorded case by its key (``dragin-flare``) or its case alone (``seakr``: that paper's own method)."""
    given = (name or "").strip()
    name = given.lower()
    item = shelf.item(name) or shelf.item(f"{name}-{name}") or next((i for i in shelf.items if i.case == name), None)
    if item is None:
        known = ", ".join(i.key for i in shelf.items) or "none (the recorded runs are missing)"
        raise LinkError(f"no recorded case study {quoted(given)}", where="case", fix=f"use one of {known}")
    return item


def shown_for(item: gallery.Item, shelf: gallery.Gallery) -> Shown:
    """The runs a case link opens: the recorded item, with its contrast beside it when it has one."""
    return Shown([i.run_id for i in shelf.shown_with(item)])


def recorded_item(shelf: gallery.Gallery, run_id: str) -> gallery.Item | None:
    return next((i for i in shelf.items if i.run_id == run_id), None)


def open_link(params: Mapping[str, Any], cache: TraceCache, shelf: gallery.Gallery) -> Opened | None:
    """What ``params`` (the page's query) asks to show; None when it names nothing to open.

    Raises ExplorerError for a link naming a run that is not stored, or a malformed one."""
    case, run, compare = (str(params.get(k) or "").strip() for k in ("case", "run", "compare"))
    if case:
        item = case_item(shelf, case)
        beside = shelf.item(item.beside) if item.beside else None
        also = f", beside the {method_title(beside.method)} run it is contrasted with" if beside is not None else ""
        return Opened(shown_for(item, shelf), item, f"Opened the recorded {item.label}{also} (no model call).")
    if run:
        run_id = _run_id(run, "run")
        trace = cache.get(run_id)  # raises the store's "no run" error
        parent = (trace.fork or {}).get("parent") if isinstance(trace.fork, dict) else None
        if parent:
            try:
                cache.get(str(parent))
                return Opened(Shown([str(parent), run_id], fork=True), None,
                              f"Opened fork {run_id[:12]} beside its parent {str(parent)[:12]}.")
            except ExplorerError:
                pass  # the parent is gone: the fork alone
        item = recorded_item(shelf, run_id)
        return Opened(Shown([run_id]), item, f"Opened run {run_id[:12]}" + (" (recorded)." if item else "."))
    if compare:
        ids = list(dict.fromkeys(_run_id(part, "compare") for part in compare.split(",") if part.strip()))
        if len(ids) < 2 or len(ids) > MAX_COMPARE:
            raise LinkError(f"a comparison link names {len(ids)} run(s)", where="compare",
                                fix=f"give 2 to {MAX_COMPARE} run ids separated by commas: ?compare=ID1,ID2")
        for run_id in ids:
            cache.get(run_id)
        return Opened(Shown(ids, compare=True), None, f"Comparing {len(ids)} runs.")
    return None


def case_links(shelf: gallery.Gallery) -> list[tuple[str, list[tuple[str, str]], str]]:
    """The recorded runs grouped by case study: (title, [(method label, key)], comparison link or '').

    A run recorded as another's contrast (DR-RAG's one-shot SR-RAG run) has no link of its own: it
    opens beside the run it is contrasted with (``?case=drrag-sr`` still opens it alone). A case's own
    method's run keeps its link when newer methods are recorded beside it (DRAGIN beside ETC)."""
    contrasts = {i.beside for i in shelf.items if i.beside} - {i.key for i in shelf.items if i.method == i.case}
    out: list[tuple[str, list[tuple[str, str]], str]] = []
    for case in dict.fromkeys(i.case for i in shelf.items):
        items = [i for i in shelf.items if i.case == case and i.key not in contrasts]
        compare = "?compare=" + ",".join(i.run_id for i in items) if len(items) > 1 else ""
        out.append((gallery.CASE_TITLES.get(case, case), [(case_label(shelf, i), i.key) for i in items], compare))
    return out


def case_label(shelf: gallery.Gallery, item: gallery.Item) -> str:
    """A case link's text: the method, and the run shown beside it, if any (``DR-RAG vs SR-RAG``)."""
    beside = shelf.item(item.beside) if item.beside else None
    if beside is None or beside.method == item.case:  # beside the case's own method: the group says which
        return method_title(item.method)
    return method_title(item.method) + f" vs {method_title(beside.method)}"


def method_title(method: str) -> str:
    try:
        from explorer.methods.base import get_method

        return get_method(method).title.split(" (")[0]
    except ExplorerError:
        return method
