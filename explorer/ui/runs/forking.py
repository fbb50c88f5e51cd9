"""What the web app offers at a token or a retrieval of a stored run, and how a fork request becomes a plan.

The token menu and the retrieval card's menu offer only what :func:`explorer.forks.resolve`
accepts at that point: every action is checked against the run's trace before it is shown, and
one it refuses is listed with the refusal's own message (what was wrong and what to choose
instead). A request sent from the page (or typed into the ``/fork`` endpoint) is turned into a
:class:`~explorer.forks.ForkPlan` here, with a clear error for anything malformed.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from explorer import naming
from explorer.errors import ConfigError, ExplorerError, check_text, json_problem, parse_json
from explorer.forks import ForkChange, ForkPlan, ForkPoint, parse_at, resolve
from explorer.forks.plan import RETRIEVAL_CHANGES, TOKEN_CHANGES
from explorer.forks.run import check_forkable
from explorer.retrieval.base import Retriever
from explorer.trace import Trace

#: What each action is called in the menus.
LABELS = {"force_retrieval": "Force retrieval here", "set_params": "Change parameters from this span",
          "none": "Replay from here without change", "suppress_retrieval": "Suppress this retrieval",
          "edit_query": "Edit the query", "edit_passages": "Edit the passages"}
TOKEN_ACTIONS = TOKEN_CHANGES
#: A retrieval card's menu: its changes ("no change" is offered on tokens).
RETRIEVAL_ACTIONS = tuple(kind for kind in RETRIEVAL_CHANGES if kind != "none")
#: At most this many passages in a search of the corpus from the passage editor.
SEARCH_K = 8


@dataclass
class Action:
    """One entry of a fork menu: whether ``resolve`` accepts it here and, if not, its message."""

    kind: str
    label: str
    ok: bool
    message: str = ""
    #: The action asks for a query (``required``: it cannot run without one), parameters or passages.
    needs: str = ""
    required: bool = False
    params: list[dict[str, Any]] = field(default_factory=list)
    query: str = ""
    passages: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def numeric_params(trace: Trace) -> list[dict[str, Any]]:
    """The method's numeric quick parameters with the values this run used (what "change parameters" edits)."""
    from explorer.ui.page import controls

    try:
        declared = controls.params(trace.method)
    except ExplorerError:
        return []
    out = []
    for p in declared:
        value = trace.config.get(p.name)
        if p.type in ("int", "float") and isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append({"name": p.name, "value": value, "type": p.type, "lo": p.lo, "hi": p.hi, "help": p.help})
    return out


def _try(trace: Trace, plan: ForkPlan) -> str:
    """'' when ``resolve`` accepts the plan, else its message."""
    try:
        resolve(trace, plan)
    except ExplorerError as exc:
        return exc.message
    return ""


def _forkable(trace: Trace) -> str:
    """'' when the run can be forked at all, else why not."""
    try:
        check_forkable(trace)
    except ExplorerError as exc:
        return exc.message
    return ""


def token_actions(trace: Trace, span: int, token: int) -> list[Action]:
    """The token menu at ``token`` of generation event ``span``: each action as ``resolve`` judges it."""
    point = ForkPoint(span=span, token=token)
    blocked = _forkable(trace)
    out = []
    for kind in TOKEN_ACTIONS:
        action = Action(kind, LABELS[kind], ok=False)
        if kind == "force_retrieval":
            action.needs = "query"
            problem = blocked or _try(trace, ForkPlan(trace.run_id, point, ForkChange(kind)))
            if problem and not blocked and not _try(trace, ForkPlan(trace.run_id, point, ForkChange(kind, query="q"))):
                action.required = True  # retrieval already fired here: only a query of the user's own changes it
                action.message, problem = problem, ""
            action.ok = not problem
            action.message = problem or action.message
        elif kind == "set_params":
            action.needs, action.params = "params", numeric_params(trace)
            if not action.params:
                action.message = f"{trace.method} has no numeric parameter to change"
            else:
                first = action.params[0]
                action.message = blocked or _try(trace, ForkPlan(trace.run_id, point, ForkChange(
                    kind, params={first["name"]: first["value"]})))
                action.ok = not action.message
        else:
            action.message = blocked or _try(trace, ForkPlan(trace.run_id, point, ForkChange(kind)))
            action.ok = not action.message
        out.append(action)
    return out


