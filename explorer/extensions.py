"""Where the registries' entries come from, without any registry importing the modules that fill it.

Two registries sit low in the package: the trace's event kinds (:mod:`explorer.trace`) and the
engine's per-token signals (:mod:`explorer.engine.token_signals`). What fills them sits higher up:
each method registers its own event kinds and signals when its module is imported, and the fork
replay registers ``fork``. A trace read from disk in a fresh process can hold a kind whose module
nothing has imported yet, so a registry that meets a name it does not know calls :func:`load`,
which imports the modules *declared* here, by name.

The declarations are made by the package root (``explorer/__init__.py``), the one module that
knows the whole package; a plugin declares its own module the same way. So the trace and the
engine stay free of any import of ``explorer.methods`` (``tests/test_trace_recorder.py`` checks it
in a fresh interpreter), and the direction of the imports stays the direction of the flow.
"""

from __future__ import annotations

import importlib
import threading

_declared: list[str] = []
_loaded: set[str] = set()
_lock = threading.RLock()


def declare(module: str) -> None:
    """Name a module whose import registers event kinds or signals (imported on the first :func:`load`)."""
    with _lock:
        if module not in _declared:
            _declared.append(module)


def declared() -> list[str]:
    """The declared modules, in declaration order."""
    with _lock:
        return list(_declared)


def load() -> None:
    """Import every declared module not imported through here yet (each once; a module that is
    mid-import when its own registrations ask again is not imported twice)."""
    with _lock:
        pending = [m for m in _declared if m not in _loaded]
        _loaded.update(pending)
    for module in pending:
        try:
            importlib.import_module(module)
        except BaseException:
            with _lock:  # a failed import is tried again next time, not taken as done
                _loaded.discard(module)
            raise
