"""The one keyed process cache: built once per key, rebuilt when the stamp or a validity check changes."""

from __future__ import annotations

import threading

from explorer.cache import CACHES, KeyedCache, clear_all


def test_a_value_is_built_once_per_key_and_rebuilt_under_a_new_stamp() -> None:
    cache: KeyedCache[list] = KeyedCache("test values")
    builds: list[str] = []

    def build(tag: str):
        return lambda: builds.append(tag) or [tag]

    first = cache.get("a", build("a1"), stamp=(1, 10))
    assert cache.get("a", build("a2"), stamp=(1, 10)) is first
    assert cache.get("a", build("a3"), stamp=(2, 11)) == ["a3"]  # the file changed
    assert cache.get("a", build("a4"), stamp=(2, 11), valid=lambda v: v != ["a3"]) == ["a4"]
    assert builds == ["a1", "a3", "a4"]
    assert cache.peek("a", stamp=(2, 11)) == ["a4"] and cache.peek("a", stamp=(1, 10)) is None
    assert CACHES["test values"] is cache
    clear_all()
    assert len(cache) == 0


def test_threads_asking_for_one_key_share_one_build() -> None:
    cache: KeyedCache[object] = KeyedCache("test threads")
    calls = []
    barrier = threading.Barrier(4)

    def slow() -> object:
        calls.append(1)
        return object()

    def ask() -> object:
        barrier.wait()
        return cache.get("k", slow)

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
