"""3. Stream parsing: MB/s of the Claude CLI backend's line decoder + normalizer.

The transcript repeats the real CLI's turns recorded in tests/fixtures/claude-cli (text,
tool use, tool result, result; with and without partial-message stream events) until it
holds `megabytes` MB. Lines are split before timing (no newline; `bytes` as the backend reads
them, and a `str` copy, decoded untimed, as the SDK's text stream hands them over); MB/s
counts the transcript's bytes with newlines (10^6 bytes per MB). Timed over the whole
transcript, per variant:

- `msgspec_decode`: `msgspec.json.decode(line)` per `bytes` line (generic dicts): the limit.
- `json_loads`: `json.loads(line)` per `str` line.
- `gen_agent` (the headline): `translate_lines(turn_lines)` per turn of `bytes` lines, the
  backend's public decode + normalize pipeline (blank-line check, `decode_line`,
  `ClaudeStreamTranslator`), producing the turn's `Event`s.
- `gen_agent_loop`: per turn a new `ClaudeStreamTranslator`, then per `bytes` line
  `translate_raw(line)` and `take_session_id()`: what the live backend runs per line
  (minus the checkpoint call into the agent).
- `sdk`: `claude_agent_sdk._internal.message_parser.parse_message(json.loads(line))` per `str`
  line: the SDK's transport decodes each line with `json.loads` (after a strip and a "{"
  check, not timed), then parses the dict into its typed messages. Its async line framing and
  UTF-8 decoding are not timed. Skipped when claude-agent-sdk is not installed (`make bench`
  installs it into the venv).

Every variant is one figure; each round runs them all once over the whole transcript,
interleaved, after a `gc.collect()`. The transcript and the check that both gen_agent
variants make the same events are done once, in `setup`.
"""

from __future__ import annotations

import gc
import json
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec

from gen_agent.backends.claude import ClaudeStreamTranslator, translate_lines

from ._harness import Ratio, Target, figure

NAME = "stream_parsing"
TITLE = "3. Stream parsing (Claude CLI stream-json)"
ORDER = 30
README = ("msgspec_decode", "gen_agent", "sdk", "gen_agent_vs_sdk", "msgspec_decode_vs_gen_agent")
FULL: dict[str, Any] = {"megabytes": 8, "rounds": 9, "warmup_rounds": 1}
SMOKE: dict[str, Any] = {"megabytes": 0.2, "rounds": 2, "warmup_rounds": 1}
TARGET_VS_MSGSPEC = 1.5

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "claude-cli"
TURN_FILES = ("text_turn", "tool_turn", "partial_text_turn", "partial_tool_turn")


def load_turns() -> list[list[bytes]]:
    """The recorded turns, each a list of its non-blank lines (bytes, no newline)."""
    turns = []
    for name in TURN_FILES:
        raw = (FIXTURES / f"{name}.jsonl").read_bytes()
        turns.append([line for line in raw.split(b"\n") if line.strip()])
    return turns


def build_transcript(megabytes: float) -> list[list[bytes]]:
    """Repeat the recorded turns, in order, until they hold `megabytes` * 10^6 bytes."""
    base = load_turns()
    turns: list[list[bytes]] = []
    size = 0
    while size < megabytes * 1e6:
        turn = base[len(turns) % len(base)]
        turns.append(turn)
        size += sum(len(line) + 1 for line in turn)
    return turns


def sdk_parser() -> tuple[Callable[[dict[str, Any]], Any] | None, str]:
    """`(parse_message, "claude-agent-sdk VERSION")`, or `(None, why)` when unavailable."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import claude_agent_sdk
            from claude_agent_sdk._internal.message_parser import parse_message
    except ImportError as exc:
        return None, f"claude-agent-sdk not importable ({type(exc).__name__}): run `make bench`"
    return parse_message, f"claude-agent-sdk {getattr(claude_agent_sdk, '__version__', '?')}"


Transcript = tuple[list[list[bytes]], list[list[str]]]


def _gen_agent(transcript: Transcript) -> int:
    return sum(len(translate_lines(turn)) for turn in transcript[0])


def _gen_agent_loop(transcript: Transcript) -> int:
    count = 0
    for turn in transcript[0]:
        translator = ClaudeStreamTranslator()
        for line in turn:
            count += len(translator.translate_raw(line))
            translator.take_session_id()
    return count


@contextmanager
def setup(params: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Build the transcript; check both gen_agent variants produce the same events.

    Raises:
        AssertionError: `translate_lines` and the per-line loop disagree.
    """
    turns = build_transcript(params["megabytes"])
    transcript = (turns, [[line.decode() for line in turn] for turn in turns])
    made, looped = _gen_agent(transcript), _gen_agent_loop(transcript)
    if made != looped:
        raise AssertionError(f"translate_lines made {made} events, the per-line loop {looped}")
    size = sum(len(line) + 1 for turn in turns for line in turn)
    parse_message, sdk_note = sdk_parser()
    yield {"transcript": transcript, "bytes": size, "parse_message": parse_message,
           "notes": {"sdk": sdk_note,
                     "msgspec": f"{size / 1e6:.1f} MB, {sum(len(t) for t in turns)} lines "
                                "of the real CLI's turns"}}


def _rate(env: dict[str, Any], run: Callable[[Transcript], Any]) -> float:
    gc.collect()
    started = time.perf_counter()
    run(env["transcript"])
    return env["bytes"] / (time.perf_counter() - started) / 1e6


def _per_line(fn: Callable[[Any], Any], text: bool) -> Callable[[Transcript], None]:
    def run(transcript: Transcript) -> None:
        for turn in transcript[1 if text else 0]:
            for line in turn:
                fn(line)
    return run


_MSGSPEC = _per_line(msgspec.json.decode, text=False)
_JSON = _per_line(json.loads, text=True)


@figure(unit="MB/s", label="msgspec.json.decode per line (the limit)")
def msgspec_decode(env: dict[str, Any], params: dict[str, Any]) -> float:
    """Raw msgspec over every `bytes` line (generic dicts)."""
    return _rate(env, _MSGSPEC)


@figure(unit="MB/s", label="json.loads per line")
def json_loads(env: dict[str, Any], params: dict[str, Any]) -> float:
    """`json.loads` over every `str` line."""
    return _rate(env, _JSON)


@figure(unit="MB/s", label="gen_agent translate_lines (decode+normalize)", peer="sdk",
        target=">= 2")
def gen_agent(env: dict[str, Any], params: dict[str, Any]) -> float:
    """The backend's public decode + normalize pipeline, per turn."""
    return _rate(env, _gen_agent)


@figure(unit="MB/s", label="gen_agent translate_raw per line")
def gen_agent_loop(env: dict[str, Any], params: dict[str, Any]) -> float:
    """What the live backend runs per line."""
    return _rate(env, _gen_agent_loop)


@figure(unit="MB/s", label="claude-agent-sdk json.loads+parse_message")
def sdk(env: dict[str, Any], params: dict[str, Any]) -> float | None:
    """The SDK's parser per `str` line; None when claude-agent-sdk is missing."""
    parse_message = env["parse_message"]
    if parse_message is None:
        return None
    loads = json.loads
    return _rate(env, _per_line(lambda line: parse_message(loads(line)), text=True))


RATIOS = [Ratio("msgspec_decode", "gen_agent", Target.parse(f"<= {TARGET_VS_MSGSPEC}"),
                label="msgspec / gen_agent"),
          Ratio("gen_agent", "json_loads", label="gen_agent / json.loads")]
