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
  turn task (see that module).

`WarmSlot` is the mutable part of a session (shared by its copies, like `Runner`): the live
process, the turn that owns it, and the session's cost and usage totals.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Final

import msgspec
from loguru import logger

from gen_agent.backend import BackendError, DispatchError, TurnContext
from gen_agent.backends._claude_mcp import McpServer
from gen_agent.backends._claude_stream import PROVIDER, ClaudeStreamTranslator
from gen_agent.backends._jsonl import translate_line
from gen_agent.backends._process import ChildProcess, LineTooLong
from gen_agent.backends.warm import (
    LiveProcess,
    Slot,
    TurnQueue,
    WarmExited,
    WarmOutput,
    drain_abandoned_turn,
)
from gen_agent.event import Event, monotonic_ms
from gen_agent.permission import (
    DENY_FAILED,
    Allow,
    Deny,
    ToolPermissionRequest,
)

__all__ = ["WarmSlot", "warm_turn"]

_CANCEL = object()
_EXIT = object()
_USAGE_KEYS: Final = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)
_DETAIL_KEYS: Final = (
    "display_name", "description", "permission_suggestions", "blocked_path",
    "decision_reason", "title", "agent_id",
)  # fmt: skip


class _Head(msgspec.Struct, frozen=True, gc=False):
    type: Any = None


_HEAD: Final = msgspec.json.Decoder(_Head)
_GENERIC: Final = msgspec.json.Decoder()


def _line_type(raw: bytes) -> Any:
    try:
        return _HEAD.decode(raw).type
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


class _TurnLines(TurnQueue):
    """The items routed to one turn: stdout lines, control requests, EXIT, CANCEL."""

    __slots__ = ("grace_s", "writing")

    def __init__(self, grace_s: float) -> None:
        super().__init__()
        self.writing = False
        self.grace_s = grace_s


