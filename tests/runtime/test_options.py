"""Tests for gen_agent._runtime.options: the reserved start options, their defaults and validation
(contract §2.2). Pure: no agents."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gen_agent._runtime.options import (
    DEFAULTS,
    RESERVED,
    AgentOptions,
    build_options,
    split_options,
    validate_shutdown,
)

# The defaults table of contract §2.2 (watchdog 10 min, shutdown 5 s, ...), copied here.
SPEC_DEFAULTS = {
    "watchdog_ms": 600_000,
    "shutdown_ms": 5_000,
    "max_tell_results": 100,
    "max_tell_result_bytes": 8_388_608,
    "max_events_per_turn": 1_000,
    "max_event_bytes_per_turn": 1_048_576,
    "event_retention": "compact",
    "max_pending_prompts": 1_000,
    "max_pending_prompt_bytes": 1_048_576,
    "max_pending_notifications": 1_000,
    "max_pending_notification_bytes": 1_048_576,
}
POSITIVE = ("max_events_per_turn", "max_event_bytes_per_turn")
NON_NEGATIVE = ("max_tell_results", "max_tell_result_bytes", "max_pending_prompts",
                "max_pending_prompt_bytes", "max_pending_notifications",
                "max_pending_notification_bytes")


def test_the_defaults_are_those_of_the_contract() -> None:
    assert {k: DEFAULTS[k] for k in SPEC_DEFAULTS} == SPEC_DEFAULTS
    options = build_options({})
    assert {k: getattr(options, k) for k in SPEC_DEFAULTS} == SPEC_DEFAULTS


def test_every_contract_option_is_reserved() -> None:
    assert set(SPEC_DEFAULTS) <= set(RESERVED)
    assert set(DEFAULTS) == set(RESERVED)


def test_none_means_the_default_for_every_option() -> None:
    assert build_options({key: None for key in RESERVED}) == build_options({})


def test_split_options_separates_reserved_from_forwarded() -> None:
    opts = {"watchdog_ms": 5, "max_tell_results": None, "scripts": [], "color": "red"}

    reserved, forwarded = split_options(opts)

    assert reserved == {"watchdog_ms": 5, "max_tell_results": None}
    assert forwarded == {"scripts": [], "color": "red"}


@pytest.mark.parametrize("value", ["infinity", math.inf, float("inf")])
def test_an_infinite_watchdog_is_none(value: Any) -> None:
    assert build_options({"watchdog_ms": value}).watchdog_ms is None


@pytest.mark.parametrize("value", [1, 50, 600_000, 2**40])
def test_a_positive_watchdog_is_kept_in_milliseconds(value: int) -> None:
    assert build_options({"watchdog_ms": value}).watchdog_ms == value


@pytest.mark.parametrize("value", [0, -1, 1.5, 100.0, "100", "Infinity", -math.inf, math.nan,
                                   True, False, [], {}])
def test_an_invalid_watchdog_raises_value_error_naming_it(value: Any) -> None:
    with pytest.raises(ValueError, match="watchdog_ms") as info:
        build_options({"watchdog_ms": value})
    assert repr(value) in str(info.value)  # the message echoes the value received


@pytest.mark.parametrize(("value", "expected"), [
    (None, 5_000), (0, 0), (1, 1), (30_000, 30_000), ("infinity", None), (math.inf, None)])
def test_validate_shutdown_accepts_non_negative_ints_and_infinity(value: Any,
                                                                  expected: Any) -> None:
    assert validate_shutdown(value) == expected
    if value is not None:
        assert build_options({"shutdown_ms": value}).shutdown_ms == expected


@pytest.mark.parametrize("value", [-1, 2.5, "5s", True, -math.inf])
def test_validate_shutdown_rejects_everything_else(value: Any) -> None:
    with pytest.raises(ValueError, match="shutdown_ms"):
        validate_shutdown(value)


@pytest.mark.parametrize("key", POSITIVE)
@pytest.mark.parametrize("value", [0, -1, -100, 1.0, "1", True])
def test_capture_bounds_must_be_positive_ints(key: str, value: Any) -> None:
    with pytest.raises(ValueError, match=key):
        build_options({key: value})


@pytest.mark.parametrize("key", POSITIVE)
def test_capture_bounds_accept_one(key: str) -> None:
    assert getattr(build_options({key: 1}), key) == 1


@pytest.mark.parametrize("key", NON_NEGATIVE)
@pytest.mark.parametrize("value", [-1, 0.0, "0", False, [0]])
def test_pending_and_cache_bounds_must_be_non_negative_ints(key: str, value: Any) -> None:
    with pytest.raises(ValueError, match=key):
        build_options({key: value})


@pytest.mark.parametrize("key", NON_NEGATIVE)
def test_pending_and_cache_bounds_accept_zero(key: str) -> None:
    assert getattr(build_options({key: 0}), key) == 0


@pytest.mark.parametrize("value", ["compact", "lossless"])
def test_event_retention_accepts_its_two_modes(value: str) -> None:
    assert build_options({"event_retention": value}).event_retention == value


@pytest.mark.parametrize("value", ["Compact", "all", "", 1])
def test_event_retention_rejects_anything_else(value: Any) -> None:
    with pytest.raises(ValueError, match="event_retention"):
        build_options({"event_retention": value})


def test_agent_options_are_frozen() -> None:
    options = build_options({})
    with pytest.raises(AttributeError):
        options.watchdog_ms = 1  # type: ignore[misc]
    assert isinstance(options, AgentOptions) and isinstance(options, msgspec.Struct)


@settings(max_examples=150, deadline=None)
@given(key=st.sampled_from(NON_NEGATIVE), value=st.integers(min_value=-(2**63), max_value=2**63))
def test_non_negative_bounds_accept_exactly_the_non_negative_ints(key: str, value: int) -> None:
    if value >= 0:
        assert getattr(build_options({key: value}), key) == value
    else:
        with pytest.raises(ValueError):
            build_options({key: value})


@settings(max_examples=150, deadline=None)
@given(key=st.sampled_from(POSITIVE), value=st.integers(min_value=-(2**40), max_value=2**40))
def test_positive_bounds_accept_exactly_the_positive_ints(key: str, value: int) -> None:
    if value > 0:
        assert getattr(build_options({key: value}), key) == value
    else:
        with pytest.raises(ValueError):
            build_options({key: value})

