"""The pure half shared by the CLI stream translators (Claude Code stream-json, Codex JSONL).

Both CLIs write one JSON value per stdout line. `LineTranslator` is the common shape of their
translators: one decoded line in, `Event`s out, dispatched on the line's `type` to the
subclass's handlers; a line of another type becomes `<prefix>.<type>` with the line's fields,
a value that is not an object `<prefix>.unknown`, a line that is not JSON `<prefix>.unparsed`.
After the first terminal event every further line produces nothing.

`translate_line` decodes and translates one raw line (the live backend and recorded turns use
it alike); `feed_lines` translates a recorded turn. No I/O anywhere.

Escaped lone surrogates (`"\\ud800"`: valid JSON, which the CLIs' JavaScript writes for a
string holding half of a UTF-16 pair) are not text msgspec can decode into a `str`: such a line
is decoded once more with each lone surrogate replaced by U+FFFD (`repair_surrogates`), and its
events follow a `<prefix>.surrogates_replaced` {count, size_bytes} event, so nothing of the
line is lost and the replacement is on the turn's record. `decode_json` does the same for the
lines a process layer routes itself.

A translator may override `translate_raw` to decode the lines it knows into typed structs
(faster than generic dicts) as long as the events are exactly those of `translate` on the
generically decoded line; the generic decoder alone decides whether a line is JSON.
"""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Final

import msgspec

from gen_agent._event import TERMINAL_KINDS, Event
from gen_agent.backend import BackendError

__all__ = [
    "LineTranslator",
    "OutputTail",
    "decode_json",
    "decode_line",
    "feed_lines",
    "no_result_error",
    "repair_surrogates",
    "translate_line",
    "without_type",
]

_UNPARSED_PREFIX_BYTES: Final = 1024
_json_decoder = msgspec.json.Decoder()


def decode_line(raw: bytes) -> Any:
    """Decode one stdout line with msgspec; raises `msgspec.DecodeError` if it is not JSON."""
    return _json_decoder.decode(raw)


