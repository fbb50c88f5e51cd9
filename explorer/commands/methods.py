"""``python -m explorer methods [NAME]``: the methods, their variants and every parameter with its default and range.

The same ``Config.describe()`` metadata drives the app's controls and ``run --set``, so this is the
reference for what ``--set name=value`` accepts.
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("methods", help="list methods and their parameters",
                                   description="List the methods, their variants and parameters (default, range).")
    parser.add_argument("name", nargs="?", default=None, help="one method to describe in full")
    parser.set_defaults(handler=run)


def _range(field: dict) -> str:
    if field["choices"]:
        return " | ".join(map(str, field["choices"]))
    lo, hi = field["lo"], field["hi"]
    if lo is None and hi is None:
        return field["type"]
    return f"[{'-inf' if lo is None else f'{lo:g}'}, {'inf' if hi is None else f'{hi:g}'}]"


def run(args: argparse.Namespace) -> int:
    from explorer.methods import METHODS
    from explorer.methods.base import get_method
    from explorer.methods.presets import BY_CHOICE, PRESETS

    names = [get_method(args.name).name] if args.name else sorted(METHODS)
    for name in names:
        cls = METHODS[name]
        print(f"{name}: {cls.title} · variants: {', '.join(cls.variants)}")
        if not args.name:
            continue
        for field in cls.Config.describe():
            print(f"  {field['name']:<20} default {field['default']!r:<10} {_range(field):<22} {field['help']}")
        for model, by_method in PRESETS.items():
            for (method, variant), values in by_method.items():
                if method == name:
                    print(f"  preset for {model} ({variant}): {values}")
        for model, by_method in BY_CHOICE.items():
            for (method, variant), by_field in by_method.items():
                if method != name:
                    continue
                for chosen, by_value in by_field.items():
                    for choice, values in by_value.items():
                        print(f"  preset for {model} ({variant}, {chosen}={choice}): {values}")
    return 0
