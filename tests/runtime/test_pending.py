"""Tests for gen_agent._runtime.pending: the admission rule and the bounded FIFO queues behind the
prompt mailbox and the notification buffer (contract §4.17). Pure: no agents."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gen_agent import OverloadInfo
from gen_agent._runtime.pending import BoundedQueue, check_admission

# --- check_admission -------------------------------------------------------------------------


def test_an_item_that_fits_is_admitted() -> None:
    assert check_admission("prompts", 2, 10, 5, 3, 15) is None


def test_a_full_queue_rejects_by_count() -> None:
    info = check_admission("prompts", 3, 10, 1, 3, 100)

    assert info == OverloadInfo(queue="prompts", limit="count", pending_count=3,
                                pending_bytes=10, incoming_bytes=1, max_count=3, max_bytes=100)


def test_count_is_checked_before_bytes() -> None:
    info = check_admission("notifications", 1, 100, 100, 1, 100)

    assert info is not None and info.limit == "count"


def test_an_item_that_does_not_fit_is_rejected_by_bytes() -> None:
    info = check_admission("self_chain", 0, 0, 11, 1, 10)

    assert info == OverloadInfo(queue="self_chain", limit="bytes", pending_count=0,
                                pending_bytes=0, incoming_bytes=11, max_count=1, max_bytes=10)


def test_an_item_that_exactly_fills_the_byte_budget_is_admitted() -> None:
    assert check_admission("prompts", 1, 6, 4, 5, 10) is None
    assert check_admission("prompts", 1, 6, 5, 5, 10) is not None


@pytest.mark.parametrize(("max_count", "max_bytes", "limit"), [(0, 100, "count"),
                                                               (5, 0, "bytes")])
def test_zero_limits_disable_the_queue(max_count: int, max_bytes: int, limit: str) -> None:
    info = check_admission("prompts", 0, 0, 1, max_count, max_bytes)

    assert info is not None and info.limit == limit


@settings(max_examples=200, deadline=None)
@given(count=st.integers(0, 50), pending=st.integers(0, 500), incoming=st.integers(1, 500),
       max_count=st.integers(0, 50), max_bytes=st.integers(0, 500))
def test_the_admission_rule(count: int, pending: int, incoming: int, max_count: int,
                            max_bytes: int) -> None:
    info = check_admission("prompts", count, pending, incoming, max_count, max_bytes)

    if count >= max_count:
        assert info is not None and info.limit == "count"
    elif incoming > max_bytes - pending:
        assert info is not None and info.limit == "bytes"
    else:
        assert info is None
    if info is not None:
        assert (info.pending_count, info.pending_bytes, info.incoming_bytes, info.max_count,
                info.max_bytes) == (count, pending, incoming, max_count, max_bytes)


# --- BoundedQueue ----------------------------------------------------------------------------


def test_a_queue_is_fifo_and_tracks_bytes() -> None:
    q: BoundedQueue[str] = BoundedQueue("prompts", 10, 100)

    for item, size in (("a", 3), ("b", 4), ("c", 5)):
        assert q.offer(item, size) is None

    assert (len(q), q.bytes, list(q)) == (3, 12, ["a", "b", "c"])
    assert q.pop() == "a" and q.bytes == 9
    assert q.pop() == "b" and q.pop() == "c"
    assert (len(q), q.bytes) == (0, 0)
    with pytest.raises(IndexError):
        q.pop()


def test_a_rejected_offer_changes_nothing_and_names_the_queue() -> None:
    q: BoundedQueue[str] = BoundedQueue("notifications", 1, 10)
    q.offer("a", 4)

    by_count = q.offer("b", 1)
    q2: BoundedQueue[str] = BoundedQueue("notifications", 5, 10)
    q2.offer("a", 4)
    by_bytes = q2.offer("big", 7)

    assert by_count is not None and (by_count.queue, by_count.limit) == ("notifications",
                                                                         "count")
    assert by_bytes is not None and (by_bytes.limit, by_bytes.pending_bytes) == ("bytes", 4)
    assert (list(q), q.bytes, list(q2), q2.bytes) == (["a"], 4, ["a"], 4)


def test_remove_where_keeps_the_others_in_order_and_releases_bytes() -> None:
    q: BoundedQueue[int] = BoundedQueue("prompts", 10, 100)
    for i in range(6):
        q.offer(i, i + 1)

    removed = q.remove_where(lambda i: i % 2 == 0)

    assert removed == [0, 2, 4]
    assert list(q) == [1, 3, 5] and q.bytes == 2 + 4 + 6
    assert q.remove_where(lambda i: False) == [] and list(q) == [1, 3, 5]


def test_clear_returns_everything_oldest_first() -> None:
    q: BoundedQueue[str] = BoundedQueue("prompts", 10, 100)
    q.offer("x", 1)
    q.offer("y", 2)

    assert q.clear() == ["x", "y"]
    assert (len(q), q.bytes, list(q)) == (0, 0, [])


def test_find_returns_the_first_match_or_none() -> None:
    q: BoundedQueue[tuple[str, int]] = BoundedQueue("prompts", 10, 100)
    for item in (("a", 1), ("b", 2), ("a", 3)):
        q.offer(item, 1)

    assert q.find(lambda item: item[0] == "a") == ("a", 1)
    assert q.find(lambda item: item[0] == "z") is None
    assert len(q) == 3  # find does not remove


def test_capacity_is_released_by_pop() -> None:
    q: BoundedQueue[str] = BoundedQueue("prompts", 1, 10)
    q.offer("a", 10)
    assert q.offer("b", 1) is not None

    q.pop()

    assert q.offer("b", 10) is None


OPS = st.lists(st.one_of(
    st.tuples(st.just("offer"), st.integers(1, 30)),
    st.tuples(st.just("pop"), st.just(0)),
    st.tuples(st.just("remove"), st.integers(0, 3)),
    st.tuples(st.just("clear"), st.just(0)),
), max_size=60)


@settings(max_examples=200, deadline=None)
@given(ops=OPS, max_count=st.integers(0, 8), max_bytes=st.integers(0, 100))
def test_a_queue_behaves_like_a_bounded_list(ops: list[tuple[str, int]], max_count: int,
                                             max_bytes: int) -> None:
    q: BoundedQueue[tuple[int, int]] = BoundedQueue("prompts", max_count, max_bytes)
    model: list[tuple[int, int]] = []  # (serial, size)
    for serial, (op, arg) in enumerate(ops):
        if op == "offer":
            info = q.offer((serial, arg), arg)
            fits = len(model) < max_count and arg <= max_bytes - sum(s for _, s in model)
            assert (info is None) == fits
            if fits:
                model.append((serial, arg))
        elif op == "pop":
            if model:
                assert q.pop() == model.pop(0)
            else:
                with pytest.raises(IndexError):
                    q.pop()
        elif op == "remove":
            removed = q.remove_where(lambda item, m=arg: item[0] % 4 == m)
            assert removed == [item for item in model if item[0] % 4 == arg]
            model = [item for item in model if item[0] % 4 != arg]
        else:
            assert q.clear() == model
            model = []
        assert list(q) == model and len(q) == len(model)
        assert q.bytes == sum(size for _, size in model)
        assert len(q) <= max(max_count, 0) and q.bytes <= max(max_bytes, 0)

