"""The pure half of the Claude CLI backend: stream-json lines in, `Event`s out.

`ClaudeStreamTranslator` holds the per-turn state (tool ids seen, streamed text not yet matched
by a completed assistant message, model, session id) and never does I/O, so it is tested on
recorded output of the real CLI without a process. `gen_agent.backends.claude` re-exports it;
the normalization table is in that module's docstring and in `docs/pages/backends/claude.md`.

Speed: `translate_raw`, which `translate_line` and `translate_lines` use, decodes each line once.
One typed decode, a union tagged by the line's `type` (and, inside a `stream_event`, by its frame's
and delta's `type`), builds small msgspec Structs holding only the fields the normalization reads
(msgspec skips the others without building them), much faster than generic dicts. The lines whose
event keeps every field (`result`, kept whole as `raw`; `system` other than `init`) are recognized
by that decode (skipping their fields) and decoded once more, generically; so is a line whose first
key is not `type` (some CLI versions write `result` so), at once. Every line that does not fit those
schemas, is not valid UTF-8 or comes after the terminal is decoded generically and goes through
`translate`. Both paths give the same events (tests/backends/test_claude.py proves it on mutated
real turns, tests/backends/test_stream_golden.py against the events and `Response` stored before the
fast path was written). Events are built as `Event(kind, data, monotonic_ns() // 1_000_000)`:
`Event.new` and `monotonic_ms` without their call layers.

Mirrors: the stream normalization of `GenAgentClaude` (docs/pages/contract.md#s7-6, first bullet).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from time import monotonic_ns
from typing import Any, Final

import msgspec
from msgspec import UNSET

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
    "PROVIDER", "SESSION_NOT_FOUND", "ClaudeStreamTranslator", "decode_line", "translate_lines",
]

PROVIDER: Final = "claude"
"""The `provider` of every `BackendError` and result this backend makes."""

SESSION_NOT_FOUND: Final = re.compile(r"No conversation found with session ID")
"""What the CLI says (in its `result` line's `errors` and on stderr) when the session it was
asked to `--resume` does not exist (2.1.197, per-turn and warm alike)."""


class ClaudeStreamTranslator(LineTranslator):
    """Turns decoded stream-json lines of one CLI turn into `Event`s. Pure: no I/O.

    Feed every line, in order, to `translate(line)`; it returns the events that line produces
    (possibly none); `translate_raw(raw)` does the same from the line's bytes, faster (what
    `translate_line` uses). After the first terminal event (`result` / `error`) every further
    line produces nothing. `take_session_id()` returns a session id not yet reported, once.
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
        # Per message id ("" for none), the streamed text not yet matched by its completed
        # message, as the parts the deltas gave (joined when a message completes: no copy of
        # the whole text per delta); `_stream_parts` is the current message's.
        self._streamed: dict[str, list[str]] = {}
        self._stream_parts: list[str] = self._streamed.setdefault("", [])
        self._block_starts = False
        # (message id, usage as the line has it: a dict, a `_Usage` or anything else) per
        # assistant line, resolved by `summed_usage` only when a result names no usage.
        self._message_usage: list[tuple[str, Any]] = []

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
        return Event(
            "error", {"reason": reason, "session_id": self.session_id}, monotonic_ns() // 1_000_000
        )

    def translate_raw(self, raw: bytes) -> list[Event]:
        """Decode and translate one raw stream-json line (the fast path of `translate_line`).

        Args:
            raw: the line's bytes (JSON text, no newline).

        Returns:
            The events of `translate(decode_line(raw))`, with the same state changes. One
            difference, on lines no JSON encoder of finite numbers writes: a number that
            msgspec cannot decode (a float beyond +-1.8e308, an integer of over 4300 digits)
            in a field the typed schemas skip is not looked at, so the line is translated
            where `decode_line` rejects it.

        Raises:
            msgspec.DecodeError: the line is not JSON (before any state changes).
        """
        # The typed decode does not check the UTF-8 of the strings it skips (the generic one
        # does): a line that is not valid UTF-8 takes the generic path, which rejects it.
        if self.finished or not (raw.isascii() or _is_utf8(raw)):
            return self.translate(_GENERIC_DECODER.decode(raw))
        if raw[:9] != b'{"type":"':  # (a slice compare: cheaper than `startswith`)
            # The CLI writes `type` first on every line but (in some versions) `result`: the
            # typed union would scan the line twice (for its tag, then its fields).
            return self._whole_line(raw)
        try:
            line = _decode_typed(raw)
        except msgspec.DecodeError:
            # Another type, another shape, or not JSON: the generic path decides.
            return self.translate(_GENERIC_DECODER.decode(raw))
        return _TYPED_HANDLERS[line.__class__](self, line, raw)

    def _whole_line(self, raw: bytes) -> list[Event]:
        # The generic path of a line not yet finished (`translate` of the generic decode),
        # straight to the handler for a `result` line (whose event keeps the whole line as
        # `raw`) and a `system` line other than `init` (whose event keeps every field).
        line = _GENERIC_DECODER.decode(raw)
        if line.__class__ is not dict:
            return self.translate(line)
        kind = line.get("type")
        if kind == "result" or (kind == "system" and line.get("subtype") != "init"):
            session_id = line.get("session_id")  # `_note`
            if isinstance(session_id, str) and session_id:
                self.session_id = session_id
            if kind == "result":
                self.finished = True  # a result line always ends the turn
                return self._result(line)
            subtype = line.get("subtype")
            del line["type"]  # `without_type`, in place: this dict is ours
            name = subtype if isinstance(subtype, str) and subtype else "system"
            return [Event(f"claude.{name}", line, monotonic_ns() // 1_000_000)]
        return self.translate(line)

    # -- per typed line (see translate_raw) ------------------------------------------------
    # Each mirrors the dict handler of its type: a typed field holds exactly what
    # `line.get(field)` gives (None when absent; UNSET where presence matters), and a nested
    # Struct only stands for a value the dict handler reads solely when it is a dict.

    def _typed_stream_event(self, line: _StreamEventLine, raw: bytes) -> list[Event]:
        session_id = line.session_id
        if session_id != self.session_id and isinstance(session_id, str) and session_id:
            self.session_id = session_id
        frame = line.event
        if frame is None or line.parent_tool_use_id is not None:
            return []
        if type(frame) is _BlockDelta:
            delta = frame.delta
            if type(delta) is _TextDelta:
                text = delta.text  # `_text_delta`, inlined: the most frequent line
                if not isinstance(text, str) or not text:
                    return []
                self._stream_parts.append(text)
                if self._block_starts:
                    self._block_starts = False
                    data = {"text": text, "message_boundary": True}
                    return [Event("text", data, monotonic_ns() // 1_000_000)]
                return [Event("text", {"text": text}, monotonic_ns() // 1_000_000)]
        elif type(frame) is _MessageStart:
            message = frame.message
            self._start_message(None if message is None else message.id)
        elif type(frame) is _BlockStart:
            block = frame.content_block
            self._block_starts = block is not None and block.type == "text"
        return []

    def _typed_assistant(self, line: _AssistantLine, raw: bytes) -> list[Event]:
        session_id = line.session_id
        if session_id != self.session_id and isinstance(session_id, str) and session_id:
            self.session_id = session_id
        message = line.message
        message_id = message.id
        if isinstance(message_id, str) and message_id:
            self._message_usage.append((message_id, message.usage))  # see `_note_usage`
        return self._message_events(
            message.model, message_id, message.content, line.parent_tool_use_id
        )

    def _typed_user(self, line: _UserLine, raw: bytes) -> list[Event]:
        session_id = line.session_id
        if session_id != self.session_id and isinstance(session_id, str) and session_id:
            self.session_id = session_id
        message = line.message
        content = None if message is None else message.content
        return self._tool_results(content, line.parent_tool_use_id)

    def _typed_result(self, line: _ResultLine, raw: bytes) -> list[Event]:
        return self._whole_line(raw)  # its event keeps the whole line as `raw`

    def _typed_system(self, line: _SystemLine, raw: bytes) -> list[Event]:
        if line.subtype != "init":
            return self._whole_line(raw)  # its event carries every field
        session_id = line.session_id
        if session_id != self.session_id and isinstance(session_id, str) and session_id:
            self.session_id = session_id
        if isinstance(line.model, str):
            self.model = line.model
        # `_session_data` of the typed line (the same keys, in the same order).
        data: dict[str, Any] = {}
        if session_id is not UNSET:
            data["session_id"] = session_id
        if line.model is not UNSET:
            data["model"] = line.model
        if line.cwd is not UNSET:
            data["cwd"] = line.cwd
        if line.tools is not UNSET:
            data["tools"] = line.tools
        if line.claude_code_version is not UNSET:
            data["claude_code_version"] = line.claude_code_version
        if line.permissionMode is not UNSET:
            data["permission_mode"] = line.permissionMode
        return [Event("session", data, monotonic_ns() // 1_000_000)]

    # -- per line type ----------------------------------------------------------------

    def _note(self, line: dict[str, Any]) -> None:
        session_id = line.get("session_id")
        if isinstance(session_id, str) and session_id:
            self.session_id = session_id

    def _system(self, line: dict[str, Any]) -> list[Event]:
        subtype = line.get("subtype")
        if subtype == "init":
            return self._system_init(line)
        name = subtype if isinstance(subtype, str) and subtype else "system"
        return [Event(f"claude.{name}", without_type(line), monotonic_ns() // 1_000_000)]

    def _system_init(self, line: dict[str, Any]) -> list[Event]:
        if isinstance(line.get("model"), str):
            self.model = line["model"]
        return [Event("session", _session_data(line), monotonic_ns() // 1_000_000)]

    def _assistant(self, line: dict[str, Any]) -> list[Event]:
        message = line.get("message")
        if not isinstance(message, dict):
            return [Event("claude.assistant", without_type(line), monotonic_ns() // 1_000_000)]
        self._note_usage(message.get("id"), message.get("usage"))
        return self._message_events(
            message.get("model"),
            message.get("id"),
            message.get("content"),
            line.get("parent_tool_use_id"),
        )

    def _note_usage(self, message_id: Any, usage: Any) -> None:
        # One API message is written as several lines (one per content block) that repeat
        # its usage, the output count growing: the latest line of each message id counts.
        # Kept as the line has it, read by `summed_usage` (only a result without usage
        # needs it).
        if isinstance(message_id, str) and message_id:
            self._message_usage.append((message_id, usage))

    def summed_usage(self) -> dict[str, int]:
        """The usage of the assistant messages seen so far: each provider message id
        counted once (its latest line naming token counts), summed over the messages
        (tokens)."""
        latest: dict[str, dict[str, Any]] = {}
        for message_id, usage in self._message_usage:
            counts = _typed_usage_data(usage) if usage.__class__ is _Usage else _usage_data(usage)
            if counts:
                latest[message_id] = counts
        total: dict[str, int] = {}
        for counts in latest.values():
            for key, value in counts.items():
                total[key] = total.get(key, 0) + value
        return total

    def _message_events(
        self, model: Any, message_id: Any, content: Any, subagent: Any
    ) -> list[Event]:
        """The events of an assistant message's fields (each None when absent)."""
        if model != self.model and isinstance(model, str) and model and model[0] != "<":
            self.model = model
        if not isinstance(message_id, str):
            message_id = None
        events: list[Event] = []
        texts: list[str] = []
        for block in content if content.__class__ is list else _blocks(content):
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text":
                text = block.get("text")
                if isinstance(text, str):
                    texts.append(text)
                continue
            if texts:
                self._flush_text(texts, message_id, subagent, events)
                texts = []
            events.extend(self._block_event(block, subagent))
        if texts:
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
            events.append(Event("claude.subagent_text", data, monotonic_ns() // 1_000_000))
            return
        parts = self._streamed.get(message_id or "")
        streamed = "".join(parts) if parts else ""
        if streamed.startswith(text):  # so `parts` holds `streamed` (`text` is not empty)
            parts[:] = (streamed[len(text) :],)  # type: ignore[index]
        elif streamed and text.startswith(streamed):
            parts.clear()  # type: ignore[union-attr]
            events.append(
                Event("text", {"text": text[len(streamed) :]}, monotonic_ns() // 1_000_000)
            )
        else:
            events.append(
                Event("text", {"text": text, "message_boundary": True}, monotonic_ns() // 1_000_000)
            )

    def _block_event(self, block: dict[str, Any], subagent: Any) -> list[Event]:
        block_type = block.get("type")
        if block_type == "tool_use":
            return self._tool_use(block, subagent)
        name = block_type if isinstance(block_type, str) and block_type else "content_block"
        return [Event(f"claude.{name}", dict(block), monotonic_ns() // 1_000_000)]

    def _tool_use(self, block: dict[str, Any], subagent: Any) -> list[Event]:
        tool_id = block.get("id")
        if isinstance(tool_id, str):
            if tool_id in self._tool_ids:
                return []
            self._tool_ids.add(tool_id)
        data = dict(block)
        if subagent is not None:
            data["parent_tool_use_id"] = subagent
        return [Event("tool_use", data, monotonic_ns() // 1_000_000)]

    def _tool_result(self, block: dict[str, Any], extra: dict[str, Any]) -> list[Event]:
        tool_id = block.get("tool_use_id")
        if isinstance(tool_id, str):
            if tool_id in self._result_ids:
                return []
            self._result_ids.add(tool_id)
        return [Event("tool_result", {**block, **extra}, monotonic_ns() // 1_000_000)]

    def _user(self, line: dict[str, Any]) -> list[Event]:
        message = line.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        return self._tool_results(content, line.get("parent_tool_use_id"))

    def _tool_results(self, content: Any, subagent: Any) -> list[Event]:
        """The events of a user message's content (None when absent)."""
        extra: dict[str, Any] = {}
        if subagent is not None:
            extra["parent_tool_use_id"] = subagent
        events: list[Event] = []
        for block in _blocks(content):
            if isinstance(block, dict) and block.get("type") == "tool_result":
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
            self._start_message(message.get("id") if isinstance(message, dict) else None)
        elif frame == "content_block_start":
            block = event.get("content_block")
            self._block_starts = isinstance(block, dict) and block.get("type") == "text"
        elif frame == "content_block_delta":
            delta = event.get("delta")
            if isinstance(delta, dict) and delta.get("type") == "text_delta":
                return self._text_delta(delta.get("text"))
        return []

    def _start_message(self, message_id: Any) -> None:
        key = message_id if isinstance(message_id, str) and message_id else ""
        self._stream_parts = self._streamed.setdefault(key, [])

    def _text_delta(self, text: Any) -> list[Event]:
        if not isinstance(text, str) or not text:
            return []
        self._stream_parts.append(text)
        data: dict[str, Any] = {"text": text}
        if self._block_starts:
            data["message_boundary"] = True
            self._block_starts = False
        return [Event("text", data, monotonic_ns() // 1_000_000)]

    def _content_block_delta(self, line: dict[str, Any]) -> list[Event]:
        return self._stream_frame(line)

    def _result(self, line: dict[str, Any]) -> list[Event]:
        get = line.get
        usage = _usage_data(get("usage")) or self.summed_usage()
        now_ms = monotonic_ns() // 1_000_000  # one stamp for the line's two events
        is_error, subtype = get("is_error"), get("subtype")
        if (
            is_error is True
            or (  # `_is_failure`
                isinstance(subtype, str) and (subtype == "error" or subtype[:6] == "error_")
            )
        ):
            reason = _result_error(line)
            if reason.kind == "session_not_found":
                self.session_id = None  # the id is dead: never reported, never kept
            error = Event("error", self._error_data(line, reason), now_ms)
            return [Event("usage", usage, now_ms), error] if usage else [error]
        model = self.model or _model_from_usage(line)
        data: dict[str, Any] = {
            "session_id": self.session_id,
            "model": model,
            "provider_model": model,
            "provider": PROVIDER,
        }
        text = get("result")
        if isinstance(text, str) and text:
            data["text"] = text
        # `_add_result_fields`, unrolled (the same keys, in `_RESULT_FIELDS` order).
        if (value := get("total_cost_usd")) is not None:
            data["cost_usd"] = value
        if (value := get("duration_ms")) is not None:
            data["duration_ms"] = value
        if (value := get("duration_api_ms")) is not None:
            data["duration_api_ms"] = value
        if (value := get("num_turns")) is not None:
            data["num_turns"] = value
        if is_error is not None:
            data["is_error"] = is_error
        if subtype is not None:
            data["subtype"] = subtype
        if (value := get("stop_reason")) is not None:
            data["stop_reason"] = value
        if (value := get("structured_output")) is not None:
            data["structured_output"] = value
            # The StructuredOutput tool call is the answer itself, not a pending tool call.
            data["finish_reason"] = "stop"
        data["raw"] = line
        result = Event("result", data, now_ms)
        return [Event("usage", usage, now_ms), result] if usage else [result]

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
        return [Event("error", self._error_data(line, reason), monotonic_ns() // 1_000_000)]

    def _error_data(self, line: dict[str, Any], reason: BackendError) -> dict[str, Any]:
        data: dict[str, Any] = {
            "reason": reason,
            "session_id": self.session_id,
            "model": self.model,
            "provider": PROVIDER,
        }
        _add_result_fields(data, line)
        return data


def _add_result_fields(data: dict[str, Any], line: dict[str, Any]) -> None:
    for source, target in _RESULT_FIELDS:
        value = line.get(source)
        if value is not None:
            data[target] = value


_SESSION_FIELDS: Final = ("session_id", "model", "cwd", "tools", "claude_code_version")
"""The `system`/`init` fields the `session` event keeps as they are (`permissionMode` too,
as `permission_mode`)."""

_RESULT_FIELDS: Final = (
    ("total_cost_usd", "cost_usd"),
    ("duration_ms", "duration_ms"),
    ("duration_api_ms", "duration_api_ms"),
    ("num_turns", "num_turns"),
    ("is_error", "is_error"),
    ("subtype", "subtype"),
    ("stop_reason", "stop_reason"),
    ("structured_output", "structured_output"),  # with --json-schema (gen_agent._output)
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


# -- the typed schemas of translate_raw ----------------------------------------------------
# Unknown fields are skipped without being built. `gc=False`: decoded JSON holds no cycles.


class _Ided(msgspec.Struct, frozen=True, gc=False):
    id: Any = None


class _Typed(msgspec.Struct, frozen=True, gc=False):
    type: Any = None


# A `stream_event`'s frame (a Messages API stream event) and a `content_block_delta`'s delta
# are tagged by their `type`: msgspec picks the class (the handler tests it) and skips every
# field of the frames and deltas the translation ignores. A frame or delta of another type,
# or without one, takes the generic path (whose dict handler ignores it too).


class _MessageStart(msgspec.Struct, tag="message_start", tag_field="type", frozen=True, gc=False):
    message: _Ided | None = None


class _BlockStart(
    msgspec.Struct, tag="content_block_start", tag_field="type", frozen=True, gc=False
):
    content_block: _Typed | None = None


class _TextDelta(msgspec.Struct, tag="text_delta", tag_field="type", frozen=True, gc=False):
    text: Any = None


class _Ignored(msgspec.Struct, tag_field="type", frozen=True, gc=False):
    """Base of the frames and deltas the translation ignores: no fields, only a tag."""


class _JsonDelta(_Ignored, tag="input_json_delta", frozen=True, gc=False):
    pass


class _ThinkingDelta(_Ignored, tag="thinking_delta", frozen=True, gc=False):
    pass


class _SignatureDelta(_Ignored, tag="signature_delta", frozen=True, gc=False):
    pass


class _CitationsDelta(_Ignored, tag="citations_delta", frozen=True, gc=False):
    pass


_Delta = _TextDelta | _JsonDelta | _ThinkingDelta | _SignatureDelta | _CitationsDelta


class _BlockDelta(
    msgspec.Struct, tag="content_block_delta", tag_field="type", frozen=True, gc=False
):
    delta: _Delta | None = None


class _BlockStop(_Ignored, tag="content_block_stop", frozen=True, gc=False):
    pass


class _MessageDelta(_Ignored, tag="message_delta", frozen=True, gc=False):
    pass


class _MessageStop(_Ignored, tag="message_stop", frozen=True, gc=False):
    pass


class _Ping(_Ignored, tag="ping", frozen=True, gc=False):
    pass


class _FrameError(_Ignored, tag="error", frozen=True, gc=False):
    pass


_Frame = (
    _MessageStart
    | _BlockStart
    | _BlockDelta
    | _BlockStop
    | _MessageDelta
    | _MessageStop
    | _Ping
    | _FrameError
)


class _Usage(msgspec.Struct, frozen=True, gc=False):
    # The fields of `_USAGE_KEYS`, in its order (`_typed_usage_data` relies on it).
    input_tokens: Any = None
    output_tokens: Any = None
    cache_creation_input_tokens: Any = None
    cache_read_input_tokens: Any = None


class _Message(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    id: Any = None
    model: Any = None
    content: Any = None
    usage: _Usage | None = None  # anything but an object or null: the generic path


class _Content(msgspec.Struct, frozen=True, gc=False):
    content: Any = None


class _StreamEventLine(
    msgspec.Struct, tag="stream_event", tag_field="type", frozen=True, kw_only=True, gc=False
):
    event: _Frame | None = None
    session_id: Any = None
    parent_tool_use_id: Any = None


class _AssistantLine(
    msgspec.Struct, tag="assistant", tag_field="type", frozen=True, kw_only=True, gc=False
):
    message: _Message  # anything but an object takes the generic path (claude.assistant)
    parent_tool_use_id: Any = None
    session_id: Any = None


class _UserLine(msgspec.Struct, tag="user", tag_field="type", frozen=True, kw_only=True, gc=False):
    message: _Content | None = None
    parent_tool_use_id: Any = None
    session_id: Any = None


class _ResultLine(msgspec.Struct, tag="result", tag_field="type", frozen=True, gc=False):
    """A `result` line, every field skipped: it is decoded generically (`_whole_line`)."""


class _SystemLine(
    msgspec.Struct, tag="system", tag_field="type", frozen=True, kw_only=True, gc=False
):
    subtype: Any = None
    # UNSET when absent: the session event names only the fields the line has.
    cwd: Any = UNSET
    session_id: Any = UNSET
    tools: Any = UNSET
    model: Any = UNSET
    permissionMode: Any = UNSET  # the CLI's spelling
    claude_code_version: Any = UNSET


_GENERIC_DECODER: Final = msgspec.json.Decoder()  # decode_line's, without the extra call
_LINE_DECODER: Final = msgspec.json.Decoder(
    _StreamEventLine | _AssistantLine | _UserLine | _SystemLine | _ResultLine
)
_decode_typed: Final = _LINE_DECODER.decode
_TypedHandler = Callable[[ClaudeStreamTranslator, Any, bytes], list[Event]]
_TYPED_HANDLERS: Final[dict[type, _TypedHandler]] = {
    _StreamEventLine: ClaudeStreamTranslator._typed_stream_event,
    _AssistantLine: ClaudeStreamTranslator._typed_assistant,
    _UserLine: ClaudeStreamTranslator._typed_user,
    _SystemLine: ClaudeStreamTranslator._typed_system,
    _ResultLine: ClaudeStreamTranslator._typed_result,
}


def _is_utf8(raw: bytes) -> bool:
    if not isinstance(raw, bytes | bytearray):
        return False  # any other buffer takes the generic path
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _blocks(content: Any) -> Sequence[Any]:
    """The blocks of a message's `content` (a string is one text block); the caller skips
    the ones that are not objects."""
    if isinstance(content, list):
        return content
    if isinstance(content, str):
        return ({"type": "text", "text": content},)
    return ()


def _session_data(line: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for key in _SESSION_FIELDS:
        if key in line:
            data[key] = line[key]
    if "permissionMode" in line:
        data["permission_mode"] = line["permissionMode"]
    return data


def _usage_data(usage: Any) -> dict[str, Any]:
    if not isinstance(usage, dict):
        return {}
    get = usage.get  # the loop over `_USAGE_KEYS`, unrolled (once per result line)
    data: dict[str, Any] = {}
    if isinstance(value := get("input_tokens"), int):
        data["input_tokens"] = value
    if isinstance(value := get("output_tokens"), int):
        data["output_tokens"] = value
    if isinstance(value := get("cache_creation_input_tokens"), int):
        data["cache_creation_input_tokens"] = value
    if isinstance(value := get("cache_read_input_tokens"), int):
        data["cache_read_input_tokens"] = value
    return data


_USAGE_KEYS: Final = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)


def _typed_usage_data(usage: _Usage) -> dict[str, Any]:
    """`_usage_data` of the typed usage (the same dict, in the same order)."""
    data: dict[str, Any] = {}
    for key, value in zip(_USAGE_KEYS, msgspec.structs.astuple(usage), strict=True):
        if isinstance(value, int):
            data[key] = value
    return data


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
    """The `BackendError` of a failed result line (the one mapping for result failures): kind
    `"session_not_found"` when it says the resumed session does not exist, the HTTP kind of
    `api_error_status`, else the `error*` subtype (or `"error_result"`)."""
    message = _result_message(line)
    if SESSION_NOT_FOUND.search(message):
        session_id = line.get("session_id")
        raw = {"line": line, "session_id": session_id}
        return BackendError.new(PROVIDER, "session_not_found", raw,
                                message=f"claude has no session {session_id!r} to resume")
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
