"""How the user sets a value *where the error is shown*, so a fix names only options that exist there.

The same loader serves the command line, the web app and Python callers, but each sets a question
file's format differently (``--format`` on ``eval``, a menu in the app, ``fmt=`` in Python), and
some commands have no such option at all (``run`` has no ``--data``). A message that suggests
``--format`` on a command without it sends the user in a circle, so library code asks
:func:`option` for the name of a knob and leaves the hint out when the caller has none.

Commands declare their names with ``parser.set_defaults(hints={...})``; :func:`explorer.cli.main`
applies them around the handler with :func:`using`. Outside any command (Python callers) the
keyword arguments of the loaders are named.

Knobs: ``dataset_format`` (a question file's format), ``dataset`` (where a dataset name or file is
given), ``add_dataset`` (a question source added to a stored evaluation), ``data_dir`` (the
benchmark data folder), ``corpus`` (the corpus searched), ``corpus_format`` (a corpus file's format),
``classifier`` (a pair-classifier file), ``name`` (an evaluation's name), ``limit`` (how many
questions), ``benchmark_data`` (the data folder the benchmark corpus is built from).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

PYTHON_NAMES: dict[str, str] = {
    "dataset_format": "fmt=",
    "dataset": "path=",
    "add_dataset": "add_datasets=",
    "corpus": "corpus=",
    "data_dir": "data_dir=",
    "corpus_format": "fmt=",
    "classifier": "classifier_path=",
    "name": "name=",
    "limit": "limit=",
    "benchmark_data": "data_dir=",
}

_current: ContextVar[Mapping[str, str] | None] = ContextVar("explorer_option_names", default=None)


def option(knob: str) -> str | None:
    """The name under which the current caller sets ``knob``, or None when it cannot be set there."""
    names = _current.get()
    return (PYTHON_NAMES if names is None else names).get(knob)


@contextmanager
def using(names: Mapping[str, str]) -> Iterator[None]:
    """Within the block, only the knobs in ``names`` exist, under those names."""
    token = _current.set(dict(names))
    try:
        yield
    finally:
        _current.reset(token)


def usage(knob: str, value: str) -> str | None:
    """How to set ``knob`` to ``value`` here (``--data DIR``, ``data_dir=DIR``), or None without such a knob."""
    name = option(knob)
    if not name:
        return None
    return f"{name}{value}" if name.endswith("=") else f"{name} {value}"
