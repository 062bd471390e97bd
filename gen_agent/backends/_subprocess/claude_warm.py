"""Claude Code warm mode: one `claude` process per agent session, driven over stream-json.

The process runs `claude -p --input-format stream-json --output-format stream-json --verbose
[flags]` (plus `--resume ID` when it continues a conversation and `--permission-prompt-tool
stdio` when the agent decides permissions). Each turn writes one `user` message line to stdin
and reads until that turn's `result` line. Besides the conversation, stdin and stdout carry
the control protocol (facts from claude-agent-sdk's `ClaudeSDKClient`, recorded in
`tests/fixtures/claude-cli/warm_*.jsonl`):

- we send `{"type": "control_request", "request_id", "request": {"subtype": ...}}` with the
  subtypes `initialize`, `interrupt`, `set_model` {model}, `set_permission_mode` {mode}; the
  CLI answers `{"type": "control_response", "response": {"subtype": "success" | "error",
  "request_id", ...}}`;
- the CLI sends `control_request` `can_use_tool` {tool_name, input, tool_use_id,
  permission_suggestions, blocked_path, ...}; we answer `success` with `{"behavior":
  "allow", "updatedInput"}` or `{"behavior": "deny", "message", "interrupt"?}`;
- an `interrupt` is acknowledged at once; the turn then ends with a `result` of subtype
  `error_during_execution` (`terminal_reason: "aborted_streaming"`), and the process takes
  the next turn;
- `total_cost_usd` on a `result` is the process's running total;
- with Python tools (the `tools` option), the CLI sends `control_request` `mcp_message`
  {server_name, message} carrying JSON-RPC for the in-process MCP server of
  `_claude_mcp`: session messages are answered on the reader thread, `tools/call` in the
  turn task (see that module);
- a `--resume` of a session the CLI does not have: a `result` line (`num_turns: 0`,
  `errors: ["No conversation found with session ID: ..."]`) at once, the same on stderr,
  exit 1 (tests/fixtures/claude-cli/warm/session_not_found.jsonl).

Which turn a line belongs to (tests/fixtures/claude-cli/warm/background_turn.jsonl): the CLI
runs turns of its own (when a background task finishes it tells the model, which answers),
so the next `result` after our prompt may be another turn's. Each prompt carries a fresh
`uuid`, and the process runs with `--replay-user-messages`, which echoes each user message it
takes (`isReplay: true`, with that uuid) right after the turn's `system`/`init` line. A
turn's lines are those from its echo to its `result` (its init line is held until then). A
`result` before the echo with `num_turns: 0` is ours too: the CLI answers a local command
(`/cost`) or a failed start that way, without an echo and without asking the model, and it
takes queued input in order. Every other line before the echo, and every line while no turn
runs, belongs to no asked turn: a turn of the CLI's own becomes one `UnrequestedTurn` record
for `handle_info` (from its `init` line to its `result`), a line outside a turn one
`WarmOutput`; neither ever reaches a caller.

`WarmSlot` is the mutable part of a session (shared by its copies, like `Runner`): the live
process, the turn that owns it, and the session's cost and usage totals.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Final

import msgspec
from loguru import logger

from gen_agent._event import Event, monotonic_ms
from gen_agent._response import TextAccumulator
from gen_agent.backend import BackendError, DispatchError, TurnContext
from gen_agent.backends._subprocess.claude_control import answer_control, cancelled_answer
from gen_agent.backends._subprocess.claude_mcp import McpServer
from gen_agent.backends._subprocess.claude_steer import JOINED_KEY, Orphans, SteerState
from gen_agent.backends._subprocess.claude_stream import (
    PROVIDER,
    SESSION_NOT_FOUND,
    ClaudeStreamTranslator,
)
from gen_agent.backends._subprocess.jsonl import (
    OutputTail,
    decode_json,
    repair_surrogates,
    translate_line,
)
from gen_agent.backends._subprocess.process import ChildProcess, LineTooLong
from gen_agent.backends._subprocess.warm_fleet import START_WAIT_S
from gen_agent.backends.warm import (
    LiveProcess,
    Slot,
    TurnQueue,
    UnrequestedLines,
    WarmExited,
    WarmOutput,
    drain_abandoned_turn,
    with_process,
)

__all__ = ["WarmSlot", "warm_turn"]

_CANCEL = object()
_EXIT = object()
_MISMATCH = object()  # a turn of the CLI's own streamed into ours (see `_live_before_echo`)
_HELD_BYTES: Final = 4 * 1024 * 1024  # the bound on a turn's lines held until its echo
_EXIT_WAIT_S: Final = 2.0  # how long a CLI that said it cannot go on may take to exit
_USAGE_KEYS: Final = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)



class _Head(msgspec.Struct, frozen=True, gc=False):
    type: Any = None


class _ResultHead(msgspec.Struct, frozen=True, gc=False):
    type: Any = None
    total_cost_usd: Any = None


_HEAD: Final = msgspec.json.Decoder(_Head)
_RESULT_HEAD: Final = msgspec.json.Decoder(_ResultHead)


def _line_type(raw: bytes) -> Any:
    try:
        return _HEAD.decode(raw).type
    except (msgspec.DecodeError, msgspec.ValidationError):
        repaired, count = repair_surrogates(raw)
        if count:
            with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
                return _HEAD.decode(repaired).type
        return None


def _total_cost(raw: bytes) -> Any:
    """The `total_cost_usd` of a result line (None when it has none or is unreadable)."""
    try:
        return _RESULT_HEAD.decode(repair_surrogates(raw)[0]).total_cost_usd
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


class _TurnLines(TurnQueue):
    """The items routed to one turn (its stdout lines, control requests, EXIT, CANCEL,
    MISMATCH), and what the reader learned about it: whether its prompt's echo came
    (`echoed`), the lines held until then (`held`, `held_bytes`), whether lines before the
    echo stream at once (`live`, with `shadow` counting them), its stdout lines that were not
    JSON (`plain`) and the cost of its result (`cost_delta`, computed in line order by the
    reader)."""

    __slots__ = ("cost_delta", "echoed", "grace_s", "held", "held_bytes", "live", "plain",
                 "shadow", "steer", "uuid", "writing")

    def __init__(self, grace_s: float, prompt_uuid: str, tail_bytes: int) -> None:
        super().__init__()
        self.writing = False
        self.grace_s = grace_s
        self.uuid = prompt_uuid
        self.echoed = False
        self.live = False
        self.held: list[bytes] = []
        self.held_bytes = 0
        self.shadow: UnrequestedLines | None = None
        self.plain = OutputTail(tail_bytes)
        self.cost_delta = 0.0
        self.steer = SteerState()  # prompts steered into it (claude_steer)


class _ClaudeProcess:
    """A live `claude` process plus the routing of its lines (reader thread side)."""

    def __init__(self, slot: WarmSlot, child: ChildProcess, idle_timeout_ms: int | None,
                 info: Callable[[Any], None] | None, mcp: McpServer | None = None,
                 json_schema: str | None = None, *, turn: _TurnLines | None = None,
                 resumed: str | None = None, tail_bytes: int = 64 * 1024) -> None:
        self.slot = slot
        self.info = info
        self.mcp = mcp
        self.json_schema = json_schema  # the `--json-schema` it was started with, or None
        self.resumed = resumed  # the session id it was started to `--resume`, or None
        self.tail_bytes = tail_bytes
        # The turn that starts it owns it from its first line (a dead --resume answers at
        # once, before the prompt is written).
        self.turn: _TurnLines | None = turn
        self._stray: UnrequestedLines | None = None  # a turn of the CLI's own, in progress
        # A background task told the CLI it finished (`task_notification`), so the CLI may
        # run a turn of its own next; cleared when such a turn ended.
        self.foreign_pending = False
        self.orphans = Orphans()  # steered prompts a turn did not take (claude_steer)
        self.session_id: str | None = None  # the latest session id any line named
        self.cost_seen = 0.0  # the running total_cost_usd of this process (reader thread)
        self._ids = itertools.count(1)
        self._pending: dict[str, threading.Event] = {}
        self._answers: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.ready = threading.Event()  # the CLI answered a control request (`initialize`)
        self.live = LiveProcess(child, provider=PROVIDER, route=self._route,
                                on_exit=self._exited, idle_timeout_ms=idle_timeout_ms)
        with contextlib.suppress(OSError):  # gone already: the prompt's write fails next
            self.send_control({"subtype": "initialize", "hooks": None})

    @property
    def foreign_possible(self) -> bool:
        """Whether a turn of the CLI's own may come before the next prompt's (see
        `warm_turn`: the lines before that prompt's echo are then held)."""
        return self.foreign_pending or self._stray is not None

    # -- reader thread ---------------------------------------------------------------------
    def _owner(self) -> _TurnLines | None:
        """The turn whose lines are arriving now (its echo came), or None."""
        turn = self.turn
        return turn if turn is not None and turn.echoed else None

    def _route(self, item: bytes | LineTooLong) -> None:
        if isinstance(item, bytes) and b'"control_' in item[:64]:
            kind = _line_type(item)
            if kind == "control_response":
                self._answered(decode_json(item))
                return
            if kind in ("control_request", "control_cancel_request"):
                request = decode_json(item)
                if kind == "control_request" and self._mcp_session(request):
                    return
                owner = self._owner()
                if owner is not None:
                    owner.put(request)
                elif kind == "control_request":
                    self._refuse(request, "no turn of the agent is running")
                return
        if isinstance(item, bytes) and b'"task_notification"' in item:
            self.foreign_pending = True
        turn = self.turn
        if turn is None:
            self._unrequested(item)
        elif turn.echoed or not isinstance(item, bytes):
            if isinstance(item, bytes):
                turn.steer.note(item)
            if isinstance(item, bytes) and b'"result"' in item and _line_type(item) == "result":
                self.turn = None  # the turn's last line: what follows belongs to no turn
                self.orphaned(turn)
                turn.cost_delta = self._cost_delta(item)
            turn.put(item)
        else:
            self._before_echo(turn, item)

    def orphaned(self, turn: _TurnLines) -> None:
        """`turn` ended: the next prompt's lines before its echo are held if it left
        orphans (steered prompts it did not take, whose own turns are dropped)."""
        if self.orphans.add(turn.steer.close()):
            self.foreign_pending = True

    def _before_echo(self, turn: _TurnLines, raw: bytes) -> None:
        """A line after our prompt was written, before its echo: ours, or a turn's the CLI
        runs by itself (see the module docstring)."""
        if not raw.strip():
            return
        try:
            line = decode_json(raw)
        except msgspec.DecodeError:
            turn.plain.add(raw)  # plain text: what a CLI prints when it cannot start
            return
        fields = line if isinstance(line, dict) else {}
        kind = fields.get("type")
        if isinstance(fields.get("session_id"), str) and fields["session_id"]:
            self.session_id = fields["session_id"]
        if kind == "user" and fields.get("uuid") == turn.uuid:  # the echo of our prompt
            self._take(turn)
        elif kind == "result" and fields.get("num_turns") == 0:
            # No model request: a local command's answer or a failed start (a dead
            # --resume). The CLI answers queued input in order, and its own turns ask the
            # model, so this answers our prompt.
            self._take(turn)
            self.turn = None
            turn.cost_delta = self._cost_delta(raw)
            turn.put(raw)
        elif turn.live:
            self._live_before_echo(turn, raw, fields)
        elif kind == "system" and fields.get("subtype") == "init":
            self._release_held(turn)  # a turn starts: ours if our echo follows
            self._hold(turn, raw)
        elif kind == "result":
            self._release_held(turn)  # that turn was not ours
            self._unrequested_line(raw, line)
        elif turn.held:
            self._hold(turn, raw)
        else:
            self._unrequested_line(raw, line)

    def _hold(self, turn: _TurnLines, raw: bytes) -> None:
        # A partial message's deltas past the bound are dropped: its complete `assistant`
        # line (right after the echo) carries the same text.
        if turn.held_bytes + len(raw) > _HELD_BYTES and raw[:22] == b'{"type":"stream_event"':
            return
        turn.held.append(raw)
        turn.held_bytes += len(raw)

    def _live_before_echo(self, turn: _TurnLines, raw: bytes, fields: dict[str, Any]) -> None:
        """Streaming mode with no turn of the CLI's own expected: the line is the turn's at
        once. A `result` without our echo proves otherwise: the turn fails (MISMATCH) and
        what streamed is reported as a turn nobody asked for."""
        shadow = turn.shadow
        if shadow is None:
            shadow = turn.shadow = UnrequestedLines(self.tail_bytes)
        kind = fields.get("type")
        shadow.add(len(raw), session_id=fields.get("session_id"),
                   text=_assistant_text(fields) if kind == "assistant" else None)
        if kind != "result":
            turn.put(raw)
            return
        self.turn = None
        delta = self._cost_delta(raw)
        self.slot.add_cost(delta)
        usage = fields.get("usage")
        self._tell(shadow.record(
            PROVIDER, self.live.pid, final_text=fields.get("result"),
            is_error=fields.get("is_error") is True, cost_usd=delta,
            usage=_usage_counts(usage) if isinstance(usage, dict) else None))
        self.foreign_pending = True  # our prompt is still queued in the CLI: its turn is next
        turn.put(_MISMATCH)

    def _take(self, turn: _TurnLines) -> None:
        turn.echoed = True
        held, turn.held, turn.held_bytes = turn.held, [], 0
        for raw in held:
            turn.put(raw)

    def _release_held(self, turn: _TurnLines) -> None:
        held, turn.held, turn.held_bytes = turn.held, [], 0
        for raw in held:
            self._unrequested_line(raw, decode_json(raw))

    def _unrequested(self, item: bytes | LineTooLong) -> None:
        if isinstance(item, LineTooLong):
            logger.debug("gen_agent claude: a line of {} bytes outside any turn was dropped",
                         item.size_bytes)
            return
        if not item.strip():
            return
        try:
            line: Any = decode_json(item)
        except msgspec.DecodeError:
            line = None
        self._unrequested_line(item, line)

    def _unrequested_line(self, raw: bytes, line: Any) -> None:
        """A line of no asked turn: part of a turn of the CLI's own (from its `init` line to
        its `result`: one `UnrequestedTurn`), else a `WarmOutput` of its own."""
        fields = line if isinstance(line, dict) else {}
        kind = fields.get("type")
        if isinstance(fields.get("session_id"), str) and fields["session_id"]:
            self.session_id = fields["session_id"]
        stray = self._stray
        if stray is None:
            if kind != "system" or fields.get("subtype") != "init":
                self._tell(WarmOutput(backend=PROVIDER, pid=self.live.pid, line=line,
                                      size_bytes=len(raw)))
                return
            stray = self._stray = UnrequestedLines(self.tail_bytes)
        stray.add(len(raw), session_id=fields.get("session_id"),
                  text=_assistant_text(fields) if kind == "assistant" else None)
        if kind == "user":
            self.orphans.seen(fields.get("uuid"))
        if kind != "result":
            return
        self._stray = None
        self.foreign_pending = self.orphans.pending
        delta = self._cost_delta(raw)
        self.slot.add_cost(delta)
        if self.orphans.drop_stray():
            return
        usage = fields.get("usage")
        self._tell(stray.record(
            PROVIDER, self.live.pid, final_text=fields.get("result"),
            is_error=fields.get("is_error") is True, cost_usd=delta,
            usage=_usage_counts(usage) if isinstance(usage, dict) else None))

    def _cost_delta(self, raw: bytes) -> float:
        """What a result line's running `total_cost_usd` adds to this process's (never
        negative; reader thread, in line order)."""
        total = _total_cost(raw)
        if not isinstance(total, int | float) or isinstance(total, bool):
            return 0.0
        if total < self.cost_seen:
            return 0.0
        delta, self.cost_seen = float(total) - self.cost_seen, float(total)
        return delta

    def _tell(self, message: Any) -> None:
        if self.info is not None:
            self.info(message)
        else:
            logger.debug("gen_agent claude: {} dropped (no info sink)", type(message).__name__)

    def _mcp_session(self, line: Any) -> bool:
        """Answer an `mcp_message` that needs no turn (all but `tools/call`, and that one
        too when no turn runs); True when answered here."""
        request = line.get("request") if isinstance(line, dict) else None
        if not isinstance(request, dict) or request.get("subtype") != "mcp_message":
            return False
        request_id = line.get("request_id")
        if not isinstance(request_id, str):
            return True
        mcp = self.mcp
        if mcp is None or request.get("server_name") != mcp.name:
            self.respond_error(request_id, f"no MCP server {request.get('server_name')!r}")
            return True
        message = request.get("message")
        if McpServer.is_call(message) and self._owner() is not None:
            return False  # the turn task runs it
        with contextlib.suppress(OSError):  # gone: the reader sees the exit next
            self.respond(request_id, {"mcp_response": mcp.answer(message)})
        return True

    def _answered(self, line: Any) -> None:
        response = line.get("response") if isinstance(line, dict) else None
        request_id = response.get("request_id") if isinstance(response, dict) else None
        if not isinstance(request_id, str):
            return
        self.ready.set()
        with self._lock:
            event = self._pending.pop(request_id, None)
            if event is not None:
                self._answers[request_id] = response
        if event is not None:
            event.set()

    def _refuse(self, line: Any, why: str) -> None:
        request_id = line.get("request_id") if isinstance(line, dict) else None
        if isinstance(request_id, str):
            self.respond_error(request_id, why)

    def _exited(self, live: LiveProcess) -> None:
        turn = self.turn
        with self._lock:
            waiting = list(self._pending.values())
            self._pending.clear()
        for event in waiting:
            event.set()
        stray, self._stray = self._stray, None
        if stray is not None:  # a turn of its own, cut off
            self._tell(stray.record(PROVIDER, live.pid, complete=False))
        if turn is not None:
            turn.put(_EXIT)
        elif self.info is not None and not live.close_requested:
            tail = live.child.stderr_tail().decode("utf-8", errors="replace")
            self.info(WarmExited(backend=PROVIDER, pid=live.pid,
                                 exit_code=live.child.returncode, stderr_tail=tail))
        self.slot._process_gone(self)

    # -- any thread ------------------------------------------------------------------------
    def send_control(self, request: dict[str, Any], *, wait_s: float | None = None) -> Any:
        """Send a control request; with `wait_s`, wait that long for its response (the
        response dict, or None on timeout / exit). Raises OSError when the CLI is gone."""
        request_id = f"gen_agent_{next(self._ids)}"
        event = threading.Event()
        if wait_s is not None:
            with self._lock:
                self._pending[request_id] = event
        self.live.write_json({"type": "control_request", "request_id": request_id,
                              "request": request})
        if wait_s is None:
            return None
        event.wait(wait_s)
        with self._lock:
            self._pending.pop(request_id, None)
            return self._answers.pop(request_id, None)

    def respond(self, request_id: str, response: dict[str, Any]) -> None:
        self.live.write_json({"type": "control_response", "response": {
            "subtype": "success", "request_id": request_id, "response": response}})

    def respond_error(self, request_id: str, message: str) -> None:
        with contextlib.suppress(OSError):
            self.live.write_json({"type": "control_response", "response": {
                "subtype": "error", "request_id": request_id, "error": message}})


class WarmSlot(Slot[_ClaudeProcess, _TurnLines]):
    """The mutable part of a warm `ClaudeSession` (shared by its copies). Thread-safe.

    Holds the live process (or None), whether a turn owns it (the `Slot` bookkeeping), and
    the session's totals: `cost_usd` (US dollars, summed over processes) and `usage` (token
    counts summed over turns). `processes_started` counts processes; `schema_restarts`
    counts the live processes closed because a turn asked for another `--json-schema` (or
    none).
    """

    provider = PROVIDER

    def __init__(self) -> None:
        super().__init__()
        self.cost_usd = 0.0
        self.usage: dict[str, int] = {}
        self.overrides: dict[str, str] = {}
        self.processes_started = 0
        self.schema_restarts = 0
        self.starting: threading.Event | None = None  # a pre-warm in flight (`_warm_fleet`)

    @property
    def live(self) -> LiveProcess | None:
        """The live process, or None."""
        process = self.process
        return None if process is None else process.live

    def acquire(self, spawn: Callable[[], ChildProcess], *, info: Any, idle_timeout_ms: Any,
                settle_s: float, mcp: McpServer | None = None, json_schema: str | None = None,
                prompt_uuid: str | None = None, tail_bytes: int = 64 * 1024,
                resumed: str | None = None) -> tuple[_ClaudeProcess, _TurnLines]:
        """Wait for the previous turn to settle (killing its process past `settle_s`), start
        a process when none is live (serving `mcp`, the agent's Python tools, if given), and make
        a new turn its owner. Turn task thread.

        `json_schema`: the `--json-schema` the turn needs (`spawn` must pass it). A live
        process started with another one (or with one while the turn needs none) is closed
        first (stdin EOF, waited for up to `settle_s`, so its transcript is complete) and
        replaced; `spawn` resumes the session, so the conversation continues. The CLI sets
        its output schema only at start (`--json-schema`, or `initialize`'s `jsonSchema`,
        which a second `initialize` ignores; checked on 2.1.197), so a change costs one
        process start.

        `prompt_uuid`: the uuid the turn's prompt carries (its echo marks the turn's start);
        `tail_bytes`: the bound of the turn's kept non-JSON stdout (bytes); `resumed`: the
        session id `spawn` resumes, if any. A pre-warm in flight is waited for first."""
        starting = self.starting
        if starting is not None:
            starting.wait(START_WAIT_S)
        process = self._settle_previous(settle_s)
        if process is not None and process.json_schema != json_schema:
            logger.debug("gen_agent claude: another output schema; restarting the process")
            process.live.end(settle_s)
            with self._cond:
                self.schema_restarts += 1
        lines = _TurnLines(settle_s, prompt_uuid or str(uuid.uuid4()), tail_bytes)
        with self._cond:
            self._cond.wait_for(lambda: self.starting is None, START_WAIT_S)  # (a replacement)
            process = self.process
            if process is None or not process.live.alive:
                process = _ClaudeProcess(self, spawn(), idle_timeout_ms, info, mcp,
                                         json_schema, turn=lines, resumed=resumed,
                                         tail_bytes=tail_bytes)
                self.processes_started += 1
            self._own_locked(process, lines)
        return process, lines

    def cancel(self) -> None:
        """Interrupt the running turn (agent thread; quick): its task sends the `interrupt`
        control request and drains; a turn still writing its prompt is killed instead."""
        with self._cond:
            lines, process = self._turn, self.process
        if lines is None:
            return
        if lines.writing and process is not None:
            # The prompt is still being written: it normally finishes at once (the turn then
            # interrupts); a CLI that stopped reading stdin is killed past the grace.
            from gen_agent._timers import TIMERS

            live = process.live
            TIMERS.schedule(lines.grace_s, lambda: live.kill() if lines.writing else None)
        lines.put(_CANCEL)

    def account(self, data: dict[str, Any], delta: float) -> None:
        """Replace the result's cumulative `cost_usd` with this turn's `delta` (US dollars,
        computed by the reader in line order), with the process's total and the session's
        totals beside it (`process_cost_usd`, `session_cost_usd`, `session_usage`)."""
        total = data.get("cost_usd")
        if isinstance(total, int | float) and not isinstance(total, bool):
            data["process_cost_usd"] = total
        with self._cond:
            self.cost_usd += delta
            data["cost_usd"] = delta
            data["session_cost_usd"] = self.cost_usd
            data["session_usage"] = dict(self.usage)

    def add_cost(self, delta: float) -> None:
        """Add what a turn nobody asked for cost (US dollars) to the session's total."""
        with self._cond:
            self.cost_usd += delta

    def add_usage(self, usage: dict[str, Any]) -> None:
        """Add one turn's token counts to the session's."""
        with self._cond:
            for key in _USAGE_KEYS:
                value = usage.get(key)
                if isinstance(value, int):
                    self.usage[key] = self.usage.get(key, 0) + value


def _user_line(prompt: str, prompt_uuid: str) -> dict[str, Any]:
    return {"type": "user", "message": {"role": "user", "content": prompt},
            "parent_tool_use_id": None, "session_id": "default", "uuid": prompt_uuid}


def warm_turn(
    slot: WarmSlot,
    prompt: str,
    context: TurnContext,
    *,
    spawn: Callable[[], ChildProcess],
    idle_timeout_ms: int | None,
    interrupt_grace_ms: int,
    permission_timeout_ms: int,
    mcp: McpServer | None = None,
    json_schema: str | None = None,
    resume_id: str | None = None,
    tail_bytes: int = 64 * 1024,
    stream_partial: bool = False,
) -> Iterator[Event]:
    """Start (or reuse) the process, send `prompt`, and return the turn's event stream.

    `mcp`: the agent's Python tools, served to a process this turn starts (the command line
    `spawn` runs must declare it). `json_schema`: the turn's `--json-schema` (encoded JSON
    schema, or None; `spawn` must pass it): a live process started with another one is
    replaced first (see `WarmSlot.acquire`). `resume_id`: the session `spawn` resumes (None:
    a new one). `tail_bytes`: the bound of the diagnostics' `stdout_tail` (bytes).

    `stream_partial` (`--include-partial-messages`): the CLI echoes a prompt only right before
    the first complete `assistant` line, after that message's deltas. So the lines before the
    echo are held (released as the echo arrives) only when a turn of the CLI's own may come
    first (a background task's notification is pending, or such a turn runs); otherwise they
    stream at once, and a `result` without the echo fails the turn with
    `"unmatched_turn"` (retryable) rather than answer with another turn's output. Without
    partial messages the first line after the echo is that first message anyway: holding
    costs nothing, and is always done.

    Raises:
        DispatchError: the process could not be started, the session it was asked to
            resume does not exist (`"session_not_found"`, never tried again), or it died
            before it took the prompt twice in a row (`"cli_exited"`); a `BackendError`
            with diagnostics (exit code, stderr tail).
    """
    settle_s = interrupt_grace_ms / 1000 + 1.0
    prompt_uuid = str(uuid.uuid4())
    for attempt in (1, 2):
        try:
            process, lines = slot.acquire(spawn, info=context.info_sink,
                                          idle_timeout_ms=idle_timeout_ms, settle_s=settle_s,
                                          mcp=mcp, json_schema=json_schema,
                                          prompt_uuid=prompt_uuid, tail_bytes=tail_bytes,
                                          resumed=resume_id)
        except BackendError as exc:
            raise DispatchError(exc, exc.message) from None
        lines.live = stream_partial and not process.foreign_possible
        lines.writing = True
        try:
            process.live.write_json(_user_line(prompt, prompt_uuid))
        except OSError:
            # Died between turns (or while taking the prompt): start anew, resuming, once;
            # but a session the CLI does not have stays gone.
            slot.release(process, lines)
            process.live.kill()
            process.live.wait_exited(settle_s)
            dead = _dead_session(process)
            if dead is not None or attempt == 2 or context.cancelled:
                reason = dead or BackendError.new(
                    PROVIDER, "cli_exited", None,
                    message="the claude process exited before it took the prompt")
                reason = with_process(reason, process.live.child, lines.plain, "", resume_id)
                raise DispatchError(reason, reason.message) from None
            continue
        except BaseException:
            slot.release(process, lines)  # never a process left claimed by a failed turn
            raise
        finally:
            lines.writing = False
        lines.started = time.monotonic()  # the CLI runs this turn from here on
        lines.interrupter = functools.partial(process.send_control, {"subtype": "interrupt"})
        if context.cancelled:
            slot.cancel()
        return _events(slot, process, lines, context, interrupt_grace_ms,
                       permission_timeout_ms)
    raise AssertionError("unreachable")


def _dead_session(process: _ClaudeProcess) -> BackendError | None:
    """`"session_not_found"` when the exited process was resuming a session and said it has
    no such conversation (on stderr), else None."""
    resumed = process.resumed
    if resumed is None:
        return None
    tail = process.live.child.stderr_tail().decode("utf-8", errors="replace")
    if not SESSION_NOT_FOUND.search(tail):
        return None
    raw = {"exit_code": process.live.child.returncode, "stderr_tail": tail,
           "session_id": resumed}
    return BackendError.new(PROVIDER, "session_not_found", raw,
                            message=f"claude has no session {resumed!r} to resume")


def _diagnosed(event: Event, process: _ClaudeProcess, lines: _TurnLines, text: TextAccumulator,
               translator: ClaudeStreamTranslator) -> Event:
    reason = event.data.get("reason")
    if not isinstance(reason, BackendError):
        return event
    session_id = event.data.get("session_id") or translator.session_id or process.session_id
    reason = with_process(reason, process.live.child, lines.plain, text.assembled(), session_id)
    return Event(event.kind, {**event.data, "reason": reason}, event.timestamp)


def _events(slot: WarmSlot, process: _ClaudeProcess, lines: _TurnLines, context: TurnContext,
            interrupt_grace_ms: int, permission_timeout_ms: int) -> Iterator[Event]:
    translator = ClaudeStreamTranslator()
    text = TextAccumulator()
    settled = False
    interrupt_requested = False
    try:
        while True:
            item = lines.get()
            if item is _CANCEL:
                return
            if item is _MISMATCH:
                settled = True
                reason = BackendError.new(
                    PROVIDER, "unmatched_turn", None, retryable=True,
                    message="a turn the claude CLI ran by itself streamed before this "
                            "prompt's turn; it went to handle_info")
                yield _diagnosed(translator.error(reason), process, lines, text, translator)
                return
            if item is _EXIT:
                settled = True
                yield _diagnosed(_ended(process, translator, context), process, lines, text,
                                 translator)
                return
            if isinstance(item, LineTooLong):
                process.live.kill()
                settled = True
                yield _diagnosed(translator.error(_line_too_long(item)), process, lines, text,
                                 translator)
                return
            if isinstance(item, dict):
                event, interrupt = answer_control(process, item, context, permission_timeout_ms)
                if event is not None:
                    yield event
                if interrupt:
                    interrupt_requested = True
                continue
            events = translate_line(translator, item, on_unparsed=lines.plain.add)
            session_id = translator.take_session_id()
            if session_id is not None:
                process.live.child.session_id = session_id  # (see ChildProcess.spawn)
                context.checkpoint(session_id)
            for event in events:
                if event.kind == "text":
                    text.add(event.data)
                elif event.kind == "usage":
                    slot.add_usage(event.data)
                elif event.kind in ("result", "error"):
                    settled = True
                    slot.account(event.data, lines.cost_delta)
                    if lines.steer.steers:
                        event.data[JOINED_KEY] = lines.steer.joined
                    if interrupt_requested:
                        event = Event("error", {"reason": "interrupted",
                                                "session_id": translator.session_id},
                                      monotonic_ms())
                    elif event.kind == "error":
                        failure = event.data.get("reason")
                        if isinstance(failure, BackendError) and failure.kind == \
                                "session_not_found":
                            # It exits right after saying so: its exit status and stderr
                            # belong on the error (bounded wait).
                            process.live.wait_exited(_EXIT_WAIT_S)
                        event = _diagnosed(event, process, lines, text, translator)
                yield event
                if event.is_terminal:
                    return
    finally:
        if not settled:
            _settle(slot, process, lines, interrupt_grace_ms)
        process.orphaned(lines)  # (the reader did at the result; a turn cut off too)
        slot.release(process, lines)


def _settle(slot: WarmSlot, process: _ClaudeProcess, lines: _TurnLines,
            interrupt_grace_ms: int) -> None:
    """An abandoned turn: interrupt the CLI and drain this turn's lines up to its `result`;
    past `interrupt_grace_ms`, kill the process (the next turn resumes on a new one)."""
    if not lines.interrupt_once():  # (a stopping agent may have sent it already)
        return

    def settled(item: Any) -> bool:
        if isinstance(item, dict):
            request_id = item.get("request_id")
            if item.get("type") == "control_request" and isinstance(request_id, str):
                try:
                    process.respond(request_id, cancelled_answer(item.get("request")))
                except OSError:
                    return True
            return False
        if isinstance(item, bytes) and _line_type(item) == "result":
            slot.add_cost(lines.cost_delta)  # the reader computed it as the line arrived
            return True
        return False

    drain_abandoned_turn(process.live, lines, _EXIT, interrupt_grace_ms, settled)


def _ended(process: _ClaudeProcess, translator: ClaudeStreamTranslator,
           context: TurnContext) -> Event:
    """The terminal event of a turn whose process ended before its result: `"cancelled"`,
    `"session_not_found"` (a `--resume` the CLI refused), else `"no_result"`."""
    live = process.live
    if context.cancelled:
        return translator.error(BackendError.new(PROVIDER, "cancelled", None,
                                                 message="the turn was cancelled"))
    live.wait_exited(5.0)
    dead = _dead_session(process)
    if dead is not None:
        return translator.error(dead)
    tail = live.child.stderr_tail().decode("utf-8", errors="replace")
    event = translator.end_of_stream(live.child.returncode, tail)
    assert event is not None
    return event


def _assistant_text(line: dict[str, Any]) -> str | None:
    """The text blocks of an `assistant` line of the main conversation, joined."""
    message = line.get("message")
    if line.get("parent_tool_use_id") is not None or not isinstance(message, dict):
        return None
    content = message.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    return "".join(block["text"] for block in content if isinstance(block, dict)
                   and block.get("type") == "text" and isinstance(block.get("text"), str))


def _usage_counts(usage: dict[str, Any]) -> dict[str, int]:
    return {key: value for key in _USAGE_KEYS if type(value := usage.get(key)) is int}


def _line_too_long(item: LineTooLong) -> BackendError:
    message = (f"a {PROVIDER} stdout line of {item.size_bytes} bytes exceeds "
               f"max_line_bytes={item.limit_bytes}")
    raw = {"size_bytes": item.size_bytes, "limit_bytes": item.limit_bytes}
    return BackendError.new(PROVIDER, "line_too_long", raw, message=message)
