"""Golden test of the CLI stream decoders: every recorded real-CLI turn in tests/fixtures
(Claude stream-json, Codex `exec --json`) decodes to exactly the events and the `Response`
stored in tests/fixtures/golden/, field by field: every event's data (key order, `bool` vs
`int`, `float` vs `int`, every `BackendError` field), the session ids checkpointed line by
line, the end of stream, and the whole `Response` built from the events (`raw`, `extra`,
`messages`, usage, coverage), timestamps aside.

The stored files were written by the decoders before their speed work (issue 20): a faster
decoder must not drop or change anything the events and the Response kept. Regenerate them
only for an intended change of the normalization, and say so in the changelog:

    GEN_AGENT_WRITE_GOLDEN=1 .venv/bin/python -m pytest -q tests/backends/test_stream_golden.py
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gen_agent._response import Response
from gen_agent.backend import BackendError
from gen_agent.backends._subprocess.jsonl import LineTranslator, feed_lines, translate_line
from gen_agent.backends.claude import ClaudeStreamTranslator
from gen_agent.backends.codex import CodexStreamTranslator

ROOT = Path(__file__).resolve().parents[1] / "fixtures"
GOLDEN = ROOT / "golden"
WRITE = os.environ.get("GEN_AGENT_WRITE_GOLDEN") == "1"
_TIMES = frozenset({"timestamp"})  # monotonic: differs from run to run

STREAMS = {
    "claude-cli": ClaudeStreamTranslator,
    "codex-cli": lambda: CodexStreamTranslator(model="gpt-test"),
}
CASES = [
    (cli, path.stem) for cli in sorted(STREAMS) for path in sorted((ROOT / cli).glob("*.jsonl"))
]


def snapshot(value: Any) -> Any:
    """`value` as JSON-ready nested lists that keep what `==` ignores: the type of every
    value (so `True` is not `1` and `1.0` is not `1`), dict key order, every field of a
    Struct (timestamps aside) and of a `BackendError` (`raw` and `diagnostics` too)."""
    if isinstance(value, dict):
        return ["dict", [[key, snapshot(item)] for key, item in value.items()]]
    if isinstance(value, list | tuple):
        return [type(value).__name__, [snapshot(item) for item in value]]
    if isinstance(value, BackendError):
        fields = ("provider", "kind", "retryable", "status", "retry_after", "message", "raw")
        return [
            "BackendError",
            [[name, snapshot(getattr(value, name))] for name in fields],
            snapshot(msgspec.structs.asdict(value.diagnostics)),
        ]
    if isinstance(value, msgspec.Struct):
        return [
            type(value).__name__,
            [
                [name, snapshot(getattr(value, name))]
                for name in value.__struct_fields__
                if name not in _TIMES
            ],
        ]
    if value is None or isinstance(value, bool | int | float | str):
        return [type(value).__name__, value]
    raise TypeError(f"no snapshot for {type(value).__name__}")  # a new type: extend snapshot


def decode(cli: str, name: str) -> Any:
    """The snapshot of one recorded turn: per line its events and the session id taken
    after it (`translate_line`, what the live backend runs), the end of stream, the events of
    `feed_lines` (what `translate_lines` runs) and the `Response` built from them."""
    lines = (ROOT / cli / f"{name}.jsonl").read_bytes().splitlines()
    live: LineTranslator = STREAMS[cli]()
    per_line = []
    for raw in lines:
        per_line.append([snapshot(translate_line(live, raw)), live.take_session_id()])
    end = live.end_of_stream(1, "tail")
    events = feed_lines(STREAMS[cli](), lines)
    response = Response.from_events(events, duration_ms=7, session_id="s")
    return {
        "per_line": per_line,
        "end_of_stream": snapshot(end),
        "events": snapshot(events),
        "response": snapshot(response),
    }


def encode(got: dict[str, Any]) -> bytes:
    """Compact JSON, one line per stream line and per other part (diffs stay readable)."""
    lines = [b'{"per_line": [']
    lines += [msgspec.json.encode(item) + b"," for item in got["per_line"]]
    lines[-1] = lines[-1].rstrip(b",")
    lines.append(b"],")
    parts = [key for key in got if key != "per_line"]
    for key in parts:
        comma = b"," if key != parts[-1] else b""
        lines.append(msgspec.json.encode(key) + b": " + msgspec.json.encode(got[key]) + comma)
    return b"\n".join([*lines, b"}", b""])


@pytest.mark.parametrize(("cli", "name"), CASES, ids=[f"{c}/{n}" for c, n in CASES])
def test_recorded_turns_decode_exactly_as_before(cli: str, name: str):
    path = GOLDEN / cli / f"{name}.json"
    got = decode(cli, name)
    if WRITE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode(got))
    expected = msgspec.json.decode(path.read_bytes())
    # Compare per part first: a failure names the part (and the line) that changed.
    for index, (got_line, expected_line) in enumerate(
        zip(got["per_line"], expected["per_line"], strict=True)
    ):
        assert got_line == expected_line, f"line {index + 1}"
    assert got == expected


def test_every_recorded_turn_has_a_golden_file():
    stored = {(path.parent.name, path.stem) for path in GOLDEN.glob("*/*.json")}
    assert stored == set(CASES)


def test_snapshot_tells_apart_what_equality_does_not():
    assert snapshot({"a": 1, "b": 2}) != snapshot({"b": 2, "a": 1})
    assert snapshot([True]) != snapshot([1])
    assert snapshot(1.0) != snapshot(1)
    assert snapshot((1,)) != snapshot([1])
