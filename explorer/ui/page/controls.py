"""The method and parameter controls, built from each method's ``Config.describe()``.

Nothing about a parameter is written twice: its default, range, choices and help come from the
config declaration, and the values a user enters are validated by the config itself, so the
message for a bad value is the config's own :class:`~explorer.errors.ConfigError`. Controls do
not clamp or round, or the user would never see why a value was refused.

Every declared type has a control that gives back what it was given (:func:`control_for` and
:func:`value_from_control`): an optional number (``int | None``) is a text box left empty for None
(never the text "None", and not a number box, which a browser shows as 0); a list is a
comma-separated text box. :func:`plan_runs` checks each
ticked method on its own, so one method's bad value refuses that method only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from explorer.errors import ConfigError, ExplorerError, public_message
from explorer.methods.base import get_method
from explorer.methods.presets import choice_fields
from explorer.methods.resolve import resolve_config
from explorer.ui.views import terms

#: Control kinds: a checkbox, a dropdown of the declared choices, a number box, a text box, a list as text,
#: and an optional number as text (a browser's number box shows 0 where the value is None).
CHECKBOX, DROPDOWN, NUMBER, TEXT, LIST, OPTIONAL_NUMBER = "checkbox", "dropdown", "number", "text", "list", \
    "optional-number"


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
    def optional(self) -> bool:
        """Declared ``X | None``: None ("not set", the method decides) is a value of its own."""
        return self.type.replace(" ", "").endswith("|None") or self.type.startswith("Optional[")

    @property
    def base(self) -> str:
        """The declared type without ``| None``: ``int``, ``float``, ``bool``, ``str``, ``list[str]`` ..."""
        text = self.type.strip()
        if text.startswith("Optional[") and text.endswith("]"):
            return text[len("Optional["):-1].strip()
        return text.split("|")[0].strip() if self.optional else text

    @property
    def item_type(self) -> str | None:
        """The item type of a list or tuple parameter (``list[int]`` -> ``int``); None for a scalar."""
        base = self.base
        for kind in ("list", "tuple", "set"):
            if base == kind:
                return "str"
            if base.startswith(kind + "["):
                return base[len(kind) + 1:-1].split(",")[0].strip()
        return None

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


def method_words(name: str) -> str:
    """One line saying what a method does (its title when it has no such line: a method added later).

    The line is the method's entry in the page's words (:mod:`explorer.ui.views.terms`), so its checkbox,
    its name in a caption and the glossary say the same."""
    sentence = terms.method_sentence(name)
    if not sentence:
        return get_method(name).title
    return sentence[0].lower() + sentence[1:].rstrip(".")  # after the method's name: "DRAGIN: searches when …"


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


def shown_default(param: Param, variant: str, model: str, chosen: dict[str, Any] | None = None) -> Any:
    """What a control starts at: the value a run resolves when the user sets nothing else (:func:`resolve_config`).

    ``chosen`` holds the user's values of the fields that pick a preset (TARG's gate): a threshold
    measured for one gate starts at that gate's value, not another's.
    """
    return getattr(resolve_config(param.method, variant, model, dict(chosen or {})).config, param.name)


def choices_made(method: str, variant: str, values: dict[tuple[str, str], Any], model: str) -> dict[str, Any]:
    """The form's values of the fields that pick a preset, where they differ from where their control started."""
    made, picking = {}, choice_fields(model, method, variant)
    for p in params(method):
        if p.name in picking and (method, p.name) in values:
            value = value_from_control(p, values[(method, p.name)])
            if value != shown_default(p, variant, model):
                made[p.name] = value
    return made


def preset_note(param: Param, variant: str, model: str, chosen: dict[str, Any] | None = None) -> str:
    resolved = resolve_config(param.method, variant, model, dict(chosen or {}))
    source = resolved.sources.get(param.name)
    value = getattr(resolved.config, param.name)
    if source == "preset":
        return f"preset for {model}: {value} (paper default {param.default}; thresholds do not transfer across models)"
    if source == "variant":
        return f"{variant} variant: {value} (paper default {param.default}; the variant's code does this)"
    return ""


@dataclass(frozen=True)
class Control:
    """What the form shows for a parameter: the kind of input and its value in that input's terms."""

    kind: str
    value: Any
    #: An empty input means None (``X | None`` parameters).
    optional: bool = False
    integer: bool = False


def control_for(param: Param, value: Any) -> Control:
    """The input that suits ``param``'s declared type, holding ``value`` (None shows as an empty box)."""
    if param.base == "bool":
        return Control(CHECKBOX, bool(value), param.optional)
    if param.choices:
        return Control(DROPDOWN, value, param.optional)
    if param.base in ("int", "float"):
        if param.optional:  # empty text is None; a number box would show (and send) 0
            return Control(OPTIONAL_NUMBER, "" if value is None else str(value), True, integer=param.base == "int")
        return Control(NUMBER, value, False, integer=param.base == "int")
    if param.item_type is not None:
        items = value if isinstance(value, (list, tuple, set)) else ([] if value is None else [value])
        return Control(LIST, ", ".join(str(v) for v in items), param.optional)
    return Control(TEXT, "" if value is None else str(value), param.optional)