class _ClaudeProcess:
    """A live `claude` process plus the routing of its lines (reader thread side)."""

    def __init__(self, slot: WarmSlot, child: ChildProcess, idle_timeout_ms: int | None,
                 info: Callable[[Any], None] | None, mcp: McpServer | None = None,
                 json_schema: str | None = None) -> None:
        self.slot = slot
        self.info = info
        self.mcp = mcp
        self.json_schema = json_schema  # the `--json-schema` it was started with, or None
        self.turn: _TurnLines | None = None
        self.cost_seen = 0.0  # the running total_cost_usd of this process
        self._ids = itertools.count(1)
        self._pending: dict[str, threading.Event] = {}
        self._answers: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.live = LiveProcess(child, provider=PROVIDER, route=self._route,
                                on_exit=self._exited, idle_timeout_ms=idle_timeout_ms)
        with contextlib.suppress(OSError):  # gone already: the prompt's write fails next
            self.send_control({"subtype": "initialize", "hooks": None})

    # -- reader thread ---------------------------------------------------------------------
    def _route(self, item: bytes | LineTooLong) -> None:
        if isinstance(item, bytes) and b'"control_' in item[:64]:
            kind = _line_type(item)
            if kind == "control_response":
                self._answered(_GENERIC.decode(item))
                return
            if kind in ("control_request", "control_cancel_request"):
                request = _GENERIC.decode(item)
                if kind == "control_request" and self._mcp_session(request):
                    return
                turn = self.turn
                if turn is not None:
                    turn.put(request)
                elif kind == "control_request":
                    self._refuse(request, "no turn is running")
                return
        turn = self.turn
        if turn is not None:
            if isinstance(item, bytes) and b'"result"' in item and _line_type(item) == "result":
                self.turn = None  # the turn's last line: what follows belongs to no turn
            turn.put(item)
            return
        if self.info is not None and isinstance(item, bytes) and item.strip():
            try:
                line: Any = _GENERIC.decode(item)
            except msgspec.DecodeError:
                line = None
            self.info(WarmOutput(backend=PROVIDER, pid=self.live.pid, line=line,
                                 size_bytes=len(item)))

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
        if McpServer.is_call(message) and self.turn is not None:
            return False  # the turn task runs it
        with contextlib.suppress(OSError):  # gone: the reader sees the exit next
            self.respond(request_id, {"mcp_response": mcp.answer(message)})
        return True

    def _answered(self, line: Any) -> None:
        response = line.get("response") if isinstance(line, dict) else None
        request_id = response.get("request_id") if isinstance(response, dict) else None
        if not isinstance(request_id, str):
            return
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

    @property
    def live(self) -> LiveProcess | None:
        """The live process, or None."""
        process = self.process
        return None if process is None else process.live

    def acquire(self, spawn: Callable[[], ChildProcess], *, info: Any, idle_timeout_ms: Any,
                settle_s: float, mcp: McpServer | None = None, json_schema: str | None = None,
                ) -> tuple[_ClaudeProcess, _TurnLines]:
        """Wait for the previous turn to settle (killing its process past `settle_s`), start
        a process when none is live (serving `mcp`, the agent's Python tools, if given), and make
        a new turn its owner. Turn task thread.

        `json_schema`: the `--json-schema` the turn needs (`spawn` must pass it). A live
        process started with another one (or with one while the turn needs none) is closed
        first (stdin EOF, waited for up to `settle_s`, so its transcript is complete) and
        replaced; `spawn` resumes the session, so the conversation continues. The CLI sets
        its output schema only at start (`--json-schema`, or `initialize`'s `jsonSchema`,
        which a second `initialize` ignores; checked on 2.1.197), so a change costs one
        process start."""
        process = self._settle_previous(settle_s)
        if process is not None and process.json_schema != json_schema:
            logger.debug("gen_agent claude: another output schema; restarting the process")
            process.live.close()
            if not process.live.wait_exited(settle_s):
                process.live.kill()
                process.live.wait_exited(settle_s)
            with self._cond:
                self.schema_restarts += 1
        with self._cond:
            process = self.process
            if process is None or not process.live.alive:
                process = _ClaudeProcess(self, spawn(), idle_timeout_ms, info, mcp,
                                         json_schema)
                self.processes_started += 1
            lines = _TurnLines(settle_s)
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
            from gen_agent._runtime.timers import TIMERS

            live = process.live
            TIMERS.schedule(lines.grace_s, lambda: live.kill() if lines.writing else None)
        lines.put(_CANCEL)

    def account(self, process: _ClaudeProcess, data: dict[str, Any]) -> None:
        """Turn the result's cumulative `cost_usd` into this turn's delta (never negative),
        with the session's totals beside it (`session_cost_usd`, `session_usage`)."""
        total = data.get("cost_usd")
        delta = 0.0
        if isinstance(total, int | float) and not isinstance(total, bool):
            if total >= process.cost_seen:
                delta = float(total) - process.cost_seen
                process.cost_seen = float(total)
            data["process_cost_usd"] = total
        with self._cond:
            self.cost_usd += delta
            data["cost_usd"] = delta
            data["session_cost_usd"] = self.cost_usd
            data["session_usage"] = dict(self.usage)

    def add_usage(self, usage: dict[str, Any]) -> None:
        """Add one turn's token counts to the session's."""
        with self._cond:
            for key in _USAGE_KEYS:
                value = usage.get(key)
                if isinstance(value, int):
                    self.usage[key] = self.usage.get(key, 0) + value


