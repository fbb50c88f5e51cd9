"""Building the (model, engine, retriever) a run needs, once per process.

The CLI, the web app and the evaluation runner all open their runtime here, so a model and an
index are loaded once however many questions run, and the same spec strings ("embedded",
"demo", a path) mean the same thing everywhere.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from explorer.cache import KeyedCache
from explorer.retrieval.base import Retriever

if TYPE_CHECKING:  # the engine module pulls in torch; importing it lazily keeps start-up light
    from explorer.engine.generation import Engine

Progress = Callable[[str], None]



@dataclass
class Runtime:
    """Everything a method may use: the engine (model + signals) and the retriever."""

    engine: Any
    retriever: Retriever
    corpus: dict[str, Any] = field(default_factory=dict)


_engines: KeyedCache[Any] = KeyedCache("engines")


def default_attn() -> str:
    """The ``--attn`` default of every command and the app: ``EXPLORER_ATTN``, else ``auto``."""
    return os.environ.get("EXPLORER_ATTN", "").strip() or "auto"


def default_batching(device: str) -> bool:
    """Whether an engine decodes concurrent runs as one batch: ``EXPLORER_BATCH`` (1 or 0), else on a GPU only.

    On CUDA the batch's decode step is the fast path even for a single run (one captured graph per
    token); on a CPU one run alone decodes as fast without it, and concurrent runs turn it on where
    they happen (the app, ``eval --batch``). See BENCHMARKS.md for both.
    """
    chosen = os.environ.get("EXPLORER_BATCH", "").strip().lower()
    if chosen in ("1", "on", "yes", "true"):
        return True
    if chosen in ("0", "off", "no", "false"):
        return False
    return str(device).startswith("cuda")


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

    def build() -> Engine:
        engine = Engine(load_model(model, dtype=dtype, device=device, attn_implementation=attn,
                                   progress=progress or (lambda _m: None)))
        if default_batching(device):
            from explorer.engine.batching import enable

            enable(engine)
        return engine

    return _engines.get((model, dtype, device, attn), build)


def engine_loaded(model: str, *, dtype: str = "float32", device: str = "cpu", attn: str = "auto") -> bool:
    """Whether :func:`open_engine` holds this model already (so opening it is immediate, not a load)."""
    return _engines.peek((model, dtype, device, attn)) is not None


def open_runtime(model: str = "embedded", corpus: str = "demo", *, dtype: str = "float32", device: str = "cpu",
                 attn: str = "auto", progress: Progress | None = None, retriever: Any = "bm25",
                 embedder: str | None = None, retriever_options: dict[str, Any] | None = None) -> Runtime:
    """Engine and retriever together, with the corpus facts a trace records.

    ``retriever`` is ``bm25`` (default), ``dense`` or ``hybrid`` (or a RetrieverConfig),
    ``embedder`` the dense model's folder or cached name, ``retriever_options`` further
    RetrieverConfig fields (``rrf_k``, ``dense_weight``, ``index``...).
    """
    engine = open_engine(model, dtype=dtype, device=device, attn=attn, progress=progress)
    return runtime_for(engine, corpus, progress=progress, retriever=retriever, embedder=embedder,
                       retriever_options=retriever_options)


def runtime_for(engine: Engine, corpus: str, *, progress: Progress | None = None, retriever: Any = "bm25",
                embedder: str | None = None, retriever_options: dict[str, Any] | None = None) -> Runtime:
    """An engine built elsewhere (a benchmark's random model) joined to a corpus, as open_runtime joins its own.

    The corpus facts name the retriever (kind, embedding model, index type and fingerprint, and
    the settings that shape its results), so a trace says which retriever found its passages."""
    from explorer.retrieval.choice import retriever_config
    from explorer.retrieval.registry import open_retriever

    choice = retriever_config(retriever, embedder, retriever_options)
    found = open_retriever(corpus, progress=progress, kind=choice)
    return Runtime(engine=engine, retriever=found, corpus=corpus_facts(found, corpus, choice))


def corpus_facts(retriever: Any, spec: str, choice: Any = None) -> dict[str, Any]:
    """What a trace records about the corpus and the retriever that searched it."""
    describe = getattr(retriever, "describe", None)
    facts = describe() if callable(describe) else {"name": getattr(retriever, "name", spec)}
    facts.setdefault("retriever", getattr(retriever, "kind", "bm25"))
    if getattr(retriever, "corpus", None) is not None:
        from explorer.retrieval.health import corpus_health

        facts["health"] = corpus_health(retriever)
    if choice is not None:
        facts["retriever_config"] = choice.recorded()
    return {"spec": spec, **facts}
