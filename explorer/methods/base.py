"""How a method runs: every method is a small strategy over the shared engine and a retriever.

What a method is (:class:`Method`) and the registry of methods by name live in
:mod:`explorer.methods.registry`, below this module and :mod:`explorer.methods.resolve`, and are
named here too. :func:`run_question` is the single entry
point the CLI, the web app and the evaluation runner use, so they all produce identical traces
for identical inputs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from explorer.config import Config
from explorer.errors import ExplorerError, check_question
from explorer.methods.registry import METHODS, ORDER, Method, get_method, method_names, method_rank, register
from explorer.methods.resolve import ResolvedConfig, resolve_config
from explorer.runtime import Runtime
from explorer.trace import Cancelled, Event, Listener, Trace, TraceRecorder

if TYPE_CHECKING:
    from explorer.journal import RunJournal

#: The method classes and their registry live in :mod:`explorer.methods.registry`; they are named here
#: too, where every caller has found them.
__all__ = ["METHODS", "ORDER", "Method", "get_method", "make_config", "method_names", "method_rank", "register",
           "run_question"]


def make_config(method: str, values: dict[str, Any] | Config | None) -> Config:
    cls = get_method(method)
    if isinstance(values, Config):
        return values
    return cls.Config.from_dict(values or {})


def _note_defaults(rec: TraceRecorder, cls: type[Method], resolved: ResolvedConfig, model: str) -> None:
    """Say in the trace which values did not come from the paper or the user, and why."""
    def paper(keys: dict[str, Any]) -> dict[str, Any]:
        return {k: cls.Config.describe_field(k)["default"] for k in keys}

    def listed(values: dict[str, Any]) -> str:
        return ", ".join(f"{k}={v}" for k, v in values.items())

    if resolved.variant_defaults:
        defaults = resolved.variant_defaults
        rec.add("note", level="info", variant_defaults=defaults, paper_defaults=paper(defaults),
                message=f"{listed(defaults)} for the {resolved.variant} variant (paper default "
                        f"{listed(paper(defaults))}): that is what the variant's code does")
    if resolved.preset:
        preset = resolved.preset
        rec.add("note", level="info", preset=preset, paper_defaults=paper(preset),
                message=f"{listed(preset)} from the preset for {model} (paper default {listed(paper(preset))}): "
                        "thresholds do not transfer across models")


def _opening_notes(trace: Trace) -> list[Event]:
    """The notes a run starts with saying where its config values came from (:func:`_note_defaults`).

    A note the method itself writes before its first step (Probing-RAG names its prober) is not one of
    them: the fork's method writes it again, so copying it too would shift every later event id."""
    notes = []
    for event in trace.events:
        if event.kind != "note" or "paper_defaults" not in event.payload:
            break
        notes.append(event)
    return notes


def run_question(method: str, question: str, runtime: Runtime, *, variant: str | None = None,
                 config: dict[str, Any] | Config | None = None, gold: dict[str, Any] | None = None,
                 listeners: list[Listener] | None = None, cancel: threading.Event | None = None,
                 raise_errors: bool = False, journal: RunJournal | None = None, fork_of: Trace | None = None,
                 prepare: Callable[[Trace, TraceRecorder, Config], None] | None = None) -> Trace:
    """Run one method on one question and return its trace.

    Cancellation and user errors never lose the partial trace: the trace comes back with status
    ``cancelled`` or ``error`` and the message in ``trace.error``. With a ``journal`` the run is
    stored when it starts, checkpointed as it goes and stored again when it ends, whatever ends it.

    ``fork_of`` (with ``prepare``, which sets the fork's replay on the recorder) runs a fork of that
    trace (:func:`explorer.forks.fork_run`): its config, variant and opening notes are the parent's,
    so the fork's events line up with the parent's.
    """
    cls = get_method(method)
    question = check_question(question, "question", "type a question to answer")
    fingerprint = runtime.engine.fingerprint()
    if fork_of is None:
        resolved = resolve_config(method, variant, str(fingerprint.get("name", "")), config)
        variant, cfg, sources = resolved.variant, resolved.config, dict(resolved.sources)
    else:
        variant, cfg, sources = fork_of.variant, cls.Config.from_dict(fork_of.config), dict(fork_of.config_sources)
    trace = Trace(question=question, method=method, variant=variant, config=cfg.to_dict(),
                  config_sources=sources, model=fingerprint, corpus=dict(runtime.corpus),
                  gold=dict(gold or {}))
    if journal is not None:
        journal.begin(trace)
        listeners = [*(listeners or []), journal]
    rec = TraceRecorder(trace, listeners=listeners, cancel=cancel)
    if fork_of is None:
        _note_defaults(rec, cls, resolved, str(fingerprint.get("name")))
    else:
        for event in _opening_notes(fork_of):
            rec.add("note", **event.payload)
    if prepare is not None:
        prepare(trace, rec, cfg)
    start = time.perf_counter()
    try:
        if "attention_weights" in cls.needs and getattr(runtime.engine, "probe", None) is not None:
            runtime.engine.probe.require(f"{cls.name} ({variant})")
        cls(cfg, runtime, variant).run(question, rec)
        trace.status = "complete"
    except Cancelled:
        trace.status = "cancelled"
        trace.error = "cancelled by the user"
    except ExplorerError as exc:
        trace.status = "error"
        trace.error = exc.message
        if raise_errors:
            if journal is not None:
                journal.finish(trace)
            raise
    except BaseException as exc:
        if journal is not None:
            journal.abandon(trace, exc)
        raise
    finally:
        # Time not inside a named phase (prompt building, bookkeeping) is "other", so the
        # phases always add up to the run's wall time.
        wt = trace.costs.wall_time
        wt["other"] = max(0.0, time.perf_counter() - start - sum(v for k, v in wt.items() if k != "other"))
    if journal is not None:
        journal.finish(trace)
    return trace
