"""3. Stream parsing: MB/s of the Claude CLI backend's line decoder + normalizer.

The transcript repeats the real CLI's turns recorded in tests/fixtures/claude-cli (text,
tool use, tool result, result; with and without partial-message stream events) until it
holds `megabytes` MB. Lines are split before timing (no newline; `bytes` as the backend reads
them, and a `str` copy, decoded untimed, as the SDK's text stream hands them over); MB/s
counts the transcript's bytes with newlines (10^6 bytes per MB). Timed over the whole
transcript, per variant:

- `msgspec`: `msgspec.json.decode(line)` per `bytes` line (generic dicts): the limit.
- `json`: `json.loads(line)` per `str` line.
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

Each repetition times every variant twice, in forward then reverse order, and keeps the
faster pass of each (the least disturbed one).
"""

from __future__ import annotations

import gc
import json
import time
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from gen_agent.backends.claude import ClaudeStreamTranslator, translate_lines

from ._common import Figure, median

NAME = "stream_parsing"
TITLE = "3. Stream parsing (Claude CLI stream-json)"
FULL: dict[str, Any] = {"megabytes": 24}
SMOKE: dict[str, Any] = {"megabytes": 0.2}
REPS = 5
TARGET_VS_SDK = 2.0
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


def _per_line(fn: Callable[[Any], Any], text: bool) -> Callable[[Transcript], int]:
    def run(transcript: Transcript) -> int:
        count = 0
        for turn in transcript[1 if text else 0]:
            for line in turn:
                if fn(line) is not None:
                    count += 1
        return count
    return run


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


def _variants() -> tuple[dict[str, Callable[[Transcript], int]], str]:
    variants: dict[str, Callable[[Transcript], int]] = {
        "msgspec": _per_line(msgspec.json.decode, text=False),
        "json": _per_line(json.loads, text=True),
        "gen_agent": _gen_agent,
        "gen_agent_loop": _gen_agent_loop,
    }
    parse_message, sdk_note = sdk_parser()
    if parse_message is not None:
        loads = json.loads
        variants["sdk"] = _per_line(lambda line: parse_message(loads(line)), text=True)
    return variants, sdk_note


def run_once(params: dict[str, Any]) -> dict[str, Any]:
    """One repetition: every variant over the same transcript, twice; the faster pass counts.

    Args:
        params: `megabytes`, the transcript size (10^6 bytes).

    Returns:
        `{"transcript": {...}, "mb_per_s": {variant: MB/s}, "items": {variant: count},
        "ratios": {...}, "sdk": version or why it is missing}`.

    Raises:
        AssertionError: the two gen_agent variants disagree on the events produced.
    """
    turns = build_transcript(params["megabytes"])
    transcript = (turns, [[line.decode() for line in turn] for turn in turns])
    size = sum(len(line) + 1 for turn in turns for line in turn)
    kinds = Counter(json.loads(line).get("type") for turn in turns[:4] for line in turn)
    variants, sdk_note = _variants()
    best: dict[str, float] = {}
    items: dict[str, int] = {}
    for order in (list(variants), list(reversed(variants))):
        for name in order:
            gc.collect()
            started = time.perf_counter()
            items[name] = variants[name](transcript)
            elapsed = time.perf_counter() - started
            best[name] = min(best.get(name, elapsed), elapsed)
    rates = {name: size / elapsed / 1e6 for name, elapsed in best.items()}
    if items["gen_agent"] != items["gen_agent_loop"]:
        raise AssertionError(f"translate_lines made {items['gen_agent']} events, the per-line "
                             f"loop {items['gen_agent_loop']}")
    ratios = {"msgspec_vs_gen_agent": rates["msgspec"] / rates["gen_agent"],
              "gen_agent_vs_json": rates["gen_agent"] / rates["json"]}
    if "sdk" in rates:
        ratios["gen_agent_vs_sdk"] = rates["gen_agent"] / rates["sdk"]
        ratios["json_vs_sdk"] = rates["json"] / rates["sdk"]
    return {
        "transcript": {"bytes": size, "turns": len(turns),
                       "lines": sum(len(turn) for turn in turns),
                       "line_types_per_4_turns": dict(kinds)},
        "mb_per_s": rates,
        "items": items,
        "ratios": ratios,
        "sdk": sdk_note,
    }


def summarize(reps: list[dict[str, Any]], params: dict[str, Any]) -> list[Figure]:
    """Medians over the repetitions; ratios per repetition, then median."""
    def rate(name: str) -> float | None:
        return median(rep["mb_per_s"].get(name) for rep in reps)

    def ratio(name: str) -> float | None:
        return median(rep["ratios"].get(name) for rep in reps)

    sdk_note = reps[0]["sdk"] if reps else ""
    vs_sdk, vs_msgspec = ratio("gen_agent_vs_sdk"), ratio("msgspec_vs_gen_agent")
    transcript = reps[0]["transcript"] if reps else {}
    return [
        Figure(key="msgspec_mb_per_s", label="msgspec.json.decode per line (the limit)",
               unit="MB/s", value=rate("msgspec"),
               note=f"{transcript.get('bytes', 0) / 1e6:.1f} MB, {transcript.get('lines')} "
                    "lines of the real CLI's turns"),
        Figure(key="json_mb_per_s", label="json.loads per line", unit="MB/s",
               value=rate("json")),
        Figure(key="gen_agent_mb_per_s", label="gen_agent translate_lines (decode+normalize)",
               unit="MB/s", value=rate("gen_agent")),
        Figure(key="gen_agent_loop_mb_per_s", label="gen_agent translate_raw per line",
               unit="MB/s", value=rate("gen_agent_loop")),
        Figure(key="sdk_mb_per_s", label="claude-agent-sdk json.loads+parse_message",
               unit="MB/s", value=rate("sdk"), note=sdk_note),
        Figure(key="gen_agent_vs_sdk", label="gen_agent / sdk", unit="x", value=vs_sdk,
               target=f">= {TARGET_VS_SDK:g}x",
               met=None if vs_sdk is None else vs_sdk >= TARGET_VS_SDK),
        Figure(key="msgspec_vs_gen_agent", label="msgspec / gen_agent", unit="x",
               value=vs_msgspec, target=f"<= {TARGET_VS_MSGSPEC:g}x",
               met=None if vs_msgspec is None else vs_msgspec <= TARGET_VS_MSGSPEC),
        Figure(key="gen_agent_vs_json", label="gen_agent / json.loads", unit="x",
               value=ratio("gen_agent_vs_json")),
    ]