# An escaped backslash (consumed as a unit, so what follows it is not read as an escape), or
# a \\u escape of a high surrogate (with the low one that completes it, if any), or of a low one.
_SURROGATE_ESCAPE: Final = re.compile(
    rb"\\\\|\\u([dD][89abAB][0-9a-fA-F]{2})(\\u[dD][c-fC-F][0-9a-fA-F]{2})?"
    rb"|\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_LONE_ESCAPE_HINT: Final = re.compile(rb"\\u[dD][89a-fA-F]")


def repair_surrogates(raw: bytes) -> tuple[bytes, int]:
    """`raw` (JSON text) with every escaped lone surrogate replaced by an escaped U+FFFD.

    A `\\uD800`-`\\uDBFF` escape followed by a `\\uDC00`-`\\uDFFF` one is a pair (one
    character) and kept; any other surrogate escape is replaced. Escaped backslashes are
    respected (`\\\\ud800` is text, not an escape). Pure.

    Returns:
        `(text, count)`: the repaired JSON text and how many escapes were replaced (0: `raw`
        itself).
    """
    if _LONE_ESCAPE_HINT.search(raw) is None:
        return raw, 0
    count = 0

    def replace(match: re.Match[bytes]) -> bytes:
        nonlocal count
        text = match.group(0)
        if text == b"\\\\" or match.group(2) is not None:
            return text
        count += 1
        return b"\\ufffd"

    repaired = _SURROGATE_ESCAPE.sub(replace, raw)
    return repaired, count


def decode_json(raw: bytes) -> Any:
    """Decode one JSON line generically, escaped lone surrogates read as U+FFFD.

    Raises:
        msgspec.DecodeError: the line is not JSON, even repaired.
    """
    try:
        return _json_decoder.decode(raw)
    except msgspec.DecodeError:
        repaired, count = repair_surrogates(raw)
        if not count:
            raise
        return _json_decoder.decode(repaired)


class OutputTail:
    """The most recent lines of a stream, as text: at most `limit_bytes` bytes (UTF-8 of the
    lines, the newlines between them included), for `Diagnostics.stdout_tail`. Thread-safe
    (a reader thread adds, a turn reads)."""

    __slots__ = ("_limit", "_lines", "_lock", "_size")

    def __init__(self, limit_bytes: int) -> None:
        self._limit = limit_bytes
        self._lines: deque[bytes] = deque()
        self._size = 0
        self._lock = threading.Lock()

    def add(self, raw: bytes) -> None:
        """Keep `raw` (one line, without its newline), dropping the oldest past the bound."""
        if self._limit <= 0:
            return
        line = raw[-self._limit :]
        with self._lock:
            self._lines.append(line)
            self._size += len(line) + 1
            while self._size - 1 > self._limit and len(self._lines) > 1:
                self._size -= len(self._lines.popleft()) + 1

    def value(self) -> str | None:
        """The kept lines joined with newlines (invalid UTF-8 replaced), or None if none."""
        with self._lock:
            if not self._lines:
                return None
            data = b"\n".join(self._lines)
        return data[-self._limit :].decode("utf-8", errors="replace")


def without_type(line: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of `line` except `type` (a new dict, in the line's order)."""
    fields = dict(line)
    fields.pop("type", None)
    return fields


class LineTranslator:
    """Base of a CLI's stream translator: decoded JSON lines of one turn in, `Event`s out.

    Subclasses set `_PREFIX` (the provider, which prefixes the kinds of events of their own)
    and `_HANDLERS` (line `type` → method returning that line's events), and implement
    `_error_event`, `end_of_stream` and `_current_session_id`; `_note` sees every object line
    before it is dispatched.

    Not thread-safe: one turn, one owner.
    """

    _PREFIX: ClassVar[str]
    _HANDLERS: ClassVar[Mapping[str, Callable[[Any, dict[str, Any]], list[Event]]]]

    def __init__(self) -> None:
        self.finished = False
        self._reported_session_id: str | None = None

    def translate(self, line: Any) -> list[Event]:
        """Translate one decoded line (normally a `dict`) into events.

        Args:
            line: the decoded JSON value of one stdout line.

        Returns:
            The events, in order; empty for lines that produce none. Never raises for
            unexpected shapes: unknown types become `<prefix>.<type>` events.
        """
        if self.finished:
            return []
        if not isinstance(line, dict):
            return [Event.new(f"{self._PREFIX}.unknown", {"value": line})]
        self._note(line)
        kind = line.get("type")
        handler = self._HANDLERS.get(kind) if isinstance(kind, str) else None
        if handler is None:
            name = kind if isinstance(kind, str) and kind else "unknown"
            return [Event.new(f"{self._PREFIX}.{name}", without_type(line))]
        events = handler(self, line)
        for event in events:
            if event.kind in TERMINAL_KINDS:
                self.finished = True
                break
        return events

    def translate_raw(self, raw: bytes) -> list[Event]:
        """Decode and translate one raw line: `translate(decode_line(raw))` unless overridden.

        Args:
            raw: the line's bytes (JSON text, no newline).

        Returns:
            The line's events, exactly as `translate` gives them for the decoded value.

        Raises:
            msgspec.DecodeError: the line is not JSON (before any state changes).
        """
        return self.translate(_json_decoder.decode(raw))

    def unparsed(self, raw: bytes) -> Event:
        """The event for a stdout line that is not JSON (non-terminal).

        Args:
            raw: the line's bytes.

        Returns:
            `<prefix>.unparsed` with `size_bytes` and the first 1 KiB as text (`line`).
        """
        prefix = raw[:_UNPARSED_PREFIX_BYTES].decode("utf-8", errors="replace")
        return Event.new(f"{self._PREFIX}.unparsed", {"size_bytes": len(raw), "line": prefix})

    def take_session_id(self) -> str | None:
        """A session id seen since the last call (the first one, or a changed one), or None."""
        session_id = self._current_session_id()
        if session_id is None or session_id == self._reported_session_id:
            return None
        self._reported_session_id = session_id
        return session_id

    def error(self, reason: BackendError) -> Event:
        """The terminal `error` event for a failure outside the lines (the process layer's:
        a line too long, a cancel); ends the turn."""
        self.finished = True
        return self._error_event(reason)

    def end_of_stream(self, exit_code: int | None = None, stderr_tail: str = "") -> Event | None:
        """The terminal event for stdout ending before an outcome line (None if done)."""
        raise NotImplementedError

    def _note(self, line: dict[str, Any]) -> None:
        """Called with every object line before it is dispatched; nothing by default."""

    def _current_session_id(self) -> str | None:
        raise NotImplementedError

    def _error_event(self, reason: BackendError) -> Event:
        raise NotImplementedError


def no_result_error(
    provider: str, exit_code: int | None, stderr_tail: str, *, awaited: str, raw: Any
) -> BackendError:
    """The `"no_result"` reason of a CLI that exited before its outcome line.

    Args:
        provider: the provider (also the program's name in the message).
        exit_code: the CLI's exit status, if known.
        stderr_tail: the end of the CLI's stderr (text); named in the message when not blank.
        awaited: the line that never came, for the message (`"its result line"`).
        raw: the reason's `raw`.

    Returns:
        A `BackendError` of kind `"no_result"`, not retryable.
    """
    message = f"{provider} exited with status {exit_code} before {awaited}"
    if stderr_tail.strip():
        message += f"; stderr tail: {stderr_tail.strip()}"
    return BackendError.new(provider, "no_result", raw, message=message)


def translate_line(
    translator: LineTranslator,
    raw: bytes,
    *,
    on_unparsed: Callable[[bytes], None] | None = None,
) -> list[Event]:
    """Decode and translate one raw stdout line.

    Args:
        translator: the turn's translator.
        raw: the line without its newline.
        on_unparsed: called with a line that is not JSON (the live backend logs its size).

    Returns:
        The line's events: none for a blank line, `<prefix>.unparsed` for a line that is not
        JSON.
    """
    try:
        return translator.translate_raw(raw)
    except msgspec.DecodeError:
        return _undecodable(translator, raw, on_unparsed)


def _undecodable(
    translator: LineTranslator, raw: bytes, on_unparsed: Callable[[bytes], None] | None
) -> list[Event]:
    # A blank line is not JSON either: checked only here, off the path of every line.
    if not raw.strip():
        return []
    repaired, count = repair_surrogates(raw)
    if count:
        try:
            events = translator.translate(_json_decoder.decode(repaired))
        except msgspec.DecodeError:
            pass  # not JSON for another reason as well
        else:
            data = {"count": count, "size_bytes": len(raw)}
            return [Event.new(f"{translator._PREFIX}.surrogates_replaced", data), *events]
    if on_unparsed is not None:
        on_unparsed(raw)
    return [translator.unparsed(raw)]


def feed_lines(translator: LineTranslator, lines: Iterable[bytes | str | Any]) -> list[Event]:
    """Translate a recorded turn up to and including its first terminal event.

    Args:
        translator: a fresh translator.
        lines: the lines in order: `bytes`/`str` JSON text (blank lines skipped) or decoded
            values.

    Returns:
        The events (without an end-of-stream event: the caller decides).
    """
    events: list[Event] = []
    extend = events.extend
    translate_raw = translator.translate_raw
    for line in lines:
        if line.__class__ is not bytes:  # checked once for the common case, bytes
            if isinstance(line, str):
                line = line.encode()
            elif not isinstance(line, bytes):
                extend(translator.translate(line))
                if translator.finished:
                    break
                continue
        try:  # translate_line, inlined: this loop runs once per line of a recorded turn
            new = translate_raw(line)
        except msgspec.DecodeError:
            new = _undecodable(translator, line, None)
        if new:  # a turn ends with a terminal event only
            extend(new)
            if translator.finished:
                break
    return events
