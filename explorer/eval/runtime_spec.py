"""The runtime an evaluation runs on, as plain values any process can rebuild it from.

The evaluation driver and every Ray worker open their runtime from one :class:`RuntimeSpec`
built by :func:`runtime_spec` from the evaluation's settings, so a worker runs on exactly the
model, retriever and decoding setup the driver's settings describe. A setting that changes which
runtime is opened (a model option, a retriever option) is added here, once: as a field of the
spec, read from the settings in :func:`runtime_spec`, and passed on in :meth:`RuntimeSpec.open`
and :meth:`RuntimeSpec.prepare`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from explorer.cache import KeyedCache
from explorer.runtime import Runtime

Progress = Callable[[str], None]

_random_engines: KeyedCache[Any] = KeyedCache("random engines")


@dataclass(frozen=True)
class RuntimeSpec:
    """Model and corpus specs plus the options :func:`explorer.runtime.open_runtime` takes."""

    model: str = "embedded"
    corpus: str = "demo"
    dtype: str = "float32"
    device: str = "cpu"
    attn: str = "auto"
    #: RetrieverConfig.recorded() (None: BM25 with its defaults).
    retriever: dict[str, Any] | None = None

    def retriever_choice(self) -> Any:
        """The RetrieverConfig the recorded fields describe (BM25 when none were recorded)."""
        from explorer.retrieval.choice import retriever_config

        return retriever_config(options=self.retriever or {"kind": "bm25"})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def with_device(self, device: str) -> RuntimeSpec:
        """The same runtime on another device (a Ray worker's own GPU is always ``cuda``)."""
        return RuntimeSpec(**{**self.to_dict(), "device": device})

    def open(self, progress: Progress | None = None) -> Runtime:
        """Engine and retriever, loaded once per process (the runtime module's caches)."""
        from explorer.engine.random_models import is_random_spec
        from explorer.runtime import open_runtime, runtime_for

        if is_random_spec(self.model):
            return runtime_for(self._random_engine(), self.corpus, progress=progress, retriever=self.retriever_choice())
        return open_runtime(self.model, self.corpus, dtype=self.dtype, device=self.device, attn=self.attn,
                            progress=progress, retriever=self.retriever_choice())

    def prepare(self, progress: Progress | None = None) -> dict[str, Any]:
        """Build what workers read from the on-disk cache (the corpus index) and say what it is.

        The driver calls this before any worker starts, so workers load the index instead of
        each building it.
        """
        from explorer.retrieval.registry import open_retriever

        retriever = open_retriever(self.corpus, progress=progress, kind=self.retriever_choice())
        describe = getattr(retriever, "describe", None)
        return describe() if callable(describe) else {"name": getattr(retriever, "name", self.corpus)}

    def _random_engine(self) -> Any:
        from explorer.engine.generation import Engine
        from explorer.engine.random_models import load_random_model
        from explorer.runtime import default_batching

        def build() -> Any:
            engine = Engine(load_random_model(self.model, dtype=self.dtype, device=self.device))
            if default_batching(self.device):
                from explorer.engine.batching import enable

                enable(engine)
            return engine

        return _random_engines.get((self.model, self.dtype, self.device), build)


def runtime_spec(settings: Any) -> RuntimeSpec:
    """The runtime an evaluation's settings (:class:`~explorer.eval.runner.EvalSettings`) describe."""
    return RuntimeSpec(model=settings.model, corpus=settings.corpus, dtype=settings.dtype, device=settings.device,
                       attn=settings.attn, retriever=settings.retriever)