def retrieval_actions(trace: Trace, retrieval: int) -> list[Action]:
    """The retrieval card's menu for retrieval event ``retrieval``, with its query and passages to start from."""
    point = ForkPoint(retrieval=retrieval)
    blocked = _forkable(trace)
    event = trace.events[retrieval] if 0 <= retrieval < len(trace.events) else None
    hits = list(event.payload.get("hits") or []) if event is not None and event.kind == "retrieval" else []
    query_id = event.payload.get("query") if event is not None else None
    query = ""
    if isinstance(query_id, int) and 0 <= query_id < len(trace.events):
        query = str(trace.events[query_id].payload.get("text", ""))
    passages = [{"id": str(h.get("id", "")), "title": str(h.get("title", "")), "text": _short(h.get("text"))}
                for h in hits]
    out = []
    for kind in RETRIEVAL_ACTIONS:
        change = ForkChange(kind, query=(query or "q") if kind == "edit_query" else None,
                            passages=tuple(p["id"] for p in passages) if kind == "edit_passages" else None)
        message = blocked or _try(trace, ForkPlan(trace.run_id, point, change))
        action = Action(kind, LABELS[kind], ok=not message, message=message)
        if kind == "edit_query":
            action.needs, action.required, action.query = "query", True, query
        elif kind == "edit_passages":
            action.needs, action.passages = "passages", passages
        out.append(action)
    return out


def _short(text: Any, width: int = 220) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


def menu(trace: Trace, where: dict[str, Any]) -> dict[str, Any]:
    """The menu for a point the page names: ``{"span", "token"}`` or ``{"retrieval"}``."""
    try:
        if where.get("retrieval") is not None:
            retrieval = int(where["retrieval"])
            return {"title": f"Fork at {naming.event('retrieval', retrieval)}",
                    "actions": [a.to_dict() for a in retrieval_actions(trace, retrieval)]}
        span, token = int(where["span"]), int(where.get("token") or 0)
    except (KeyError, TypeError, ValueError):
        raise ExplorerError("the fork point is not a token or a retrieval", where="fork point",
                            fix="open the menu on a token of the strip or on a retrieval card") from None
    return {"title": f"Fork at {naming.token(span, token)}",
            "actions": [a.to_dict() for a in token_actions(trace, span, token)]}


# -- requests ----------------------------------------------------------------------------------------------
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def _value(text: Any) -> Any:
    """A parameter value as typed: numbers become numbers, true/false booleans, the rest stays text."""
    if not isinstance(text, str):
        return text
    s = text.strip()
    if _NUMBER.match(s):
        return int(s) if re.match(r"^[+-]?\d+$", s) else float(s)
    if s.lower() in ("true", "false"):
        return s.lower() == "true"
    return s


def parse_params(text: Any) -> dict[str, Any]:
    """``{"threshold": 0.8}`` (JSON, or a dict) or ``threshold=0.8, max_length=40`` as typed."""
    if isinstance(text, dict):
        return {str(k): _value(v) for k, v in text.items()}
    text = (text or "").strip() if isinstance(text, str) else text
    if not text:
        return {}
    if not isinstance(text, str):
        raise ConfigError(f"parameters must be text or an object, not {type(text).__name__}", where="params",
                          fix='give {"threshold": 0.8} or threshold=0.8')
    if text.startswith("{"):
        values = _json(text, "parameters are", "params", dict, '{"threshold": 0.8}')
        return {str(k): _value(v) for k, v in values.items()}
    out: dict[str, Any] = {}
    for part in re.split(r"[,\n;]", text):
        if not part.strip():
            continue
        name, eq, value = part.partition("=")
        if not eq or not name.strip():
            raise ConfigError(f"{part.strip()!r} is not NAME=VALUE", where="params", fix="write threshold=0.8")
        out[name.strip()] = _value(value)
    return out


