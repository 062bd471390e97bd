"""Tests for `gen_agent.term_size`: the byte measure behind every byte limit (§1.4, §12.6)."""

from __future__ import annotations

import pytest

from gen_agent._event import Event
from gen_agent._size import term_size


class _Opaque:
    """A class msgspec cannot encode natively; pickled by the fallback."""

    def __init__(self, payload: str) -> None:
        self.payload = payload

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Opaque) and other.payload == self.payload

    def __repr__(self) -> str:  # a stable test id
        return f"_Opaque({self.payload!r})"

    def __hash__(self) -> int:
        return hash(self.payload)


VALUES = [
    "",
    "hello",
    b"bytes",
    0,
    -1,
    2**40,
    1.5,
    None,
    True,
    [1, 2, 3],
    ("ok", "x"),
    {"a": {"b": {"c": [1, {"d": "e"}]}}},
    Event("text", {"text": "x"}, 7),
    ("error", ValueError("boom")),
    _Opaque("p"),
]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_is_deterministic_and_positive(value: object) -> None:
    first = term_size(value)

    assert first == term_size(value)
    assert first >= 1


def test_equal_values_have_equal_sizes() -> None:
    assert term_size({"k": [1, "two", 3.0]}) == term_size({"k": [1, "two", 3.0]})
    assert term_size(Event("usage", {"input_tokens": 3}, 1)) == term_size(
        Event("usage", {"input_tokens": 3}, 1)
    )
    assert term_size(("error", KeyError("k"))) == term_size(("error", KeyError("k")))


def test_grows_with_payload_length() -> None:
    assert term_size("a" * 1000) > term_size("a" * 10)
    assert term_size(Event("text", {"text": "a" * 1000}, 0)) > term_size(
        Event("text", {"text": "a" * 10}, 0)
    )
    assert term_size({"k": ["x"] * 100}) > term_size({"k": ["x"]})


@pytest.mark.parametrize("n", [0, 1, 31, 32, 255, 256, 1000, 65535, 65536, 100_000])
def test_ascii_str_measures_n_plus_one_to_five(n: int) -> None:
    size = term_size("a" * n)

    assert n + 1 <= size <= n + 5


def test_measures_an_event() -> None:
    small = term_size(Event("text", {"text": ""}, 0))
    large = term_size(Event("text", {"text": "y" * 500}, 0))

    assert large - small >= 500


def test_measures_tuples_holding_exceptions() -> None:
    size = term_size(("task_crashed", RuntimeError("x" * 200)))

    assert size > 200
    assert size == term_size(("task_crashed", RuntimeError("x" * 200)))


def test_measures_unpicklable_values_by_type_name() -> None:
    size = term_size(lambda: None)

    assert size == term_size(lambda: 1)
    assert size == term_size("<lambda>")


def test_measures_nested_dicts() -> None:
    nested: dict[str, object] = {"leaf": "v"}
    for depth in range(20):
        nested = {f"level{depth}": nested}

    assert term_size(nested) > term_size({"leaf": "v"})


def test_measures_arbitrary_picklable_objects() -> None:
    assert term_size(_Opaque("a" * 1000)) > term_size(_Opaque("a"))


def test_measures_ints_beyond_64_bits() -> None:
    assert term_size({"raw": 2**70}) > term_size({"raw": 1})


@pytest.mark.parametrize(
    "value", ["a\ud800b", {"k": ["\udfff"]}, Event("text", {"text": "\ud83d"}, 1)], ids=repr)
def test_a_lone_surrogate_is_measured_not_raised(value: object) -> None:
    # UTF-8 (and so MessagePack) cannot encode a lone surrogate: the value is pickled whole.
    size = term_size(value)

    assert size >= 1
    assert size == term_size(value)
