"""The method and parameter controls, built from each method's ``Config.describe()``.

Nothing about a parameter is written twice: its default, range, choices and help come from the
config declaration, and the values a user enters are validated by the config itself, so the
message for a bad value is the config's own :class:`~explorer.errors.ConfigError`. Controls do
not clamp or round, or the user would never see why a value was refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from explorer.errors import ConfigError, ExplorerError
from explorer.methods.base import get_method
from explorer.methods.resolve import resolve_config


@dataclass(frozen=True)
class Param:
    """One control: which method and field it sets, and what the config says about it."""

    method: str
    name: str
    type: str
    default: Any
    lo: float | None
    hi: float | None
    choices: tuple[Any, ...] | None
    help: str

    @property
    def elem_id(self) -> str:
        return f"param-{self.method}-{self.name}"

    @property
    def info(self) -> str:
        bits = [self.help] if self.help else []
        if self.choices:
            bits.append("choices: " + ", ".join(map(str, self.choices)))
        elif self.lo is not None or self.hi is not None:
            lo = "−∞" if self.lo is None else f"{self.lo:g}"
            hi = "∞" if self.hi is None else f"{self.hi:g}"
            bits.append(f"range [{lo}, {hi}]")
        bits.append(f"default {self.default}")
        return " · ".join(bits)


def method_label(name: str) -> str:
    return f"{get_method(name).title} [{name}]"


def variants(name: str) -> tuple[str, ...]:
    return tuple(get_method(name).variants)


def params(name: str) -> list[Param]:
    """The quick controls of a method (fields declared with ``ui=True``)."""
    out = []
    for d in get_method(name).Config.describe():
        if not d.get("ui", True):
            continue
        choices = tuple(d["choices"]) if d.get("choices") else None
        out.append(Param(method=name, name=d["name"], type=d["type"], default=d["default"], lo=d.get("lo"),
                         hi=d.get("hi"), choices=choices, help=d.get("help") or ""))
    return out


def all_params(methods: list[str]) -> list[Param]:
    return [p for m in methods for p in params(m)]


def model_name(spec: str) -> str:
    """The name a model's fingerprint will carry, known before loading it (presets are keyed by it)."""
    from explorer.engine.embedded import embedded_display_name

    embedded = embedded_display_name(spec)
    if embedded is not None:
        return embedded
    return spec.rstrip("/").rsplit("/", 1)[-1]


def shown_default(param: Param, variant: str, model: str) -> Any:
    """What a control starts at: the value a run resolves when the user sets nothing (:func:`resolve_config`)."""
    return getattr(resolve_config(param.method, variant, model, {}).config, param.name)


def preset_note(param: Param, variant: str, model: str) -> str:
    resolved = resolve_config(param.method, variant, model, {})
    source = resolved.sources.get(param.name)
    value = getattr(resolved.config, param.name)
    if source == "preset":
        return f"preset for {model}: {value} (paper default {param.default}; thresholds do not transfer across models)"
    if source == "variant":
        return f"{variant} variant: {value} (paper default {param.default}; the variant's code does this)"
    return ""


@dataclass(frozen=True)
class RunSpec:
    """A validated request to run one method: name, variant and the values the user set (the rest default)."""

    method: str
    variant: str
    config: dict[str, Any]


def _clean(value: Any) -> Any:
    """Turn what a control hands back into what the config coerces (numbers stay numbers)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        return value.strip()
    return value


def build_specs(methods: list[str], chosen_variants: dict[str, str],
                values: dict[tuple[str, str], Any], *, model: str = "", explicit: bool = False) -> list[RunSpec]:
    """Validate every chosen method's settings; the first bad value raises its ConfigError.

    From the app's controls only values that differ from what the control started at are passed
    on, so a model's preset is applied by the run itself, which records in the trace that it came
    from a preset. ``explicit`` (the scripting API) passes every given value on as the user's, as
    ``--set`` does on the command line.
    """
    if not methods:
        raise ExplorerError("no method is selected", where="methods", fix="tick at least one method to run")
    specs = []
    for method in methods:
        cls = get_method(method)
        variant = chosen_variants.get(method) or cls.variants[0]
        if variant not in cls.variants:
            raise ConfigError(f"method {method} has no variant {variant!r}", where="variant",
                              fix=f"choose one of {', '.join(cls.variants)}")
        settings = {}
        for p in params(method):
            if (method, p.name) not in values:
                continue
            value = _clean(values[(method, p.name)])
            if p.type == "float" and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if explicit or value != shown_default(p, variant, model):
                settings[p.name] = value
        resolve_config(method, variant, model, settings)  # validate now, before any run
        specs.append(RunSpec(method=method, variant=variant, config=settings))
    return specs
