"""One short module per method; importing this package registers them all."""

import importlib
import pkgutil

from explorer.methods.base import METHODS, Method, Runtime, get_method, register, run_question

for _info in pkgutil.iter_modules(__path__):
    if not _info.name.startswith("_") and _info.name not in ("base",):
        importlib.import_module(f"{__name__}.{_info.name}")

__all__ = ["METHODS", "Method", "Runtime", "get_method", "register", "run_question"]
