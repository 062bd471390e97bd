"""Server-sent events, decoded exactly: the byte stream of an HTTP response in, frames out.

The two SDK backends read their streamed replies through this decoder instead of the SDKs'
own, so every fault of the wire has one defined outcome (`_sdk.stream_turn` maps them):

- lines end with CRLF, LF or CR, also when a CR and its LF arrive in different reads;
- a line is decoded as UTF-8 only once it is complete, so a character split between two
  reads is never cut; a complete line that is not UTF-8 is a `SSEProtocolError`;
- a frame is dispatched at its blank line and only if it carried `data:` lines: frames of only
  `id:`, `retry:`, `event:` or comments are skipped, never parsed (WHATWG "dispatch the
  event": an empty data buffer dispatches nothing);
- a frame the stream ended inside (no blank line yet) is dropped, as the spec says; the caller
  sees the stream end without its outcome;
- a line or frame longer than `max_frame_bytes` is a `SSEProtocolError` (memory stays bounded).

Pure: no I/O. Mirrors: the WHATWG HTML standard, "Server-sent events", §9.2.6 "Interpreting
an event stream".
"""

from __future__ import annotations

import re
from typing import Final, NamedTuple

__all__ = ["DEFAULT_MAX_FRAME_BYTES", "SSEDecoder", "SSEFrame", "SSEProtocolError"]

DEFAULT_MAX_FRAME_BYTES: Final = 16 * 1024 * 1024
"""Default bound on one line and on the data of one frame (bytes)."""

_LINE_END: Final = re.compile(rb"\r\n|\r|\n")


class SSEFrame(NamedTuple):
    """One dispatched event: its `event` type (`"message"` when the frame named none) and
    its data (the `data:` lines joined with `"\\n"`)."""

    event: str
    data: str


class SSEProtocolError(ValueError):
    """The byte stream is not a valid event stream (a line that is not UTF-8, a line or
    frame over the bound). The message says which; it never quotes the stream."""


class SSEDecoder:
    """Feeds the chunks of one response body, returns the complete frames. Pure.

    Args:
        max_frame_bytes: the bound on one line and on one frame's data (bytes).

    Not thread-safe: one reader owns it.
    """

    __slots__ = ("_data", "_data_bytes", "_event", "_limit", "_pending", "_pending_bytes",
                 "_skip_lf")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._limit = max_frame_bytes
        # The pieces of the line not yet ended, joined once when its end arrives: each byte
        # is scanned and copied a bounded number of times (linear in the event's size).
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._skip_lf = False
        self._event = ""
        self._data: list[str] = []
        self._data_bytes = 0

    def feed(self, chunk: bytes) -> list[SSEFrame]:
        """Add the next chunk of the body; return the frames it completed, in order.

        Time and memory are linear in the bytes fed, however the events are split into
        chunks (only the new chunk is scanned for line ends).

        Raises:
            SSEProtocolError: a complete line is not UTF-8, or a line or frame exceeds
                `max_frame_bytes`.
        """
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        frames: list[SSEFrame] = []
        start = 0
        for match in _LINE_END.finditer(chunk):
            line = chunk[start : match.start()]
            if self._pending:
                self._pending.append(line)
                line = b"".join(self._pending)
                self._pending, self._pending_bytes = [], 0
            self._line(line, frames)
            start = match.end()
        if start and chunk[start - 1 : start] == b"\r":
            self._skip_lf = True  # a CR ended the chunk: an LF at the next read is its pair
        if start < len(chunk):
            self._pending.append(chunk[start:])
            self._pending_bytes += len(chunk) - start
            if self._pending_bytes > self._limit:
                raise SSEProtocolError(f"an event-stream line exceeds {self._limit} bytes")
        return frames

    def finish(self) -> None:
        """The body ended: drop an unterminated line and a frame without its blank line."""
        self._pending, self._pending_bytes = [], 0
        self._event, self._data, self._data_bytes = "", [], 0

    def _line(self, raw: bytes, frames: list[SSEFrame]) -> None:
        if not raw:
            if self._data:
                frames.append(SSEFrame(self._event or "message", "\n".join(self._data)))
            self._event, self._data, self._data_bytes = "", [], 0
            return
        if raw[:1] == b":":
            return  # a comment (keep-alive)
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise SSEProtocolError("an event-stream line is not valid UTF-8") from None
        name, colon, value = line.partition(":")
        if colon and value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._data_bytes += len(raw)
            if self._data_bytes > self._limit:
                raise SSEProtocolError(f"an event-stream frame exceeds {self._limit} bytes")
            self._data.append(value)
        elif name == "event":
            self._event = value
        # `id`, `retry` and unknown fields change nothing here: no reconnection is made.
