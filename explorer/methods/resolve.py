"""The one place a run's configuration is resolved, for the command line, the app, the API and the evaluation.

A value comes from one of four layers, each overriding the one before:

1. ``paper``: the config class's default (the papers' setting);
2. ``variant``: what a variant's code does differently (the authors' FLARE baseline does not
   retrieve before writing, so ``flare``/``reference`` starts with ``initial_retrieval=False``);
3. ``preset``: the model's preset, because thresholds do not transfer across models
   (:mod:`explorer.methods.presets`);
4. ``user``: what the user set.

Every entry point hands the user's values over as they were given (never as a built config, which
would hide which values the user set) and gets back the same config and the same record of where
each value came from, which the trace keeps in ``config_sources``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from explorer.config import Config
from explorer.errors import ConfigError
from explorer.methods.presets import preset_for
from explorer.methods.registry import get_method

SOURCES = ("paper", "variant", "preset", "user")


@dataclass(frozen=True)
class ResolvedConfig:
    """A validated config and, per field, the layer its value came from."""

    method: str
    variant: str
    config: Config
    sources: dict[str, str]
    preset: dict[str, Any] = field(default_factory=dict)
    variant_defaults: dict[str, Any] = field(default_factory=dict)

    def values_from(self, source: str) -> dict[str, Any]:
        """The fields whose value came from ``source``, with their values."""
        return {k: getattr(self.config, k) for k, s in self.sources.items() if s == source}


def resolve_config(method: str, variant: str | None, model: str | None,
                   given: dict[str, Any] | Config | None) -> ResolvedConfig:
    """Resolve ``method``/``variant`` for ``model`` (its fingerprint name; None when not known yet).

    ``given`` is what the user set: a dict of values (strings are coerced and validated), or a
    built config, all of whose values then count as the user's. Raises ConfigError for an unknown
    method or variant, an unknown parameter or a bad value.
    """
    cls = get_method(method)
    variant = variant or cls.variants[0]
    if variant not in cls.variants:
        raise ConfigError(f"method {method} has no variant {variant!r}", where="variant",
                          fix=f"choose one of {', '.join(cls.variants)}")
    if isinstance(given, Config):
        if not isinstance(given, cls.Config):
            raise ConfigError(f"a {type(given).__name__} cannot configure {method}", where="config",
                              fix=f"pass a {cls.Config.__name__} or a dict of values")
        return ResolvedConfig(method, variant, given, {f.name: "user" for f in fields(given)})
    user = dict(given or {})
    variant_defaults = {k: v for k, v in cls.variant_defaults.get(variant, {}).items() if k not in user}
    chosen = {**{f.name: f.default for f in fields(cls.Config)}, **variant_defaults, **user}
    preset = {k: v for k, v in preset_for(model or "", method, variant, chosen).items() if k not in user}
    config = cls.Config.from_dict({**variant_defaults, **preset, **user})
    sources = {}
    for f in fields(config):
        sources[f.name] = ("user" if f.name in user else "preset" if f.name in preset
                           else "variant" if f.name in variant_defaults else "paper")
    return ResolvedConfig(method, variant, config, sources, preset, variant_defaults)
