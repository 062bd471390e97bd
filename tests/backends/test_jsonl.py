"""The pure line helpers the CLI translators share (gen_agent/backends/_subprocess/jsonl.py):
escaped lone surrogates read as U+FFFD (recorded as an event), and the bounded tail of plain
stdout."""

from __future__ import annotations

import msgspec
import pytest

from gen_agent.backends._subprocess.jsonl import (
    OutputTail,
    decode_json,
    feed_lines,
    repair_surrogates,
    translate_line,
)
from gen_agent.backends.claude import ClaudeStreamTranslator
from gen_agent.backends.codex import CodexStreamTranslator


@pytest.mark.parametrize(("raw", "repaired", "count"), [
    (rb'"a\ud800b"', rb'"a\ufffdb"', 1),
    (rb'"\udc00\ud800"', rb'"\ufffd\ufffd"', 2),
    (rb'"\uD83D\uDE00"', rb'"\uD83D\uDE00"', 0),  # a pair is one character: kept
    (rb'"\ud800\ud83d\ude00"', rb'"\ufffd\ud83d\ude00"', 1),
    (rb'"\\ud800"', rb'"\\ud800"', 0),  # an escaped backslash, then text
    (rb'"\\\ud800"', rb'"\\\ufffd"', 1),  # an escaped backslash, then an escape
    (rb'{"n": 1}', rb'{"n": 1}', 0),
])
def test_repair_surrogates(raw: bytes, repaired: bytes, count: int) -> None:
    assert repair_surrogates(raw) == (repaired, count)
    msgspec.json.decode(repaired)  # what msgspec could not read, it now can


def test_decode_json_reads_lone_surrogates_as_replacement_characters() -> None:
    with pytest.raises(msgspec.DecodeError):
        msgspec.json.decode(rb'{"t": "x\ud800"}')
    assert decode_json(rb'{"t": "x\ud800"}') == {"t": "x\ufffd"}
    with pytest.raises(msgspec.DecodeError):
        decode_json(b"not json \\ud800")


@pytest.mark.parametrize("translator", [ClaudeStreamTranslator, CodexStreamTranslator])
def test_a_line_with_escaped_lone_surrogates_is_translated_not_lost(translator: type) -> None:
    if translator is ClaudeStreamTranslator:
        raw = (rb'{"type":"result","subtype":"success","is_error":false,'
               rb'"result":"half \ud800 pair","session_id":"s"}')
        terminal = "result"
    else:
        raw = rb'{"type":"turn.failed","error":{"message":"bad \udfff"}}'
        terminal = "error"
    events = translate_line(translator(), raw)
    assert events[0].kind.endswith(".surrogates_replaced")
    assert events[0].data == {"count": 1, "size_bytes": len(raw)}
    assert events[-1].kind == terminal
    recorded = feed_lines(translator(), [raw])
    assert [e.kind for e in recorded] == [e.kind for e in events]


def test_output_tail_keeps_the_most_recent_lines_within_the_bound() -> None:
    tail = OutputTail(12)
    assert tail.value() is None
    for line in (b"first line", b"second", b"third"):
        tail.add(line)
    assert tail.value() == "second\nthird"
    tail.add(b"x" * 40)
    assert tail.value() == "x" * 12
    invalid = OutputTail(10)
    invalid.add(b"\xff\xfe ok")
    assert invalid.value() == "\ufffd\ufffd ok"
    nothing = OutputTail(0)
    nothing.add(b"dropped")
    assert nothing.value() is None
