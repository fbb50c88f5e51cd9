"""The registry of per-token signals: what each one measures, what it needs, how words aggregate it.

A signal is a registered :class:`SignalSpec`: an id, a title and description (the UI's legend
and charts are built from them), an aggregation rule for merging a word's sub-word tokens, and
what it needs to be computed:

* ``logits``: the RAW next-token distribution the token was chosen from (probability, entropy);
* ``token``: the chosen token itself (its id and decoded text: DRAGIN's content mask);
* ``attention``: the last layer's attention rows of later tokens (amax; read by the probe);
* ``signals``: other signals of the same token, once the span is complete (DRAGIN's RIND).

The engine computes the default signals for every span and the extra ones a method names in
``Engine.generate(signals=...)``; a trace stores them per token as ``signals: {id: value}``.
A new signal is one :func:`register_signal` call in the module of the method that uses it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from explorer.engine.signals import StepStats, Word
from explorer.errors import ConfigError

NEEDS = ("logits", "token", "attention", "signals")
AGGREGATES = ("max", "min", "mean", "sum", "first", "any", "all")


@dataclass(frozen=True)
class TokenContext:
    """What a signal's ``compute`` may read for one generated token."""

    engine: Any
    token_id: int
    text: str
    logits: torch.Tensor | None = None
    stats: StepStats | None = None
    entropy_warped: float | None = None
    signals: dict[str, Any] | None = None


@dataclass(frozen=True)
class SignalSpec:
    """One registered per-token signal.

    ``compute`` returns the token's value (None where it cannot be computed yet); the built-in
    ``amax`` has none: the engine's attention probe fills it. ``requires`` lists the signals a
    ``signals``-kind computation reads. ``inverse`` colours low values dark (probability).
    ``shown`` signals are offered as a token strip's colour and charted.
    """

    id: str
    title: str
    description: str
    legend: str
    needs: str
    aggregate: str
    compute: Callable[[TokenContext], Any] | None = None
    requires: tuple[str, ...] = ()
    default: bool = False
    inverse: bool = False
    shown: bool = True
    short: str = ""

    def word_values(self, values: Sequence[Any], words: Iterable[Word]) -> list[Any]:
        """One value per word from its tokens' values, by this signal's aggregation rule."""
        return [aggregate_values(values[w.start:w.end], self.aggregate) for w in words]


_REGISTRY: dict[str, SignalSpec] = {}
_loaded = False


def register_signal(spec: SignalSpec) -> SignalSpec:
    """Add a signal; an id is registered once (registering the very same spec again is a no-op)."""
    if spec.needs not in NEEDS:
        raise ValueError(f"signal {spec.id!r} needs {spec.needs!r}; choose one of {NEEDS}")
    if spec.aggregate not in AGGREGATES:
        raise ValueError(f"signal {spec.id!r} aggregates by {spec.aggregate!r}; choose one of {AGGREGATES}")
    if spec.needs != "attention" and spec.compute is None:
        raise ValueError(f"signal {spec.id!r} has no compute function")
    held = _REGISTRY.get(spec.id)
    if held is not None and held != spec:
        raise ValueError(f"signal id {spec.id!r} is already registered ({held.title}); give the new one another id")
    for dep in spec.requires:
        if dep not in _REGISTRY:
            raise ValueError(f"signal {spec.id!r} requires {dep!r}, which is not registered (register it first)")
    _REGISTRY[spec.id] = spec
    return spec


def unregister_signal(signal_id: str) -> None:
    """Remove a signal (tests that register a toy one clean up with this)."""
    _REGISTRY.pop(signal_id, None)


def registry() -> dict[str, SignalSpec]:
    """Every registered signal in registration order, method-registered ones included."""
    global _loaded
    if not _loaded:
        _loaded = True
        from explorer import extensions

        extensions.load()  # the declared method modules register their signals
    return dict(_REGISTRY)


def get_signal(signal_id: str) -> SignalSpec:
    found = registry().get(signal_id)
    if found is None:
        raise KeyError(f"unknown signal {signal_id!r}; registered: {', '.join(registry())}")
    return found


def plan(requested: Iterable[str] = (), *, attention: bool) -> list[SignalSpec]:
    """The signals a span computes: the defaults plus ``requested`` (and what they require), in order.

    Attention signals are left out when the span reads no attention; they stay in the layout
    with value None so every span of a run has the same keys.
    """
    specs = registry()
    wanted = {s.id for s in specs.values() if s.default} | set(requested)
    for sid in list(wanted):
        if sid not in specs:
            raise ConfigError(f"unknown signal {sid!r}", where="signals",
                              fix=f"register it with register_signal, or use one of {', '.join(specs)}")
    changed = True
    while changed:
        changed = False
        for sid in list(wanted):
            for dep in specs[sid].requires:
                if dep not in wanted:
                    wanted.add(dep)
                    changed = True
    return [s for s in specs.values() if s.id in wanted]


def aggregate_values(values: Sequence[Any], how: str) -> Any:
    """Merge a word's token values; None values are skipped (None when nothing is left)."""
    present = [v for v in values if v is not None]
    if how == "first":
        return values[0] if values else None
    if not present:
        return None
    if how == "any":
        return any(present)
    if how == "all":
        return all(present)
    numbers = [float(v) for v in present]
    if how == "max":
        return max(numbers)
    if how == "min":
        return min(numbers)
    if how == "sum":
        return float(sum(numbers))
    return float(sum(numbers)) / len(numbers)


def compute_step(specs: Sequence[SignalSpec], ctx: TokenContext) -> dict[str, Any]:
    """The ``logits`` and ``token`` signals of one token, as it is chosen (attention ones start as None)."""
    out: dict[str, Any] = {}
    for spec in specs:
        if spec.needs in ("logits", "token"):
            out[spec.id] = spec.compute(ctx) if spec.compute is not None else None
        else:
            out[spec.id] = None
    return out


def compute_derived(specs: Sequence[SignalSpec], engine: Any, token_id: int, text: str,
                    signals: dict[str, Any]) -> None:
    """Fill the ``signals``-kind values of a finished token from its other signals (in place)."""
    for spec in specs:
        if spec.needs == "signals" and spec.compute is not None:
            signals[spec.id] = spec.compute(TokenContext(engine, token_id, text, signals=signals))


# -- the built-in signals: what one forward pass of the next-token distribution gives ------------------
register_signal(SignalSpec(
    "prob", "probability", "probability of the chosen token under the raw next-token distribution",
    "darker = less probable (1 − p)", "logits", "min", lambda c: c.stats.prob, default=True, inverse=True,
    short="p"))
register_signal(SignalSpec(
    "entropy", "entropy", "Shannon entropy (nats) of the raw next-token distribution",
    "darker = higher entropy of the next-token distribution", "logits", "mean", lambda c: c.stats.entropy,
    default=True, short="H"))
register_signal(SignalSpec(
    "entropy_warped", "entropy (sampled)", "entropy of the distribution actually sampled from (None under greedy)",
    "darker = higher entropy of the sampling distribution", "logits", "mean", lambda c: c.entropy_warped,
    default=True, shown=False))
register_signal(SignalSpec(
    "logprob", "log-probability", "log-probability of the chosen token", "darker = less probable",
    "logits", "sum", lambda c: c.stats.logprob, default=True, inverse=True, shown=False))
register_signal(SignalSpec(
    "amax", "amax", "largest last-layer, head-mean attention this token receives from later tokens of its span",
    "darker = more attention from later tokens", "attention", "max", default=True))
