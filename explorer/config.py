"""Typed, validated configuration objects.

Every tunable value of every method is a field declared with :func:`param`, which records the
paper's default, the allowed range or choices, and a one-line help text. The same metadata
drives validation, the command line (``--set name=value``), the web app's controls and the
evaluation runner, so a new parameter appears everywhere at once.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field, fields
from typing import Any

from explorer.errors import ConfigError


def param(default: Any, *, lo: float | None = None, hi: float | None = None,
          choices: tuple[Any, ...] | None = None, help: str = "", ui: bool = True) -> Any:
    """Declare a config field with its default, allowed range/choices and help text.

    ``ui=False`` keeps long values (prompt templates) out of the app's quick controls.
    """
    meta = {"lo": lo, "hi": hi, "choices": choices, "help": help, "ui": ui}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda d=default: type(d)(d), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class Config:
    """Base class: subclasses are dataclasses whose fields are declared with :func:`param`."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in fields(self):
            value = getattr(self, f.name)
            meta = f.metadata
            expected = hints.get(f.name)
            value = _coerce(type(self).__name__, f.name, value, expected)
            setattr(self, f.name, value)
            lo, hi, choices = meta.get("lo"), meta.get("hi"), meta.get("choices")
            where = f"{type(self).__name__}.{f.name}"
            if choices is not None and value not in choices:
                raise ConfigError(f"{value!r} is not allowed", where=where,
                                  fix=f"use one of {', '.join(map(repr, choices))}")
            if isinstance(value, float) and not math.isfinite(value):
                # NaN passes every comparison and infinity passes a one-sided range: both would run
                # silently with a meaningless value (and NaN does not round-trip through JSON).
                raise ConfigError(f"{value!r} is not a finite number", where=where,
                                  fix=f"use a number in [{_fmt(lo)}, {_fmt(hi, 'inf')}]")
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                if (lo is not None and value < lo) or (hi is not None and value > hi):
                    raise ConfigError(f"{value!r} is out of range", where=where,
                                      fix=f"use a value in [{_fmt(lo)}, {_fmt(hi, 'inf')}]")
        self.check()

    def check(self) -> None:
        """Cross-field checks; subclasses override and raise ConfigError."""

    # -- construction from user input ------------------------------------------------------
    @classmethod
    def from_dict(cls, values: dict[str, Any] | None = None) -> Config:
        values = dict(values or {})
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ConfigError(f"unknown parameter(s) {', '.join(unknown)}", where=cls.__name__,
                              fix=f"known parameters: {', '.join(sorted(names))}")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> Config:
        return dataclasses.replace(self, **changes)

    @classmethod
    def describe(cls) -> list[dict[str, Any]]:
        """Each field's name, type, default, range and help: what the UI and CLI build on."""
        hints = typing.get_type_hints(cls)
        out = []
        for f in fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            out.append({"name": f.name, "type": _type_name(hints.get(f.name)), "default": default,
                        **{k: f.metadata.get(k) for k in ("lo", "hi", "choices", "help", "ui")}})
        return out


    @classmethod
    def describe_field(cls, name: str) -> dict[str, Any]:
        """:meth:`describe` for one field."""
        return next(d for d in cls.describe() if d["name"] == name)


def parse_assignments(items: list[str]) -> dict[str, Any]:
    """Parse CLI ``name=value`` strings; values stay strings and are coerced by the config."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"{item!r} is not of the form name=value", where="--set",
                              fix="write e.g. --set threshold=1.2")
        name, value = item.split("=", 1)
        out[name.strip()] = value
    return out


def _fmt(x: float | None, missing: str = "-inf") -> str:
    return missing if x is None else f"{x:g}"


def _type_name(t: Any) -> str:
    """``int``, ``int | None``, ``list[str]``: a generic keeps its item type (``list[str].__name__`` is "list")."""
    if typing.get_origin(t) in (list, tuple, set, dict):
        return str(t).replace("typing.", "")
    return getattr(t, "__name__", str(t))


def _coerce(owner: str, name: str, value: Any, expected: Any) -> Any:
    """Turn strings from the CLI/UI into the declared type, with a clear error if impossible."""
    where = f"{owner}.{name}"
    origin = typing.get_origin(expected)
    args = typing.get_args(expected)
    if expected is None:
        return value
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)) and type(None) in args:
        if value is None or value == "" or value == "none":
            return None
        inner = next(a for a in args if a is not type(None))
        return _coerce(owner, name, value, inner)
    try:
        if expected is bool:
            if isinstance(value, str):
                low = value.strip().lower()
                if low in ("true", "1", "yes", "on"):
                    return True
                if low in ("false", "0", "no", "off"):
                    return False
                raise ValueError
            return bool(value)
        if expected is int:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            if isinstance(value, bool):
                raise ValueError
            return int(value)
        if expected is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if expected is str:
            if not isinstance(value, str):
                raise ValueError
            return value
    except (TypeError, ValueError):
        raise ConfigError(f"{value!r} is not a valid {_type_name(expected)}", where=where,
                          fix=f"give {name} as a {_type_name(expected)}") from None
    return value
