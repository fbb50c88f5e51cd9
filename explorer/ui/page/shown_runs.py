"""Which stored runs a view shows, and the view's HTML for them: the part of a view block its fork menus share.

Kept apart from :mod:`explorer.ui.page.viewblock` (which builds the block and its controls) so that the fork
menus (:mod:`explorer.ui.page.forkblock`), which the block wires in, can show a fork beside its parent
without importing the block back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from explorer.errors import ExplorerError
from explorer.trace import Trace
from explorer.ui.panels.fork import render_family
from explorer.ui.runs.history import TraceCache
from explorer.ui.views.render import render_comparison, render_fork, render_runs, theta_range


@dataclass
class Shown:
    """Which stored runs a view shows, and whether as a comparison."""

    ids: list[str]
    compare: bool = False
    #: ``ids`` are a parent and its fork, shown with the fork's diff.
    fork: bool = False

    def to_state(self) -> dict[str, Any]:
        return {"ids": list(self.ids), "compare": self.compare, "fork": self.fork}

    @classmethod
    def of(cls, state: Any) -> Shown:
        if isinstance(state, dict):
            return cls(ids=list(state.get("ids") or []), compare=bool(state.get("compare")),
                       fork=bool(state.get("fork")))
        return cls(ids=[])


def traces(cache: TraceCache, shown: Shown) -> list[Trace]:
    out = []
    for run_id in shown.ids:
        try:
            out.append(cache.get(run_id))
        except Exception:  # deleted meanwhile: show the rest
            continue
    return out


def render(cache: TraceCache, state: Any, signal: str, run: str | None, theta: float | None) -> str:
    shown = Shown.of(state)
    found = traces(cache, shown)
    if not found:
        return render_runs([])
    whatif_at = {run: float(theta)} if run and theta is not None else {}
    if shown.compare and len(found) > 1:
        return render_comparison(found, signal=signal, whatif_at=whatif_at, interactive=True)
    if shown.fork and len(found) == 2:
        return render_fork(found[0], found[1], signal=signal, whatif_at=whatif_at,
                           family=family_html(cache, found[1].run_id), interactive=True)
    family = family_html(cache, found[0].run_id) if len(found) == 1 else ""
    return render_runs(found, signal=signal, whatif_at=whatif_at, below=family, interactive=True)


def family_html(cache: TraceCache, run_id: str) -> str:
    """The family tree of a stored run when it has forks or is one ('' for a run alone or not stored)."""
    try:
        return render_family(cache.store.family(run_id), current=run_id)
    except ExplorerError:
        return ""


def theta_update(cache: TraceCache, run: str | None) -> dict[str, Any]:
    """The what-if range of a run: spanning its recorded values, starting at its recorded threshold."""
    if not run:
        return {"visible": False, "value": None}
    found = theta_range(cache.get(run))
    if found is None:
        return {"visible": False, "value": None}
    lo, hi, step, theta = found
    return {"visible": True, "minimum": lo, "maximum": hi, "step": step, "value": theta}


def after_show(cache: TraceCache, shown: Shown, signal: str) -> tuple[Any, Any, Any, Any]:
    """Updates for (html, state, what-if run, θ') when a view starts showing other runs (no what-if yet)."""
    return render(cache, shown.to_state(), signal, None, None), shown.to_state(), None, None