def _user_line(prompt: str) -> dict[str, Any]:
    return {"type": "user", "message": {"role": "user", "content": prompt},
            "parent_tool_use_id": None, "session_id": "default"}


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
) -> Iterator[Event]:
    """Start (or reuse) the process, send `prompt`, and return the turn's event stream.

    `mcp`: the agent's Python tools, served to a process this turn starts (the command line
    `spawn` runs must declare it). `json_schema`: the turn's `--json-schema` (encoded JSON
    schema, or None; `spawn` must pass it): a live process started with another one is
    replaced first (see `WarmSlot.acquire`).

    Raises:
        DispatchError: the process could not be started, or died before it took the prompt
            twice in a row (a `BackendError`).
    """
    settle_s = interrupt_grace_ms / 1000 + 1.0
    for attempt in (1, 2):
        try:
            process, lines = slot.acquire(spawn, info=context.info_sink,
                                          idle_timeout_ms=idle_timeout_ms, settle_s=settle_s,
                                          mcp=mcp, json_schema=json_schema)
        except BackendError as exc:
            raise DispatchError(exc, exc.message) from None
        lines.writing = True
        try:
            process.live.write_json(_user_line(prompt))
        except OSError:
            # Died between turns (or while taking the prompt): start anew, resuming, once.
            slot.release(process, lines)
            process.live.kill()
            process.live.wait_exited(settle_s)
            if attempt == 2 or context.cancelled:
                reason = BackendError.new(PROVIDER, "cli_exited", None,
                                          message="the claude process exited before it "
                                                  "took the prompt")
                raise DispatchError(reason, reason.message) from None
            continue
        finally:
            lines.writing = False
        lines.started = time.monotonic()  # the CLI runs this turn from here on
        lines.interrupter = functools.partial(process.send_control, {"subtype": "interrupt"})
        if context.cancelled:
            slot.cancel()
        return _events(slot, process, lines, context, interrupt_grace_ms,
                       permission_timeout_ms)
    raise AssertionError("unreachable")


def _events(slot: WarmSlot, process: _ClaudeProcess, lines: _TurnLines, context: TurnContext,
            interrupt_grace_ms: int, permission_timeout_ms: int) -> Iterator[Event]:
    translator = ClaudeStreamTranslator()
    settled = False
    interrupt_requested = False
    try:
        while True:
            item = lines.get()
            if item is _CANCEL:
                return
            if item is _EXIT:
                settled = True
                yield _ended(process, translator, context)
                return
            if isinstance(item, LineTooLong):
                process.live.kill()
                settled = True
                yield translator.error(_line_too_long(item))
                return
            if isinstance(item, dict):
                event, interrupt = _control(process, item, context, permission_timeout_ms)
                if event is not None:
                    yield event
                if interrupt:
                    interrupt_requested = True
                continue
            events = translate_line(translator, item)
            session_id = translator.take_session_id()
            if session_id is not None:
                process.live.child.session_id = session_id  # (see ChildProcess.spawn)
                context.checkpoint(session_id)
            for event in events:
                if event.kind == "usage":
                    slot.add_usage(event.data)
                elif event.kind in ("result", "error"):
                    settled = True
                    slot.account(process, event.data)
                    if interrupt_requested:
                        event = Event("error", {"reason": "interrupted",
                                                "session_id": translator.session_id},
                                      monotonic_ms())
                yield event
                if event.is_terminal:
                    return
    finally:
        if not settled:
            _settle(slot, process, lines, interrupt_grace_ms)
        slot.release(process, lines)


def _control(process: _ClaudeProcess, line: dict[str, Any], context: TurnContext,
             permission_timeout_ms: int) -> tuple[Event | None, bool]:
    """Answer a control request of the CLI during a turn: (the turn's event, interrupt)."""
    if line.get("type") != "control_request":
        return None, False  # control_cancel_request: we answer synchronously; nothing pending
    request_id = line.get("request_id")
    request = line.get("request")
    if not isinstance(request_id, str) or not isinstance(request, dict):
        return None, False
    if request.get("subtype") == "mcp_message" and process.mcp is not None:
        return _mcp_call(process, process.mcp, request_id, request, context,
                         permission_timeout_ms)
    if request.get("subtype") != "can_use_tool":
        process.respond_error(request_id, f"unsupported control request {request.get('subtype')}")
        return None, False
    tool_name = request.get("tool_name")
    tool_input = request.get("input")
    tool_input = tool_input if isinstance(tool_input, dict) else {}
    tool_use_id = request.get("tool_use_id")
    ask = ToolPermissionRequest(
        backend=PROVIDER,
        tool_name=tool_name if isinstance(tool_name, str) else "",
        input=tool_input,
        tool_use_id=tool_use_id if isinstance(tool_use_id, str) else None,
        details={key: request[key] for key in _DETAIL_KEYS if key in request},
    )
    if context.cancelled:
        decision: Allow | Deny = Deny("the turn was interrupted", interrupt=True)
    elif context.handles_permissions:
        decision = context.request_permission(ask, permission_timeout_ms)
    else:
        decision = DENY_FAILED
    if type(decision) is Allow:
        updated = decision.updated_input if decision.updated_input is not None else tool_input
        answer: dict[str, Any] = {"behavior": "allow", "updatedInput": updated}
        name = "allow"
    else:
        assert type(decision) is Deny
        answer = {"behavior": "deny", "message": decision.message}
        if decision.interrupt:
            answer["interrupt"] = True
        name = "deny"
    with contextlib.suppress(OSError):  # the process is gone: the reader routes EXIT next
        process.respond(request_id, answer)
    data = {"tool_name": ask.tool_name, "tool_use_id": ask.tool_use_id, "decision": name}
    interrupt = type(decision) is Deny and decision.interrupt and not context.cancelled
    return Event("permission", data, monotonic_ms()), interrupt


