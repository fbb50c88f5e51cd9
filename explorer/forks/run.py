"""Running a fork: the parent's method, config and question again, replayed up to the point, then live.

:func:`fork_run` is to forks what :func:`~explorer.methods.base.run_question` is to runs: the
CLI, the web app and the API all fork through it, so a fork made anywhere is the same trace.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from explorer.errors import ConfigError, ExplorerError
from explorer.forks.plan import ForkPlan, resolve
from explorer.forks.replay import Replay
from explorer.runtime import Runtime
from explorer.trace import Listener, Trace

if TYPE_CHECKING:
    from explorer.journal import RunJournal

#: The statuses a run can be forked in: finished, or stopped with a trace up to where it got.
FORKABLE = ("complete", "cancelled", "interrupted")
#: Model facts that must match for a fork to continue its parent (the same weights, read the same way).
_MODEL_KEYS = ("name", "source", "dtype", "num_parameters", "num_layers")
#: Facts that may differ, with a note: the continuation can then differ in the last digits.
_BACKEND_KEYS = ("device", "attn_implementation")
#: Corpus facts that must match (the same passages behind the same retriever).
_CORPUS_KEYS = ("retriever", "fingerprint", "passages", "name")


def _differences(keys: tuple[str, ...], had: dict[str, Any], has: dict[str, Any]) -> list[str]:
    return [f"{k} {had.get(k)!r} (now {has.get(k)!r})" for k in keys
            if k in had and k in has and had.get(k) != has.get(k)]


def check_compatible(parent: Trace, runtime: Runtime) -> list[str]:
    """Refuse a runtime whose model or corpus is not the parent's; return notes on lesser differences."""
    model = runtime.engine.fingerprint()
    changed = _differences(_MODEL_KEYS, parent.model or {}, model)
    if changed:
        raise ExplorerError(f"run {parent.run_id[:12]} was made with another model: " + "; ".join(changed),
                            where="fork", fix=f"load the model it was made with ({parent.model.get('name')}, "
                                              f"{parent.model.get('dtype')}) and fork again")
    corpus = dict(runtime.corpus or {})
    changed = _differences(_CORPUS_KEYS, parent.corpus or {}, corpus)
    if changed:
        raise ExplorerError(f"run {parent.run_id[:12]} searched another corpus: " + "; ".join(changed),
                            where="fork", fix=f"choose the corpus and retriever it used "
                                              f"({parent.corpus.get('spec') or parent.corpus.get('name')}, "
                                              f"{parent.corpus.get('retriever')}) and fork again")
    return [f"the parent ran with {d}; the live part of this fork may differ from it in the last digits"
            for d in _differences(_BACKEND_KEYS, parent.model or {}, model)]


def check_forkable(parent: Trace) -> None:
    """Refuse a run that is still running: it has no end yet to replay up to."""
    if parent.status not in FORKABLE:
        raise ExplorerError(f"run {parent.run_id[:12]} is {parent.status}; only a finished or stopped run can be "
                            "forked", where="fork", fix="wait for it to finish, or fork another run")


def fork_config(parent: Trace, plan: ForkPlan) -> dict[str, Any]:
    """The parent's config, with a parameter change checked against the method's config (applied later)."""
    from explorer.methods.base import get_method

    config = dict(parent.config)
    params = plan.change.params
    if params:
        cls = get_method(parent.method)
        unknown = [k for k in params if k not in config]
        if unknown:
            raise ConfigError(f"{parent.method} has no parameter {', '.join(unknown)}", where="params",
                              fix=f"choose among {', '.join(sorted(config))}")
        checked = cls.Config.from_dict({**config, **params}).to_dict()
        plan.change.params.update({k: checked[k] for k in params})
    return config


def fork_run(parent: Trace, plan: ForkPlan, runtime: Runtime, *, listeners: list[Listener] | None = None,
             cancel: threading.Event | None = None, journal: RunJournal | None = None,
             raise_errors: bool = False) -> Trace:
    """Fork ``parent`` as ``plan`` says, on ``runtime`` (its model and corpus must be the parent's)."""
    from explorer.methods.base import run_question

    if plan.parent != parent.run_id:
        raise ConfigError(f"the plan forks run {plan.parent}, not {parent.run_id}", where="fork")
    check_forkable(parent)
    divergence = resolve(parent, plan)
    notes = check_compatible(parent, runtime)
    config = fork_config(parent, plan)
    family = parent.fork or {}
    origin = {**plan.to_dict(), "root": family.get("root", parent.run_id), "depth": int(family.get("depth", 0)) + 1,
              "divergence": {"hook": divergence.hook, "event": divergence.event}}

    def prepare(trace: Trace, rec: Any, cfg: Any) -> None:
        trace.fork = origin
        rec.replay = Replay(parent, plan, divergence, cfg, notes=notes)

    return run_question(parent.method, parent.question, runtime, variant=parent.variant, config=config,
                        gold=parent.gold, listeners=listeners, cancel=cancel, raise_errors=raise_errors,
                        journal=journal, fork_of=parent, prepare=prepare)
