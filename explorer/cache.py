"""One small keyed cache for what a process loads once: engines, encoders, classifiers, indexes, hashes.

Loading a model, an index or a classifier takes seconds; every caller in a process (the CLI, the
web app's threads, the evaluation runner) shares one copy. Each cache is a :class:`KeyedCache`
with one eviction rule: an entry is kept for the life of the process and rebuilt when the
``stamp`` it was built under (a file's size and modification time, say) differs from the caller's
now. ``build`` runs under the cache's lock, so two threads asking for one key load it once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

V = TypeVar("V")

#: Every cache by name, so a long-running app (or a test) can clear them all.
CACHES: dict[str, KeyedCache[Any]] = {}


class KeyedCache(Generic[V]):
    """Values by key, each remembered with the stamp it was built under."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._entries: dict[Hashable, tuple[Hashable, V]] = {}
        self.lock = threading.RLock()
        CACHES[name] = self

    def get(self, key: Hashable, build: Callable[[], V], *, stamp: Hashable = (),
            valid: Callable[[V], bool] | None = None) -> V:
        """The value for ``key``, built (once) when absent, built under another stamp, or not ``valid``."""
        with self.lock:
            held = self._entries.get(key)
            if held is not None and held[0] == stamp and (valid is None or valid(held[1])):
                return held[1]
            value = build()
            self._entries[key] = (stamp, value)
            return value

    def peek(self, key: Hashable, *, stamp: Hashable = ()) -> V | None:
        """The value for ``key`` if it is held under ``stamp``, without building it."""
        with self.lock:
            held = self._entries.get(key)
            return held[1] if held is not None and held[0] == stamp else None

    def clear(self) -> None:
        with self.lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


def clear_all() -> None:
    """Forget everything every process cache holds."""
    for cache in CACHES.values():
        cache.clear()