def _mcp_call(process: _ClaudeProcess, mcp: McpServer, request_id: str,
              request: dict[str, Any], context: TurnContext,
              permission_timeout_ms: int) -> tuple[Event | None, bool]:
    """Run one `tools/call` of the agent's Python tools and answer it: (the turn's
    `permission` event when the agent was asked, whether to interrupt the turn)."""
    answer, ask, decision = mcp.call(request.get("message") or {}, context,
                                     permission_timeout_ms=permission_timeout_ms)
    with contextlib.suppress(OSError):  # the process is gone: the reader routes EXIT next
        process.respond(request_id, {"mcp_response": answer})
    if ask is None or decision is None:
        return None, False
    interrupt = type(decision) is Deny and decision.interrupt and not context.cancelled
    if interrupt:
        # A denial that ends the turn: the CLI does not stop for an MCP result by itself.
        with contextlib.suppress(OSError):
            process.send_control({"subtype": "interrupt"})
    data = {"tool_name": ask.tool_name, "tool_use_id": ask.tool_use_id,
            "decision": "allow" if type(decision) is Allow else "deny"}
    return Event("permission", data, monotonic_ms()), interrupt


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
                    process.respond(request_id, _cancelled_answer(item.get("request")))
                except OSError:
                    return True
            return False
        if isinstance(item, bytes) and _line_type(item) == "result":
            try:
                line = _GENERIC.decode(item)
            except msgspec.DecodeError:
                return True
            slot.account(process, {"cost_usd": line.get("total_cost_usd")})
            return True
        return False

    drain_abandoned_turn(process.live, lines, _EXIT, interrupt_grace_ms, settled)


def _cancelled_answer(request: Any) -> dict[str, Any]:
    """The answer to a control request still pending in an abandoned turn: an MCP tool call
    gets an error result ("cancelled"), a permission request a deny that interrupts."""
    mcp = isinstance(request, dict) and request.get("subtype") == "mcp_message"
    message = request.get("message") if mcp else None
    if isinstance(message, dict):
        return {"mcp_response": {
            "jsonrpc": "2.0", "id": message.get("id"),
            "result": {"content": [{"type": "text", "text": "cancelled"}], "isError": True}}}
    return {"behavior": "deny", "interrupt": True, "message": "the turn was interrupted"}

def _ended(process: _ClaudeProcess, translator: ClaudeStreamTranslator,
           context: TurnContext) -> Event:
    live = process.live
    if context.cancelled:
        return translator.error(BackendError.new(PROVIDER, "cancelled", None,
                                                 message="the turn was cancelled"))
    live.wait_exited(5.0)
    tail = live.child.stderr_tail().decode("utf-8", errors="replace")
    event = translator.end_of_stream(live.child.returncode, tail)
    assert event is not None
    return event


def _line_too_long(item: LineTooLong) -> BackendError:
    message = (f"a {PROVIDER} stdout line of {item.size_bytes} bytes exceeds "
               f"max_line_bytes={item.limit_bytes}")
    raw = {"size_bytes": item.size_bytes, "limit_bytes": item.limit_bytes}
    return BackendError.new(PROVIDER, "line_too_long", raw, message=message)
