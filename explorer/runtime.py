"""Building the (model, engine, retriever) a run needs, once per process.

The CLI, the web app and the evaluation runner all open their runtime here, so a model and an
index are loaded once however many questions run, and the same spec strings ("embedded",
"demo", a path) mean the same thing everywhere.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from explorer.methods.base import Runtime

if TYPE_CHECKING:  # the engine module pulls in torch; importing it lazily keeps start-up light
    from explorer.engine.generation import Engine

Progress = Callable[[str], None]

_lock = threading.Lock()
_engines: dict[tuple, object] = {}


def default_attn() -> str:
    """The ``--attn`` default of every command and the app: ``EXPLORER_ATTN``, else ``auto``."""
    return os.environ.get("EXPLORER_ATTN", "").strip() or "auto"


def open_engine(model: str = "embedded", *, dtype: str = "float32", device: str = "cpu", attn: str = "auto",
                progress: Progress | None = None):
    """The shared :class:`~explorer.engine.generation.Engine` for a model spec (loaded on first use).

    ``attn="auto"`` loads the model with what it supports (sdpa for most families, eager where
    sdpa is refused or the family does not go through transformers' AttentionInterface); the
    engine's attention probe reads the last layer's weights on top of either, so attention
    signals cost no eager kernels on the other layers. Methods that need no attention run on
    any backend, flash attention included.
    """
    from explorer.engine.generation import Engine
    from explorer.engine.loader import load_model

    key = (model, dtype, device, attn)
    with _lock:
        engine = _engines.get(key)
        if engine is None:
            lm = load_model(model, dtype=dtype, device=device, attn_implementation=attn,
                            progress=progress or (lambda _m: None))
            engine = Engine(lm)
            _engines[key] = engine
        return engine


def open_runtime(model: str = "embedded", corpus: str = "demo", *, dtype: str = "float32", device: str = "cpu",
                 attn: str = "auto", progress: Progress | None = None) -> Runtime:
    """Engine and retriever together, with the corpus facts a trace records."""
    engine = open_engine(model, dtype=dtype, device=device, attn=attn, progress=progress)
    return runtime_for(engine, corpus, progress=progress)


def runtime_for(engine: Engine, corpus: str, *, progress: Progress | None = None) -> Runtime:
    """An engine built elsewhere (a benchmark's random model) joined to a corpus, as open_runtime joins its own."""
    from explorer.retrieval.registry import open_retriever

    retriever = open_retriever(corpus, progress=progress)
    describe = getattr(retriever, "describe", None)
    facts = describe() if callable(describe) else {"name": getattr(retriever, "name", corpus)}
    return Runtime(engine=engine, retriever=retriever, corpus={"spec": corpus, **facts})
