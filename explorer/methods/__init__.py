"""One module per method (a folder where the method has helpers); importing this package registers them all."""

import importlib
import pkgutil

from explorer.methods.base import METHODS, Method, get_method, register, run_question

for _info in pkgutil.iter_modules(__path__):
    if not _info.name.startswith("_") and _info.name not in ("base",):
        importlib.import_module(f"{__name__}.{_info.name}")

__all__ = ["METHODS", "Method", "get_method", "register", "run_question"]
