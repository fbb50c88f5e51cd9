"""The prefix cache: a prompt that opens like a recent one is encoded from where they part, with the
same tokens and signals as encoding it whole (tiny random model: fast and deterministic)."""

from __future__ import annotations

import math

import pytest

from explorer.engine.generation import Engine
from explorer.engine.prefix_cache import PrefixCache, shared_length

OPENING = ("Answer the question in a few words. Here are examples of questions and answers about places, "
           "people and dates, written one after another so the model learns the format. ") * 3


class Switch:
    """One engine (an engine owns its model's attention probe), generating with or without the cache."""

    def __init__(self, engine: Engine, cache: PrefixCache | None) -> None:
        self.engine, self.prefix_cache = engine, cache

    def generate(self, prompt: str, **kwargs):
        self.engine.prefix_cache = self.prefix_cache
        try:
            return self.engine.generate(prompt, **kwargs)
        finally:
            self.engine.prefix_cache = None

    def encode_prompt(self, prompt: str):
        return self.engine.encode_prompt(prompt)


@pytest.fixture(scope="module")
def engine(tiny_lm) -> Engine:
    return Engine(tiny_lm)


@pytest.fixture()
def engines(engine):
    return Switch(engine, None), Switch(engine, PrefixCache(min_shared=8))


def _same(a, b) -> None:
    assert a.ids == b.ids and a.text == b.text
    for x, y in zip(a.tokens, b.tokens, strict=True):
        for key in ("prob", "entropy", "amax", "rind"):
            vx, vy = getattr(x, key), getattr(y, key)
            if vx is None or vy is None:
                assert vx is vy, key
            else:
                assert math.isclose(vx, vy, rel_tol=1e-4, abs_tol=1e-5), (key, vx, vy)


def test_shared_length() -> None:
    assert shared_length([1, 2, 3], [1, 2, 4, 5]) == 2
    assert shared_length([], [1]) == 0 and shared_length([7, 8], [7, 8]) == 2


def test_a_second_prompt_reuses_the_opening_and_generates_the_same(engines) -> None:
    plain, cached = engines
    first = OPENING + "Question: Where was Mozart born? Answer:"
    second = OPENING + "Question: Who designed the Apple I? Answer:"
    _same(plain.generate(first, max_new_tokens=6), cached.generate(first, max_new_tokens=6))
    assert cached.prefix_cache.hits == 0  # nothing to share yet
    a = plain.generate(second, max_new_tokens=6)
    b = cached.generate(second, max_new_tokens=6)
    _same(a, b)
    assert cached.prefix_cache.hits == 1
    opening = len(cached.encode_prompt(OPENING)[1])
    assert cached.prefix_cache.saved_tokens >= opening - 2  # the exemplars were not encoded again
    # the attention rows read back later (QFS, what-if) come from the same cache
    row_a, row_b = plain.engine._replay_row(a, 2), cached.engine._replay_row(b, 2)
    assert len(row_a) == len(row_b) and row_a == pytest.approx(row_b, rel=1e-4, abs=1e-5)


def test_the_same_prompt_again_feeds_only_its_last_token(engines) -> None:
    _, cached = engines
    prompt = OPENING + "Question: Where was Mozart born? Answer:"
    cached.generate(prompt, max_new_tokens=2)
    before = cached.prefix_cache.saved_tokens
    cached.generate(prompt, max_new_tokens=2)
    assert cached.prefix_cache.saved_tokens - before == len(cached.encode_prompt(prompt)[1]) - 1


def test_the_cache_keeps_a_bounded_number_of_prompts(engine) -> None:
    cached = Switch(engine, PrefixCache(entries=2, min_shared=8))
    for i in range(4):
        cached.generate(OPENING + f"Question {i}: what? Answer:", max_new_tokens=1)
    assert len(cached.prefix_cache._items) == 2 and cached.prefix_cache.hits == 3