def _json(text: str, what: str, where: str, expected: type | tuple[type, ...], example: str) -> Any:
    """``text`` parsed as JSON of the ``expected`` type, or a ConfigError saying what was wrong and what to give."""
    try:
        value = parse_json(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{what} not valid JSON ({json_problem(exc)})", where=where, fix=f"give {example}") from None
    if not isinstance(value, expected):
        raise ConfigError(f"{what} not of the right JSON type ({type(value).__name__})", where=where,
                          fix=f"give {example}")
    return value


def parse_passages(value: Any) -> tuple[str, ...] | None:
    """Passage ids in order: a list, a JSON list, or ids separated by commas or new lines (None: not given)."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return tuple(str(v).strip() for v in value if str(v).strip())
    text = str(value).strip()
    if not text:
        return None
    if text.startswith("["):
        items = _json(text, "passages are", "passages", list, '["id1", "id2"]')
        return tuple(str(v).strip() for v in items if str(v).strip())
    return tuple(p.strip() for p in re.split(r"[,\n]", text) if p.strip())


def point_of(at: Any = None, retrieval: Any = None) -> ForkPoint:
    """The fork point from ``at`` ("SPAN:TOKEN" or {"span", "token"}) or ``retrieval`` (an event id)."""
    if retrieval not in (None, "", -1):
        try:
            return ForkPoint(retrieval=int(retrieval))
        except (TypeError, ValueError):
            raise ConfigError(f"{retrieval!r} is not a retrieval event id", where="retrieval",
                              fix="give the id of one of the run's retrieval events, e.g. 5") from None
    if isinstance(at, dict):
        try:
            return ForkPoint.from_dict(at)
        except (TypeError, ValueError):
            raise ConfigError(f"{at!r} is not a fork point", where="at",
                              fix='give {"span": 7, "token": 12} or {"retrieval": 5}') from None
    if at in (None, ""):
        raise ConfigError("no fork point given", where="at",
                          fix="give at=SPAN:TOKEN (a generation event id and a token index) or a retrieval event id")
    return parse_at(str(at))


def change_of(change: Any, *, query: str | None = None, params: Any = None, passages: Any = None) -> ForkChange:
    """The change from a kind name or a JSON object, with the typed fields filling in what it leaves out."""
    if isinstance(change, str) and change.strip().startswith("{"):
        change = _json(change, "the change is", "change", dict,
                       '"force_retrieval" or {"kind": "edit_query", "query": "..."}')
    d: dict[str, Any] = dict(change) if isinstance(change, dict) else {"kind": str(change or "none").strip() or "none"}
    if query is not None and str(query).strip() and d.get("query") is None:
        d["query"] = str(query).strip()
    if isinstance(d.get("query"), str):
        d["query"] = check_text(d["query"], "query").strip() or None
    given = parse_params(d.get("params") if d.get("params") is not None else params)
    d["params"] = given
    listed = parse_passages(d.get("passages") if d.get("passages") is not None else passages)
    d["passages"] = list(listed) if listed is not None else None
    if d["passages"] is None:
        d.pop("passages")
    return ForkChange.from_dict(d)


def plan_from_request(data: Any) -> ForkPlan:
    """A plan from the page's request: JSON ``{"run_id", "at": {...}, "change": {...}}``."""
    if isinstance(data, str):
        try:
            data = parse_json(data or "{}")
        except json.JSONDecodeError as exc:
            raise ExplorerError(f"the fork request is not valid JSON ({json_problem(exc)})", where="fork",
                                fix="open the menu on a token or retrieval card again") from None
    if not isinstance(data, dict) or not str(data.get("run_id") or "").strip():
        raise ExplorerError("the fork request names no run", where="fork",
                            fix="open the menu on a token or retrieval card of a stored run")
    at = data.get("at") if isinstance(data.get("at"), dict) else {}
    point = point_of(at=at if at.get("retrieval") is None else None, retrieval=at.get("retrieval"))
    return ForkPlan(parent=str(data["run_id"]).strip(), point=point, change=change_of(data.get("change") or "none"))


def check(parent: Trace, plan: ForkPlan) -> None:
    """Refuse, before any model work, a plan its parent does not allow (the same checks ``fork_run`` makes first)."""
    check_forkable(parent)
    resolve(parent, plan)


def search_passages(retriever: Retriever, text: str, k: int = SEARCH_K) -> list[dict[str, Any]]:
    """Passages of the corpus for the passage editor: the one whose id is ``text`` first, then the search's."""
    text = (text or "").strip()
    if not text:
        return []
    out: list[dict[str, Any]] = []
    getter = getattr(retriever, "passage", None)
    exact = getter(text) if callable(getter) else None
    if exact is not None:
        out.append({"id": exact.id, "title": exact.title, "text": _short(exact.text)})
    for hit in retriever.search(text, k):
        if all(p["id"] != hit.passage.id for p in out):
            out.append({"id": hit.passage.id, "title": hit.passage.title, "text": _short(hit.passage.text),
                        "score": round(float(hit.score), 4)})
    return out[:k]
