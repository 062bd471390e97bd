"""Tests for gen_agent._runtime.results: the bounded poll-result cache (contract §4.16). Pure."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gen_agent import RequestRef, term_size
from gen_agent._runtime.results import ResultCache


def _size(ref: RequestRef, outcome: Any) -> int:
    # Documented entry size: the size of the (ref, result) pair, the ref by its id.
    return term_size((ref.id, outcome))


def test_put_then_get() -> None:
    cache = ResultCache(10, 10_000)
    ref = RequestRef.new()

    cache.put(ref, ("ok", "response"))

    assert cache.get(ref) == ("ok", "response") and ref in cache and len(cache) == 1
    assert cache.bytes == _size(ref, ("ok", "response"))
    missing = RequestRef.new()
    assert cache.get(missing) is None and missing not in cache


def test_the_count_bound_prunes_oldest_first() -> None:
    cache = ResultCache(2, 10_000)
    refs = [RequestRef.new() for _ in range(3)]

    for i, ref in enumerate(refs):
        cache.put(ref, ("ok", i))

    assert [cache.get(r) for r in refs] == [None, ("ok", 1), ("ok", 2)]
    assert cache.bytes == sum(_size(r, ("ok", i)) for i, r in enumerate(refs[1:], start=1))


def test_a_zero_count_keeps_nothing() -> None:
    cache = ResultCache(0, 10_000)
    ref = RequestRef.new()

    cache.put(ref, ("error", "cancelled"))

    assert cache.get(ref) is None and len(cache) == 0 and cache.bytes == 0


def test_a_zero_byte_budget_keeps_nothing() -> None:
    cache = ResultCache(10, 0)
    ref = RequestRef.new()

    cache.put(ref, ("ok", 1))

    assert len(cache) == 0 and cache.bytes == 0


def test_the_byte_bound_prunes_oldest_first() -> None:
    refs = [RequestRef.new() for _ in range(3)]
    outcome = ("ok", "x" * 50)
    size = _size(refs[0], outcome)
    cache = ResultCache(10, 2 * size)

    for ref in refs:
        cache.put(ref, outcome)

    assert [ref in cache for ref in refs] == [False, True, True]
    assert cache.bytes == 2 * size


def test_an_entry_bigger_than_the_budget_evicts_the_older_ones_and_itself() -> None:
    small = [RequestRef.new() for _ in range(3)]
    big = RequestRef.new()
    cache = ResultCache(10, 3 * _size(small[0], ("ok", 0)) + 10)
    for ref in small:
        cache.put(ref, ("ok", 0))
    assert len(cache) == 3

    cache.put(big, ("ok", "y" * 10_000))

    assert len(cache) == 0 and cache.bytes == 0


def test_replacing_an_entry_keeps_its_position_and_updates_bytes() -> None:
    a, b, c = (RequestRef.new() for _ in range(3))
    cache = ResultCache(2, 10_000)
    cache.put(a, ("ok", 1))
    cache.put(b, ("ok", 2))

    cache.put(a, ("error", "a longer replacement reason"))
    assert cache.bytes == _size(a, ("error", "a longer replacement reason")) + _size(
        b, ("ok", 2))
    cache.put(c, ("ok", 3))

    assert [r in cache for r in (a, b, c)] == [False, True, True]  # a was still the oldest


@settings(max_examples=200, deadline=None)
@given(puts=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 300)), max_size=40),
       max_count=st.integers(0, 6), max_bytes=st.integers(0, 1_500))
def test_the_cache_matches_an_insertion_ordered_model(puts: list[tuple[int, int]],
                                                      max_count: int, max_bytes: int) -> None:
    refs = [RequestRef.new() for _ in range(10)]
    cache = ResultCache(max_count, max_bytes)
    model: dict[int, tuple[Any, int]] = {}  # insertion-ordered, like the cache
    for index, length in puts:
        outcome = ("ok", "z" * length)
        cache.put(refs[index], outcome)
        model[index] = (outcome, _size(refs[index], outcome))
        while model and (len(model) > max_count
                         or sum(size for _, size in model.values()) > max_bytes):
            del model[next(iter(model))]
        assert {i for i in range(10) if refs[i] in cache} == set(model)
        assert all(cache.get(refs[i]) == model[i][0] for i in model)
        assert cache.bytes == sum(size for _, size in model.values())
        assert len(cache) <= max_count and cache.bytes <= max_bytes
