"""What a method is, and the registry of methods by their short names.

A method declares its name, variants and typed config, and implements :meth:`Method.run`, which
asks the engine to generate, decides when to retrieve and what to search for, and records every
decision on the :class:`~explorer.trace.TraceRecorder`. Each method module registers its class
(:func:`register`) when it is imported; the package :mod:`explorer.methods` imports every method
module when any module under it is first imported, so the registry is full before anything can
ask it (:func:`get_method`). This module sits below :mod:`explorer.methods.base` (the single entry
point that runs a method) and :mod:`explorer.methods.resolve` (config resolution), which both look
methods up here.
"""

from __future__ import annotations

from typing import Any, ClassVar

from explorer.config import Config
from explorer.errors import ConfigError
from explorer.retrieval.base import Retriever
from explorer.runtime import Runtime
from explorer.trace import TraceRecorder

METHODS: dict[str, type[Method]] = {}


class Method:
    """Base class for methods. Subclasses set the class variables and implement ``run``."""

    name: ClassVar[str]
    title: ClassVar[str]
    variants: ClassVar[tuple[str, ...]] = ("paper",)
    Config: ClassVar[type[Config]]
    #: Per variant, config values that differ from the paper's because that variant's code differs.
    variant_defaults: ClassVar[dict[str, dict[str, Any]]] = {}
    #: What the method needs of the model beyond generating: ``attention_weights`` (it reads the attention of
    #: a layer). Checked before the model loads where that can be told (:mod:`explorer.methods.fit`) and
    #: before the run starts otherwise, so a run never fails half way for it.
    needs: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, *, name: str | None = None, title: str | None = None,
                          config: type[Config] | None = None, variants: tuple[str, ...] | None = None,
                          **kwargs: Any) -> None:
        """Let a method declare itself in its class line: ``class X(Method, name=..., title=..., config=...)``."""
        super().__init_subclass__(**kwargs)
        for attr, value in (("name", name), ("title", title), ("Config", config), ("variants", variants)):
            if value is not None:
                setattr(cls, attr, value)

    def __init__(self, config: Config, runtime: Runtime, variant: str) -> None:
        self.config = config
        self.runtime = runtime
        self.variant = variant

    @property
    def engine(self) -> Any:
        return self.runtime.engine

    @property
    def retriever(self) -> Retriever:
        return self.runtime.retriever

    def run(self, question: str, rec: TraceRecorder) -> None:
        """Answer ``question``, recording every step; set ``rec.trace.answer`` and ``.output``."""
        raise NotImplementedError


#: The order methods are listed in everywhere (controls, tables): baselines first, then the papers'
#: methods; a method not listed here follows, by name.
ORDER = ("wo", "sr", "fl", "fs", "flare", "dragin", "seakr", "blendfilter", "drrag", "etc", "targ", "probing_rag")


def register(cls: type[Method]) -> type[Method]:
    """Class decorator adding a method to the registry under its short name; a name is taken once."""
    held = METHODS.get(cls.name)
    if held is not None and (held.__module__, held.__qualname__) != (cls.__module__, cls.__qualname__):
        raise ConfigError(f"method name {cls.name!r} is already registered by {held.__module__}.{held.__qualname__}",
                          where=f"{cls.__module__}.{cls.__qualname__}", fix="give the new method another name")
    METHODS[cls.name] = cls
    return cls


def method_rank(name: str) -> tuple[int, str]:
    """Sort key putting methods in :data:`ORDER`, unknown ones after it by name."""
    return (ORDER.index(name), name) if name in ORDER else (len(ORDER), name)


def method_names() -> list[str]:
    """Every registered method, in display order."""
    return sorted(METHODS, key=method_rank)


def get_method(name: str) -> type[Method]:
    """The registered method called ``name`` (every method module is imported with the package)."""
    try:
        return METHODS[name]
    except KeyError:
        raise ConfigError(f"unknown method {name!r}", where="method",
                          fix=f"choose one of {', '.join(sorted(METHODS))}") from None
