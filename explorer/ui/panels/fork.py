"""A fork beside its parent: what changed where, the token-level diff of the two continuations and of
the answers, and what the fork replayed instead of running; and the family tree of forks.

Everything comes from the two traces (:func:`explorer.forks.diff.diff_runs`) and the store's
family rows; every piece of model, corpus or user text is escaped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from explorer import naming
from explorer.forks import ForkChange, ForkPoint
from explorer.forks.diff import DiffOp, ForkDiff, diff_runs, fork_marker
from explorer.trace import Trace
from explorer.ui.views.html import badge, esc, fmt, section, short


def is_fork_of(child: Trace, parent: Trace) -> bool:
    """Whether ``child`` was forked from ``parent`` (directly)."""
    return isinstance(child.fork, dict) and child.fork.get("parent") == parent.run_id


def _describe_change(change: dict[str, Any] | None) -> str:
    try:
        return ForkChange.from_dict(change or {}).describe()
    except Exception:  # noqa: BLE001 - a change from a newer version: shown as it was stored
        return str(change)


def _describe_point(at: dict[str, Any] | None) -> str:
    try:
        return ForkPoint.from_dict(at or {}).describe()
    except Exception:  # noqa: BLE001
        return str(at)


def _token_text(tokens: list[str]) -> str:
    """Model tokens joined as written, a new line shown as ↵ before it."""
    return "".join(tokens).replace("\n", "↵\n")


def ops_html(ops: list[DiffOp], *, joiner: str = "", show: Callable[[list[str]], str] | None = None) -> str:
    """A diff as escaped HTML: shared text plain, the parent's only struck in <del>, the fork's only in <ins>.

    ``show`` turns a side's pieces into text (default: joined by ``joiner``).
    """
    text = show or joiner.join
    parts = []
    for op in ops:
        a, b = text(op.parent), text(op.child)
        if op.tag == "equal":
            parts.append(f'<span class="dre-same">{esc(a)}</span>')
            continue
        if op.tag in ("delete", "replace") and a:
            parts.append(f'<del title="only in the parent">{esc(a)}</del>')
        if op.tag in ("insert", "replace") and b:
            parts.append(f'<ins title="only in the fork">{esc(b)}</ins>')
    return joiner.join(parts)


def _costs(child: Trace) -> str:
    c = child.costs
    live = max(c.generated_tokens - c.replayed_tokens, 0)
    rows = [("spans replayed from the parent", c.replayed_spans),
            ("tokens replayed (not generated)", c.replayed_tokens),
            ("retrievals reused (not searched)", c.reused_retrievals), ("tokens generated live", live),
            ("retrievals searched live", max(c.retrievals - c.reused_retrievals, 0)),
            ("forward passes", c.forward_passes), ("wall time (s)", c.total_time)]
    body = "".join(f"<tr><td>{esc(name)}</td><td>{esc(fmt(v))}</td></tr>" for name, v in rows)
    return f'<table class="dre-table dre-fork-costs"><tr><th>the fork</th><th></th></tr>{body}</table>'


def _notes(child: Trace) -> str:
    event = fork_marker(child.events)
    if event is None:
        return ""
    notes = [str(n) for n in event.payload.get("notes") or []]
    if event.payload.get("unplanned"):
        notes.insert(0, f"went live early: {event.payload['unplanned']}")
    return "".join(f'<p class="dre-note">{esc(n)}</p>' for n in notes)


def render(parent: Trace, child: Trace, diff: ForkDiff | None = None) -> str:
    """The fork panel for ``child`` shown beside ``parent``."""
    d = diff or diff_runs(parent, child)
    fork = child.fork if isinstance(child.fork, dict) else {}
    if d.parent_event is not None and 0 <= d.parent_event < len(parent.events):
        where = (f"everything up to {naming.event(parent.events[d.parent_event].kind, d.parent_event)} of the "
                 "parent was replayed, the rest is new")
    elif d.parent_event is not None:
        where = f"the parent was replayed up to its event {d.parent_event}"
    else:
        where = "no divergence recorded: the fork ended before its point"
    depth = int(fork.get("depth", 1) or 1)
    generation = "" if depth <= 1 else f" · a fork of a fork ({depth} levels down)"
    head = (f'<p class="dre-fork-what"><b>{esc(_describe_change(fork.get("change") or d.change))}</b> at '
            f'{esc(_describe_point(fork.get("at")))} · {esc(where)}{esc(generation)} · '
            f'parent <code>{esc(parent.run_id[:12])}</code> → fork <code>{esc(child.run_id[:12])}</code></p>')
    verdict = badge("same answer", "same") if d.same_answer else badge("answer changed", "changed")
    answers = (f'<table class="dre-table dre-fork-answers">'
               f'<tr><th>parent</th><td>{esc(d.parent_answer or "–")}</td></tr>'
               f'<tr><th>fork</th><td>{esc(d.child_answer or "–")}</td></tr>'
               f'<tr><th>diff</th><td class="dre-diff">{ops_html(d.answer, joiner=" ")}</td></tr></table>')
    shared = d.first_difference
    lead = ("The two continuations are identical from the divergence on." if shared is None else
            f"After the divergence the two runs wrote {shared} token(s) alike, then parted.")
    written = ops_html(d.tokens, show=_token_text) or "<i>no tokens</i>"
    tokens = (f'<p class="dre-note">{esc(lead)} Struck: only the parent wrote it; underlined: only the fork.</p>'
              f'<div class="dre-diff dre-fork-tokens">{written}</div>')
    body = (head + _notes(child) + f'<h4>Answer {verdict}</h4>' + answers
            + "<h4>Continuation, token by token</h4>" + tokens + "<h4>What the fork replayed</h4>" + _costs(child))
    return section("Fork: what changed", f'<div class="dre-fork" data-parent="{esc(parent.run_id)}" '
                   f'data-child="{esc(child.run_id)}">{body}</div>', panel="fork")


# -- the family tree -----------------------------------------------------------------------------------------
def _node(row: dict[str, Any], current: str | None) -> str:
    run_id = str(row.get("run_id", ""))
    what = (f'{_describe_change(row.get("change"))} at {_describe_point(row.get("at"))}'
            if row.get("parent_run_id") else "the first run")
    label = (f'{row.get("method")}/{row.get("variant")} · {what} · {row.get("status")} · '
             f'answer: {short(row.get("answer") or "–", 80)}')
    mine = run_id == current
    title = "Open this run" + (" beside its parent" if row.get("parent_run_id") else "")
    return (f'<button type="button" class="dre-fam-node{" current" if mine else ""}" data-open-run="{esc(run_id)}"'
            f'{" aria-current=true" if mine else ""} title="{title}">'
            f'<code>{esc(run_id[:8])}</code> {esc(label)}</button>')


def render_family(rows: list[dict[str, Any]], current: str | None = None) -> str:
    """The family of a run as a tree: its first run, the forks of it, their forks, each openable."""
    if len(rows) < 2:
        return ""
    ids = {str(r.get("run_id")) for r in rows}
    kids: dict[str | None, list[dict[str, Any]]] = {}
    for row in rows:
        parent = row.get("parent_run_id")
        kids.setdefault(parent if parent in ids else None, []).append(row)

    def branch(parent: str | None, depth: int) -> str:
        items = []
        for row in kids.get(parent, []):
            run_id = str(row.get("run_id"))
            missing = (' <span class="dre-note">(its parent is not stored here)</span>'
                       if parent is None and row.get("parent_run_id") else "")
            below = branch(run_id, depth + 1) if depth < 64 else ""
            items.append(f"<li>{_node(row, current)}{missing}{below}</li>")
        return f'<ul class="dre-family">{"".join(items)}</ul>' if items else ""

    note = ('<p class="dre-note">Forks of this run and forks of forks, oldest first. Open one to see it beside '
            "its parent with the diff.</p>")
    return section(f"Family ({len(rows)} runs)", note + branch(None, 0), panel="family")
