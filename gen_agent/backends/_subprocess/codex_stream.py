"""The pure half of the Codex CLI backend: `codex exec --json` lines in, `Event`s out.

`CodexStreamTranslator` holds the per-turn state (thread id, model, the last `error`
notification) and never does I/O, so it is tested on recorded output of the real CLI without a
process. `gen_agent.backends.codex` re-exports it; the normalization table is in that module's
docstring. Events are built as `Event(kind, data, monotonic_ns() // 1_000_000)`: `Event.new`
without its call layers.

Mirrors: the stream normalization of `GenAgentCodex` (docs/pages/contract.md#s7-6, second bullet).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from time import monotonic_ns
from typing import Any, Final

from gen_agent._event import Event
from gen_agent.backend import BackendError
from gen_agent.backends._option_checks import is_arg
from gen_agent.backends._subprocess.jsonl import (
    LineTranslator,
    decode_line,
    feed_lines,
    no_result_error,
    without_type,
)

__all__ = [
    "PROVIDER", "THREAD_NOT_FOUND", "CodexStreamTranslator", "decode_line", "translate_lines",
    "usage_since",
]

PROVIDER: Final = "codex"
"""The `provider` of every `BackendError` and result this backend makes."""

THREAD_NOT_FOUND: Final = re.compile(
    r"no rollout found for thread id|No saved session found with ID|thread/resume failed",
    re.IGNORECASE,
)
"""What the CLI says when the thread it was asked to resume is gone: `codex exec resume` on
stderr, `codex app-server` in the error answer to `thread/resume` (0.171.0)."""

# Items that are tool activity: each becomes a tool_use and a tool_result with the whole item.
_TOOL_ITEMS: Final = frozenset({"command_execution", "file_change", "mcp_tool_call", "web_search"})
# The CLI reports HTTP failures only as text ("unexpected status 401 Unauthorized: ...",
# "exceeded retry limit, last status: 429 ..."); the status is what makes a reason retryable.
_STATUS_IN_MESSAGE: Final = re.compile(r"\b(?:unexpected status|last status:)\s+([1-5]\d\d)\b")
# A plan's usage limit or an exhausted quota: retrying the same request does not help until
# the limit resets ("You've hit your usage limit. ... try again at 12:16 PM.", "Quota
# exceeded. Check your plan and billing details.", `usage_limit_reached`).
_QUOTA_IN_MESSAGE: Final = re.compile(
    r"usage limit|usage_limit_reached|quota exceeded|insufficient_quota|exceeded your current"
    r" quota",
    re.IGNORECASE,
)
# A rate limit without a status in the text: retrying later may succeed.
_RATE_LIMIT_IN_MESSAGE: Final = re.compile(
    r"rate limit|rate_limit_exceeded|too many requests", re.IGNORECASE
)
# The item type's older names (codex exec --experimental-json, 0.4x): `item_type` held it.
_ITEM_ALIASES: Final = {"assistant_message": "agent_message"}


class CodexStreamTranslator(LineTranslator):
    """Turns decoded `codex exec --json` lines of one turn into `Event`s. Pure: no I/O.

    Feed every line, in order, to `translate(line)`; it returns the events that line produces
    (possibly none). After the first terminal event every further line produces nothing.
    `take_thread_id()` returns a thread id not yet reported, once. `end_of_stream()` gives
    the terminal event for a stream that ended without an outcome line.

    `turn.completed` reports the usage of the whole thread so far, not of the turn (seen
    with the real CLI 0.171 on a resumed thread: the loopback server answered 12/5, 30/3
    and 50/7 input/output tokens; the three `turn.completed` lines said 12/5, 42/8 and
    92/15; tests/backends/test_codex_turn_record_real_cli.py). The `usage` event is this
    turn's: those totals minus `thread_usage`, the totals after the thread's previous turn
    (per counter, never below zero); the result carries the new totals as `thread_usage`.

    Args:
        model: the model to report in the result (the CLI's JSONL does not name it), or None.
        thread_usage: the thread's totals after its previous completed turn (token
            counters by raw key), or None for a new thread (the totals are this turn's).

    Not thread-safe: one turn, one owner.
    """

    _PREFIX = PROVIDER

    def __init__(
        self, model: str | None = None, thread_usage: dict[str, int] | None = None
    ) -> None:
        super().__init__()
        self.model = model
        self.thread_usage = thread_usage
        self.thread_id: str | None = None
        self.last_notification: str | None = None

    def take_thread_id(self) -> str | None:
        """A thread id seen since the last call (the first one, or a changed one), or None."""
        return self.take_session_id()

    def end_of_stream(self, exit_code: int | None = None, stderr_tail: str = "") -> Event | None:
        """The terminal event for stdout ending before `turn.completed` / `turn.failed`.

        Args:
            exit_code: the CLI's exit status, if known.
            stderr_tail: the end of the CLI's stderr (text).

        Returns:
            None if the turn already ended; else a terminal `error`: kind `"cli_error"` with
            the last `error` notification as message when there was one, else `"no_result"`.
        """
        if self.finished:
            return None
        raw = {
            "exit_code": exit_code,
            "stderr_tail": stderr_tail,
            "notification": self.last_notification,
        }
        if self.last_notification is not None:
            reason = BackendError.new(PROVIDER, "cli_error", raw, message=self.last_notification)
        else:
            reason = no_result_error(
                PROVIDER, exit_code, stderr_tail, awaited="turn.completed", raw=raw
            )
        return self.error(reason)

    def _current_session_id(self) -> str | None:
        return self.thread_id

    # -- per line type ----------------------------------------------------------------

    def _thread_started(self, line: dict[str, Any]) -> list[Event]:
        thread_id = line.get("thread_id")
        if is_arg(thread_id):
            self.thread_id = thread_id
        return []

    def _nothing(self, line: dict[str, Any]) -> list[Event]:
        return []

    def _item_progress(self, line: dict[str, Any]) -> list[Event]:
        # item.updated: ignored (the completed item carries everything, §7.6) but for a
        # to-do list, which reports its progress only this way.
        item = line.get("item")
        if isinstance(item, dict) and _item_type(item) == "todo_list":
            return [Event("codex.item", dict(item), monotonic_ns() // 1_000_000)]
        return []

    def _item_started(self, line: dict[str, Any]) -> list[Event]:
        # item.started: a tool's start is `codex.tool_started` (the tool journal's `started`;
        # its tool_use / tool_result still come with the completed item, §7.6).
        item = line.get("item")
        if isinstance(item, dict) and _item_type(item) in _TOOL_ITEMS:
            return [Event("codex.tool_started", dict(item), monotonic_ns() // 1_000_000)]
        return self._item_progress(line)

    def _item_completed(self, line: dict[str, Any]) -> list[Event]:
        item = line.get("item")
        if not isinstance(item, dict):
            return [Event("codex.item", {"value": item}, monotonic_ns() // 1_000_000)]
        item_type = _item_type(item)
        if item_type == "agent_message":
            text = item.get("text")
            if not isinstance(text, str):
                return [Event("codex.item", dict(item), monotonic_ns() // 1_000_000)]
            data: dict[str, Any] = {"text": text, "message_boundary": True}
            if isinstance(item.get("id"), str):
                data["item_id"] = item["id"]
            return [Event("text", data, monotonic_ns() // 1_000_000)]
        if item_type in _TOOL_ITEMS:
            return [
                Event("tool_use", dict(item), monotonic_ns() // 1_000_000),
                Event("tool_result", dict(item), monotonic_ns() // 1_000_000),
            ]
        if item_type == "tool_call":
            return [Event("tool_use", dict(item), monotonic_ns() // 1_000_000)]
        if item_type == "tool_result":
            return [Event("tool_result", dict(item), monotonic_ns() // 1_000_000)]
        return [Event("codex.item", dict(item), monotonic_ns() // 1_000_000)]

    def _notification(self, line: dict[str, Any]) -> list[Event]:
        message = line.get("message")
        if isinstance(message, str) and message:
            self.last_notification = message
        return [Event("codex.error", without_type(line), monotonic_ns() // 1_000_000)]

    def _turn_completed(self, line: dict[str, Any]) -> list[Event]:
        events: list[Event] = []
        totals = _usage_data(line.get("usage"))
        if totals:
            events.append(
                Event("usage", usage_since(totals, self.thread_usage), monotonic_ns() // 1_000_000)
            )
        data: dict[str, Any] = {
            "session_id": self.thread_id,
            "model": self.model,
            "provider": PROVIDER,
            "raw": line,
        }
        if totals:
            data["thread_usage"] = totals
        events.append(Event("result", data, monotonic_ns() // 1_000_000))
        return events

    def _turn_failed(self, line: dict[str, Any]) -> list[Event]:
        error = line.get("error")
        message = error.get("message") if isinstance(error, dict) else error
        if not isinstance(message, str) or not message:
            message = self.last_notification
        return [self._error_event(_failure_reason(line, message))]

    def _error_event(self, reason: BackendError) -> Event:
        data = {"reason": reason, "session_id": self.thread_id, "model": self.model}
        return Event("error", {**data, "provider": PROVIDER}, monotonic_ns() // 1_000_000)


def _failure_reason(line: dict[str, Any], message: str | None) -> BackendError:
    """The `BackendError` of a `turn.failed` line (the one mapping for CLI failures).

    A usage limit or exhausted quota is kind `"quota"`, not retryable (the same request
    fails until the limit resets); an HTTP status named in the message ("unexpected status
    401 ...", "last status: 429") gives the kind and retryable flag of `BackendError.http`;
    a rate limit named without a status is `"rate_limited"`, retryable; any other failure is
    kind `"turn_failed"`, not retryable.
    """
    text = message or ""
    if _QUOTA_IN_MESSAGE.search(text):
        return BackendError.new(PROVIDER, "quota", line, message=message)
    match = _STATUS_IN_MESSAGE.search(text)
    if match is not None:
        body = {"error": {"message": message}}
        return BackendError.http(PROVIDER, int(match.group(1)), body, None, line)
    if _RATE_LIMIT_IN_MESSAGE.search(text):
        return BackendError.new(PROVIDER, "rate_limited", line, retryable=True, message=message)
    return BackendError.new(PROVIDER, "turn_failed", line, message=message)


def _item_type(item: dict[str, Any]) -> Any:
    """An item's type: `type`, else the older `item_type`, older names mapped to today's."""
    item_type = item.get("type")
    if item_type is None:
        item_type = item.get("item_type")
    return _ITEM_ALIASES.get(item_type, item_type) if isinstance(item_type, str) else item_type


_HANDLERS: Final = {
    "thread.started": CodexStreamTranslator._thread_started,
    "turn.started": CodexStreamTranslator._nothing,
    "item.started": CodexStreamTranslator._item_started,
    "item.updated": CodexStreamTranslator._item_progress,
    "item.completed": CodexStreamTranslator._item_completed,
    "error": CodexStreamTranslator._notification,
    "turn.completed": CodexStreamTranslator._turn_completed,
    "turn.failed": CodexStreamTranslator._turn_failed,
}
CodexStreamTranslator._HANDLERS = _HANDLERS


def _usage_data(usage: Any) -> dict[str, Any]:
    if not isinstance(usage, dict):
        return {}
    return {
        key: value
        for key, value in usage.items()
        if isinstance(key, str) and isinstance(value, int) and not isinstance(value, bool)
    }


def usage_since(totals: dict[str, int], before: dict[str, int] | None) -> dict[str, int]:
    """A turn's usage from a thread's running totals: `totals - before` per counter (a
    counter missing from `before` counts from 0; a difference below 0, which only a totals
    record of another thread could give, is taken as the total itself).

    Args:
        totals: the thread's totals after this turn (tokens, by raw key).
        before: the totals before this turn, or None (a new thread).

    Returns:
        A new dict with the keys of `totals`.
    """
    if not before:
        return dict(totals)
    turn = {key: value - before.get(key, 0) for key, value in totals.items()}
    if any(value < 0 for value in turn.values()):
        return dict(totals)
    return turn


def translate_lines(lines: Iterable[bytes | str | Any], model: str | None = None) -> list[Event]:
    """Translate a whole recorded turn (JSONL lines or decoded dicts) into its events.

    Args:
        lines: the lines in order: `bytes`/`str` JSON text (blank lines skipped) or decoded
            values.
        model: the model to report in the result, or None.

    Returns:
        The events up to and including the first terminal event, like a live turn (a
        recording without an outcome line ends with the `end_of_stream` error).
    """
    translator = CodexStreamTranslator(model)
    events = feed_lines(translator, lines)
    end = translator.end_of_stream()
    return [*events, end] if end is not None else events
