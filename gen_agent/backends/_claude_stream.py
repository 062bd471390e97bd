"""The pure half of the Claude CLI backend: stream-json lines in, `Event`s out.

`ClaudeStreamTranslator` holds the per-turn state (tool ids seen, streamed text not yet matched
by a completed assistant message, model, session id) and never does I/O, so it is tested on
recorded output of the real CLI without a process. `gen_agent.backends.claude` re-exports it;
the normalization table is in that module's docstring and in `docs/pages/backends/claude.md`.

Mirrors: the stream normalization of `GenAgentClaude` (contract §7.6, first bullet).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Final

from gen_agent.backend import BackendError
from gen_agent.backends._jsonl import (
    LineTranslator,
    decode_line,
    feed_lines,
    no_result_error,
    without_type,
)
from gen_agent.backends._option_checks import is_arg
from gen_agent.event import Event

__all__ = ["PROVIDER", "ClaudeStreamTranslator", "decode_line", "translate_lines"]

PROVIDER: Final = "claude"
"""The `provider` of every `BackendError` and result this backend makes."""


class ClaudeStreamTranslator(LineTranslator):
    """Turns decoded stream-json lines of one CLI turn into `Event`s. Pure: no I/O.

    Feed every line, in order, to `translate(line)`; it returns the events that line produces
    (possibly none). After the first terminal event (`result` / `error`) every further line
    produces nothing. `take_session_id()` returns a session id not yet reported, once.
    `end_of_stream()` gives the terminal event for a stream that ended without a result line.

    State kept per turn: tool ids seen (dedup), streamed text not yet matched by a completed
    assistant message, the current model, the session id.

    Not thread-safe: one turn, one owner.
    """

    _PREFIX = PROVIDER

    def __init__(self) -> None:
        super().__init__()
        self.session_id: str | None = None
        self.model: str | None = None
        self._tool_ids: set[str] = set()
        self._result_ids: set[str] = set()
        self._streamed: dict[str, str] = {}
        self._stream_message: str | None = None
        self._block_starts = False

    def end_of_stream(self, exit_code: int | None = None, stderr_tail: str = "") -> Event | None:
        """The terminal event for stdout ending before a `result` line.

        Args:
            exit_code: the CLI's exit status, if known.
            stderr_tail: the end of the CLI's stderr (text).

        Returns:
            None if the turn already ended; else a terminal `error` {reason, session_id} whose
            reason is a `BackendError` of kind `"no_result"` with the exit status and the
            stderr tail.
        """
        if self.finished:
            return None
        raw = {"exit_code": exit_code, "stderr_tail": stderr_tail}
        return self.error(
            no_result_error(PROVIDER, exit_code, stderr_tail, awaited="its result line", raw=raw)
        )

    def _current_session_id(self) -> str | None:
        return self.session_id

    def _error_event(self, reason: BackendError) -> Event:
        return Event.new("error", {"reason": reason, "session_id": self.session_id})

    # -- per line type ----------------------------------------------------------------

    def _note(self, line: dict[str, Any]) -> None:
        session_id = line.get("session_id")
        if isinstance(session_id, str) and session_id:
            self.session_id = session_id

    def _system(self, line: dict[str, Any]) -> list[Event]:
        subtype = line.get("subtype")
        if subtype == "init":
            if isinstance(line.get("model"), str):
                self.model = line["model"]
            return [Event.new("session", _session_data(line))]
        name = subtype if isinstance(subtype, str) and subtype else "system"
        return [Event.new(f"claude.{name}", without_type(line))]

    def _assistant(self, line: dict[str, Any]) -> list[Event]:
        message = line.get("message")
        if not isinstance(message, dict):
            return [Event.new("claude.assistant", without_type(line))]
        model = message.get("model")
        if isinstance(model, str) and model and not model.startswith("<"):
            self.model = model
        message_id = message.get("id") if isinstance(message.get("id"), str) else None
        subagent = line.get("parent_tool_use_id")
        events: list[Event] = []
        texts: list[str] = []
        for block in _blocks(message):
            if block.get("type") == "text":
                if isinstance(block.get("text"), str):
                    texts.append(block["text"])
                continue
            self._flush_text(texts, message_id, subagent, events)
            texts = []
            events.extend(self._block_event(block, subagent))
        self._flush_text(texts, message_id, subagent, events)
        return events

    def _flush_text(
        self, texts: list[str], message_id: str | None, subagent: Any, events: list[Event]
    ) -> None:
        text = "".join(texts)
        if not text:
            return
        if subagent is not None:
            data = {"text": text, "parent_tool_use_id": subagent}
            events.append(Event.new("claude.subagent_text", data))
            return
        streamed = self._streamed.get(message_id or "", "")
        if streamed.startswith(text):
            self._streamed[message_id or ""] = streamed[len(text) :]
        elif streamed and text.startswith(streamed):
            self._streamed[message_id or ""] = ""
            events.append(Event.new("text", {"text": text[len(streamed) :]}))
        else:
            events.append(Event.new("text", {"text": text, "message_boundary": True}))

    def _block_event(self, block: dict[str, Any], subagent: Any) -> list[Event]:
        block_type = block.get("type")
        if block_type == "tool_use":
            return self._tool_use(block, subagent)
        name = block_type if isinstance(block_type, str) and block_type else "content_block"
        return [Event.new(f"claude.{name}", dict(block))]

    def _tool_use(self, block: dict[str, Any], subagent: Any) -> list[Event]:
        tool_id = block.get("id")
        if isinstance(tool_id, str):
            if tool_id in self._tool_ids:
                return []
            self._tool_ids.add(tool_id)
        data = dict(block)
        if subagent is not None:
            data["parent_tool_use_id"] = subagent
        return [Event.new("tool_use", data)]

    def _tool_result(self, block: dict[str, Any], extra: dict[str, Any]) -> list[Event]:
        tool_id = block.get("tool_use_id")
        if isinstance(tool_id, str):
            if tool_id in self._result_ids:
                return []
            self._result_ids.add(tool_id)
        return [Event.new("tool_result", {**block, **extra})]

    def _user(self, line: dict[str, Any]) -> list[Event]:
        message = line.get("message")
        extra: dict[str, Any] = {}
        if line.get("parent_tool_use_id") is not None:
            extra["parent_tool_use_id"] = line["parent_tool_use_id"]
        events: list[Event] = []
        for block in _blocks(message if isinstance(message, dict) else {}):
            if block.get("type") == "tool_result":
                events.extend(self._tool_result(block, extra))
        return events

    def _top_level_tool(self, line: dict[str, Any]) -> list[Event]:
        # Older CLI versions and wrappers emit tool events as lines of their own.
        block = without_type(line)
        if line.get("type") == "tool_use":
            return self._tool_use({"type": "tool_use", **block}, None)
        return self._tool_result({"type": "tool_result", **block}, {})

    def _stream_event(self, line: dict[str, Any]) -> list[Event]:
        event = line.get("event")
        if not isinstance(event, dict) or line.get("parent_tool_use_id") is not None:
            return []
        return self._stream_frame(event)

    def _stream_frame(self, event: dict[str, Any]) -> list[Event]:
        frame = event.get("type")
        if frame == "message_start":
            message = event.get("message")
            message_id = message.get("id") if isinstance(message, dict) else None
            self._stream_message = message_id if isinstance(message_id, str) else None
            self._streamed.setdefault(self._stream_message or "", "")
        elif frame == "content_block_start":
            block = event.get("content_block")
            self._block_starts = isinstance(block, dict) and block.get("type") == "text"
        elif frame == "content_block_delta":
            delta = event.get("delta")
            if isinstance(delta, dict) and delta.get("type") == "text_delta":
                return self._text_delta(delta.get("text"))
        return []

    def _text_delta(self, text: Any) -> list[Event]:
        if not isinstance(text, str) or not text:
            return []
        key = self._stream_message or ""
        self._streamed[key] = self._streamed.get(key, "") + text
        data: dict[str, Any] = {"text": text}
        if self._block_starts:
            data["message_boundary"] = True
            self._block_starts = False
        return [Event.new("text", data)]

    def _content_block_delta(self, line: dict[str, Any]) -> list[Event]:
        return self._stream_frame(line)

    def _result(self, line: dict[str, Any]) -> list[Event]:
        events: list[Event] = []
        usage = _usage_data(line.get("usage"))
        if usage:
            events.append(Event.new("usage", usage))
        if _is_failure(line):
            events.append(Event.new("error", self._error_data(line, _result_error(line))))
            return events
        data: dict[str, Any] = {
            "session_id": self.session_id,
            "model": self.model or _model_from_usage(line),
            "provider": PROVIDER,
        }
        text = line.get("result")
        if isinstance(text, str) and text:
            data["text"] = text
        data.update(_result_fields(line))
        data["raw"] = line
        events.append(Event.new("result", data))
        return events

    def _error(self, line: dict[str, Any]) -> list[Event]:
        error = line.get("error")
        source = error if isinstance(error, dict) else line
        named = error.get("type") if isinstance(error, dict) else error
        kind: str = named if isinstance(named, str) and is_arg(named) else "cli_error"
        text = source.get("message")
        message: str | None = text if isinstance(text, str) else None
        if message is None and isinstance(error, str):
            message = error
        reason = BackendError.new(PROVIDER, kind, line, message=message)
        return [Event.new("error", self._error_data(line, reason))]

    def _error_data(self, line: dict[str, Any], reason: BackendError) -> dict[str, Any]:
        data: dict[str, Any] = {
            "reason": reason,
            "session_id": self.session_id,
            "model": self.model,
            "provider": PROVIDER,
        }
        data.update(_result_fields(line))
        return data


def _result_fields(line: dict[str, Any]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for source, target in _RESULT_FIELDS:
        if source in line and line[source] is not None:
            fields[target] = line[source]
    return fields


_RESULT_FIELDS: Final = (
    ("total_cost_usd", "cost_usd"),
    ("duration_ms", "duration_ms"),
    ("duration_api_ms", "duration_api_ms"),
    ("num_turns", "num_turns"),
    ("is_error", "is_error"),
    ("subtype", "subtype"),
    ("stop_reason", "stop_reason"),
)

_HANDLERS: Final = {
    "system": ClaudeStreamTranslator._system,
    "assistant": ClaudeStreamTranslator._assistant,
    "user": ClaudeStreamTranslator._user,
    "stream_event": ClaudeStreamTranslator._stream_event,
    "content_block_delta": ClaudeStreamTranslator._content_block_delta,
    "tool_use": ClaudeStreamTranslator._top_level_tool,
    "tool_result": ClaudeStreamTranslator._top_level_tool,
    "result": ClaudeStreamTranslator._result,
    "error": ClaudeStreamTranslator._error,
}
ClaudeStreamTranslator._HANDLERS = _HANDLERS


def _blocks(message: dict[str, Any]) -> Iterator[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        yield {"type": "text", "text": content}
    elif isinstance(content, list):
        yield from (block for block in content if isinstance(block, dict))


def _session_data(line: dict[str, Any]) -> dict[str, Any]:
    keys = ("session_id", "model", "cwd", "tools", "claude_code_version")
    data = {key: line[key] for key in keys if key in line}
    if "permissionMode" in line:
        data["permission_mode"] = line["permissionMode"]
    return data


def _usage_data(usage: Any) -> dict[str, Any]:
    if not isinstance(usage, dict):
        return {}
    keys = (
        "input_tokens",
        "output_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
    )
    return {key: usage[key] for key in keys if isinstance(usage.get(key), int)}


def _model_from_usage(line: dict[str, Any]) -> str | None:
    usage = line.get("modelUsage")
    if isinstance(usage, dict) and len(usage) == 1:
        (name,) = usage
        return name if isinstance(name, str) else None
    return None


def _is_failure(line: dict[str, Any]) -> bool:
    subtype = line.get("subtype")
    failed_subtype = isinstance(subtype, str) and (subtype == "error" or subtype[:6] == "error_")
    return line.get("is_error") is True or failed_subtype


def _result_error(line: dict[str, Any]) -> BackendError:
    """The `BackendError` of a failed result line (the one mapping for result failures)."""
    message = _result_message(line)
    status = line.get("api_error_status")
    if isinstance(status, int) and not isinstance(status, bool):
        return BackendError.http(PROVIDER, status, {"error": {"message": message}}, None, line)
    subtype = line.get("subtype")
    kind = subtype if isinstance(subtype, str) and subtype.startswith("error") else "error_result"
    return BackendError.new(PROVIDER, kind, line, message=message)


def _result_message(line: dict[str, Any]) -> str:
    text = line.get("result")
    if isinstance(text, str) and text:
        return text
    errors = line.get("errors")
    if isinstance(errors, list) and errors:
        return "; ".join(str(item) for item in errors)
    return f"claude result {line.get('subtype')!s} (is_error={line.get('is_error')!s})"


def translate_lines(lines: Iterable[bytes | str | Any]) -> list[Event]:
    """Translate a whole recorded turn (JSONL lines or decoded dicts) into its events.

    Args:
        lines: the lines in order: `bytes`/`str` JSON text (blank lines skipped) or decoded
            values.

    Returns:
        The events up to and including the first terminal event (like a live turn).
    """
    return feed_lines(ClaudeStreamTranslator(), lines)