def _item(text: str, kind: str | None) -> Any:
    """A typed number from text where it is one; otherwise the text, for the config to say what is wrong."""
    if kind == "int" and text.lstrip("+-").isdigit():
        return int(text)
    if kind == "float":
        try:
            return float(text)
        except ValueError:
            return text  # the config says what is wrong with it
    return text


def value_from_control(param: Param, raw: Any) -> Any:
    """What a control handed back, as the value the config coerces (the inverse of :func:`control_for`).

    An empty number box or text box of an optional parameter, or the text "none", is None; a
    required number left empty is refused here with the parameter's name, since the config would
    only say that None is not a number.
    """
    kind = control_for(param, None).kind
    if isinstance(raw, str):
        raw = raw.strip()
        if param.optional and raw.lower() in ("", "none"):
            return None
    if kind == OPTIONAL_NUMBER:
        return None if raw is None or raw == "" else _item(str(raw), param.base) if isinstance(raw, str) else raw
    if kind == NUMBER:
        if raw is None or raw == "":
            if param.optional:
                return None
            raise ConfigError("no value given", where=f"{param.method} · {param.name}",
                              fix=f"type a number ({param.info})")
        if isinstance(raw, float) and raw.is_integer() and param.base == "int":
            return int(raw)
        if isinstance(raw, int) and not isinstance(raw, bool) and param.base == "float":
            return float(raw)
        return raw
    if kind == LIST:
        if isinstance(raw, (list, tuple)):
            return list(raw)
        parts = [p.strip() for p in str(raw or "").replace("\n", ",").split(",")]
        return [_item(p, param.item_type) for p in parts if p]
    if kind == CHECKBOX and isinstance(raw, str):
        return raw  # the config reads "true"/"false" and says what else is wrong
    return raw


@dataclass(frozen=True)
class RunSpec:
    """A validated request to run one method: name, variant and the values the user set (the rest default)."""

    method: str
    variant: str
    config: dict[str, Any]


@dataclass(frozen=True)
class Refusal:
    """A ticked method that cannot run as set, and why (the config's own message)."""

    method: str
    message: str


def spec_for(method: str, chosen_variant: str | None, values: dict[tuple[str, str], Any], *, model: str = "",
             explicit: bool = False) -> RunSpec:
    """One method's validated request; raises the config's error for a bad value.

    From the app's controls only values that differ from what the control started at are passed
    on, so a model's preset is applied by the run itself, which records in the trace that it came
    from a preset. Where a choice picks a preset (TARG's gate), the other controls are compared with
    where the form moved them for that choice. ``explicit`` (the scripting API) passes every given
    value on as the user's, as ``--set`` does on the command line.
    """
    cls = get_method(method)
    variant = chosen_variant or cls.variants[0]
    if variant not in cls.variants:
        raise ConfigError(f"method {method} has no variant {variant!r}", where="variant",
                          fix=f"choose one of {', '.join(cls.variants)}")
    settings = {}
    chosen = choices_made(method, variant, values, model)
    for p in params(method):
        if (method, p.name) not in values:
            continue
        value = value_from_control(p, values[(method, p.name)])
        if explicit or value != shown_default(p, variant, model, {k: v for k, v in chosen.items() if k != p.name}):
            settings[p.name] = value
    resolve_config(method, variant, model, settings)  # validate now, before any run
    return RunSpec(method=method, variant=variant, config=settings)


def build_specs(methods: list[str], chosen_variants: dict[str, str],
                values: dict[tuple[str, str], Any], *, model: str = "", explicit: bool = False) -> list[RunSpec]:
    """Validate every chosen method's settings; the first bad value raises its ConfigError."""
    if not methods:
        raise ExplorerError("no method is selected", where="methods", fix="tick at least one method to run")
    return [spec_for(m, chosen_variants.get(m), values, model=model, explicit=explicit) for m in methods]


def plan_runs(methods: list[str], chosen_variants: dict[str, str], values: dict[tuple[str, str], Any], *,
              model: str = "") -> tuple[list[RunSpec], list[Refusal]]:
    """Each ticked method checked on its own: the runnable ones, and the refused ones with their message.

    One method's bad value must not stop the others: the page runs what it can and shows a card
    with the message for each refused method.
    """
    if not methods:
        raise ExplorerError("no method is selected", where="methods", fix="tick at least one method to run")
    specs, refused = [], []
    for method in methods:
        try:
            specs.append(spec_for(method, chosen_variants.get(method), values, model=model))
        except ExplorerError as exc:
            refused.append(Refusal(method, public_message(exc)))
    return specs, refused
