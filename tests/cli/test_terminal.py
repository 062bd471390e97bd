"""`gen_agent.cli._terminal`: escape sequences and controls removed from text for a terminal."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gen_agent.cli._terminal import MAX_HELD_CHARS, TerminalText, strip_controls

OSC52 = "\x1b]52;c;cm0gLXJmIH4=\x07"  # writes "rm -rf ~" to the clipboard
TITLE = "\x1b]0;pwned\x1b\\"  # retitles the window (ended by ST)
FORBIDDEN = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@pytest.mark.parametrize(("raw", "shown"), [
    (f"copy {OSC52}done", "copy done"),
    (f"{TITLE}title", "title"),
    ("\x9d0;c1 title\x9cok", "ok"),  # OSC and ST as C1 controls
    ("\x1b[2J\x1b[1;1Hclear \x1b[31mred\x1b[0m", "clear red"),
    ("\x9b2Jcsi", "csi"),
    ("\x1bPq#0;2;0;0;0#1!7~\x1b\\sixel", "sixel"),  # DCS
    ("\x1b_apc\x1b\\\x1bXsos\x1b\\\x1b^pm\x1b\\end", "end"),
    ("\x1b7save\x1b8\x1bcreset", "savereset"),
    ("bell\x07 back\x08space\r\nline\ttab\x00\x7f\x85", "bell backspace\nline\ttab"),
    ("plain text, ünïcode ✓", "plain text, ünïcode ✓"),
    ("unterminated \x1b]52;c;abc", "unterminated 52;c;abc"),
])
def test_sequences_and_controls_are_removed(raw: str, shown: str):
    assert strip_controls(raw) == shown


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(
    ["a", " ", "\n", "\t", "\x1b", "[", "]", "P", "\\", "0", ";", "m", "\x07", "\x9b", "\x9c",
     "\x9d", "\x90", "\r", "é"]), max_size=60))
def test_nothing_a_terminal_acts_on_is_left(text: str):
    shown = strip_controls(text)
    assert FORBIDDEN.search(shown) is None
    assert strip_controls(shown) == shown


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(st.sampled_from(
    ["hi ", OSC52, TITLE, "\x1b[31m", "\x1b", "]52;", "\x07", "\x1b\\", "\x9b1m", "x\n", "é"]),
    max_size=12), cuts=st.lists(st.integers(min_value=0, max_value=300), max_size=8))
def test_a_stream_cut_anywhere_shows_what_the_whole_text_shows(pieces: list[str],
                                                                cuts: list[int]):
    text = "".join(pieces)
    points = sorted({0, len(text), *(c for c in cuts if c < len(text))})
    stream = TerminalText()
    shown = "".join(stream.feed(text[a:b]) for a, b in itertools.pairwise(points))
    assert shown + stream.flush() == strip_controls(text)


def test_a_sequence_split_between_deltas_is_removed_whole():
    stream = TerminalText()
    assert stream.feed("copy \x1b]52;c;") == "copy "
    assert stream.feed("cm0gLXJmIH4=") == ""
    assert stream.feed("\x1b") == ""
    assert stream.feed("\\ done") == " done"
    assert stream.flush() == ""


def test_an_endless_sequence_is_held_only_up_to_the_bound():
    stream = TerminalText()
    assert stream.feed("\x1b]0;") == ""
    shown = stream.feed("x" * MAX_HELD_CHARS)
    assert shown == "0;" + "x" * MAX_HELD_CHARS  # given up on: shown as text, no ESC
    assert stream.flush() == ""
