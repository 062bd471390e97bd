"""`Event`: one normalized item of a turn's stream (docs/pages/contract.md#s5, `GenAgent.Event`;
docs: the values reference).

A backend turns whatever its provider streams into a sequence of `Event`s that ends with
exactly one terminal event (`"result"` or `"error"`). The runtime reads terminal data with
the plain string keys `reason`, `text`, `session_id` and `model`.
"""

from __future__ import annotations

import time
from typing import Any, Final

import msgspec

__all__ = ["KINDS", "TERMINAL_KINDS", "Event", "monotonic_ms"]

TERMINAL_KINDS: Final = frozenset({"result", "error"})
"""The kinds that end a turn (docs/pages/contract.md#s5: `Event.terminal?/1`; docs: the values
reference)."""

KINDS: Final = ("session", "text", "tool_use", "tool_result", "usage", "result", "error")
"""The kinds the runtime and the bundled backends know; any other string is allowed."""


def monotonic_ms() -> int:
    """Return the monotonic clock in whole milliseconds.

    Valid only for durations inside one process, never as wall-clock time. Mirrors the
    `System.monotonic_time(:millisecond)` stamps of the Elixir original.
    """
    return time.monotonic_ns() // 1_000_000


class Event(msgspec.Struct, frozen=True):
    """One normalized stream item of a turn. Immutable; safe to share between threads.

    Fields:
        kind: the event kind, a `str` (`"session"`, `"text"`, `"tool_use"`, `"tool_result"`,
            `"usage"`, `"result"`, `"error"`, or any other string a backend chooses).
        data: the payload, a `dict` with string keys. `text` events carry `text` (str) and
            optionally `message_boundary: True`; `usage` carries token counts
            (`input_tokens`, `output_tokens`, ... in tokens); `result` carries `text`,
            `session_id`, `model` and backend extras; `error` carries `reason`.
        timestamp: monotonic milliseconds when the event was made (see `monotonic_ms`).

    Raises:
        TypeError: `kind` is not a `str` or `data` is not a `dict` (the guards of
            `Event.new/2`).

    Mirrors: `%GenAgent.Event{}` (docs/pages/contract.md#s5; docs: the values reference).
    """

    kind: str
    data: dict[str, Any] = msgspec.field(default_factory=dict)
    timestamp: int = msgspec.field(default_factory=monotonic_ms)

    def __post_init__(self) -> None:
        if type(self.kind) is not str:
            raise TypeError(f"Event kind must be a str, got {type(self.kind).__name__}")
        if type(self.data) is not dict:
            raise TypeError(f"Event data must be a dict, got {type(self.data).__name__}")

    @classmethod
    def new(cls, kind: str, data: dict[str, Any] | None = None) -> Event:
        """Build an event stamped with the current monotonic time in milliseconds.

        Args:
            kind: the event kind (`str`).
            data: the payload (`dict`), default `{}`.

        Returns:
            A new `Event`.

        Raises:
            TypeError: `kind` is not a `str` or `data` is neither `None` nor a `dict`.

        Mirrors: `GenAgent.Event.new/2`.
        """
        return cls(kind, {} if data is None else data)

    @property
    def is_terminal(self) -> bool:
        """True iff the kind is `"result"` or `"error"`. Mirrors `GenAgent.Event.terminal?/1`."""
        return self.kind in TERMINAL_KINDS
