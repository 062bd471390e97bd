"""Model text made safe for a terminal: escape sequences and control characters removed.

A model's reply (or a tool's result, or a provider's error message) may hold terminal escape
sequences, by accident or by prompt injection: an OSC 52 sequence writes the operator's
clipboard, an OSC 0 one retitles the window, a CSI one moves the cursor or clears the screen.
The text output of `gen-agent` passes every such string through `strip_controls` (whole
strings) or a `TerminalText` (text that streams in as deltas, where a sequence may be split
between two of them). `--json` keeps the text as it came.

Removed (ECMA-48): CSI sequences (`ESC [` or C1 `0x9b`, parameters, intermediates, a final
byte); string sequences, OSC (`ESC ]` / `0x9d`), DCS (`ESC P` / `0x90`), SOS, PM and APC,
each up to its BEL (`0x07`) or ST (`ESC \\` / `0x9c`); the other two-character escapes
(`ESC 7`, `ESC c`, ...); and every C0 control but tab and newline, DEL and every C1 control.
What is left has no character in U+0000-U+001F but tab and newline, and none in U+007F-U+009F.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["MAX_HELD_CHARS", "TerminalText", "strip_controls"]

_INTRO_STRING = r"(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])"  # OSC, DCS, SOS, PM, APC
_INTRO_CSI = r"(?:\x1b\[|\x9b)"
_SEQUENCE: Final = re.compile(
    rf"{_INTRO_CSI}[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]"
    rf"|{_INTRO_STRING}[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)"
    r"|\x1b[\x20-\x2f]*[\x30-\x7e]"
)
# What is left at the end of a delta that may still become one of the sequences above.
_UNFINISHED: Final = re.compile(
    rf"(?:{_INTRO_CSI}[\x30-\x3f]*[\x20-\x2f]*|{_INTRO_STRING}[^\x07\x1b\x9c]*\x1b?"
    r"|\x1b[\x20-\x2f]*)\Z"
)
_CONTROLS: Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")

MAX_HELD_CHARS: Final = 4096
"""The longest unfinished sequence `TerminalText` holds back waiting for its end
(characters); a longer one is treated as unterminated: its introducer is removed and the rest
shown as text, its controls removed."""


def strip_controls(text: str) -> str:
    """`text` without terminal escape sequences and control characters (tab and newline kept).

    An unterminated sequence at the end loses its introducer; the rest is kept as text. See the
    module docstring for what is removed.
    """
    if text.isprintable():  # the common case: nothing to remove (tab and newline aren't)
        return text
    return _CONTROLS.sub("", _SEQUENCE.sub("", text))


class TerminalText:
    """`strip_controls` for text that arrives in pieces (a turn's text deltas).

    `feed(delta)` returns what can be shown now; a sequence begun at the end of a delta is
    held back (up to `MAX_HELD_CHARS`) until the delta that completes it, so a sequence split
    between deltas is removed whole. `flush()` returns what is still held, as
    `strip_controls` would. Not thread-safe: one turn, one printer.
    """

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held = ""

    def feed(self, delta: str) -> str:
        """The part of `self._held + delta` that is complete, made safe for a terminal."""
        text = self._held + delta
        unfinished = _UNFINISHED.search(text)
        if unfinished is None or len(text) - unfinished.start() > MAX_HELD_CHARS:
            self._held = ""
            return strip_controls(text)
        self._held = text[unfinished.start():]
        return strip_controls(text[:unfinished.start()])

    def flush(self) -> str:
        """What is still held (an unterminated sequence), made safe; then nothing is held."""
        held, self._held = self._held, ""
        return strip_controls(held)
