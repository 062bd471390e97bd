"""Codex persistent mode: one `codex app-server` process per agent session, over JSON-RPC.

The protocol (`codex app-server generate-json-schema` prints it; a real session is recorded in
`tests/fixtures/codex-cli/app_server/two_turns.jsonl`): one JSON object per line on stdin and
stdout. We send requests `{"id", "method", "params"}` and the `initialized` notification; the
server answers `{"id", "result"}` or `{"id", "error"}`, sends notifications `{"method",
"params"}` and asks us requests of its own (approvals).

- start: `initialize` {clientInfo}, then `initialized`; `thread/start` {cwd, model,
  approvalPolicy, sandbox} or `thread/resume` {threadId}: the result's `thread.id`;
- a turn: `turn/start` {threadId, input: [{type: "text", text}], outputSchema?} (result:
  `turn.id`; `outputSchema` is the JSON schema of a structured reply, which the CLI sends
  as the Responses API's strict `text.format`), then notifications until `turn/completed`
  {turn: {id, status, error}}: `item/started` of a tool (`codex.tool_started`, the whole
  item: the tool journal's `started`), `item/completed` items (`agentMessage` text,
  `commandExecution` / `fileChange` / `mcpToolCall` tools), `thread/tokenUsage/updated`
  {tokenUsage: {last, total}} after every model request: `last` is that request's usage
  and `total` the thread's (real CLI 0.171: a turn of two requests, 12/5 and 30/3 tokens,
  reported last 12/5 total 12/5, then last 30/3 total 42/8). A turn's usage is therefore
  the last `total` minus the thread's total before the turn (the first notification's
  `total - last`), which needs no state kept across turns or processes;
- interrupt: `turn/interrupt` {threadId, turnId}; the turn then completes with status
  `interrupted`;
- approvals: the server requests `item/commandExecution/requestApproval` {command, cwd,
  reason, itemId} and `item/fileChange/requestApproval` {reason, itemId}; we answer
  `{"decision": "accept" | "decline" | "cancel"}` from `handle_tool_permission`;
- errors (JSON-RPC `{"id", "error": {"code", "message", "data"?}}`): `-32001` "Server
  overloaded; retry later." is backpressure, to retry later (codex-rs/app-server
  `error_code.rs` OVERLOADED_ERROR_CODE, and its README): `BackendError` kind
  `"server_error"`, retryable, never retried here; `thread/resume` of a thread whose
  rollout is gone answers `-32600` "no rollout found for thread id ..." (recorded:
  tests/fixtures/codex-cli/app_server/missing_rollout.jsonl): `"session_not_found"`, after
  which the agent forgets the thread. Any other error is `"rpc_error"`.

Notifications name their turn (`params.turnId`, or `params.turn.id`): once `turn/start` said
which turn is ours, a notification of another turn is not ours; each such turn becomes one
`UnrequestedTurn` record for `handle_info` when it completes, never part of a caller's
answer. A line that is not JSON is kept for the turn's diagnostics (`stdout_tail`).

`AppSlot` is the mutable part of a session (shared by its copies): the live process, its
thread, the turn that owns it. Pre-warm, replacement and spares (`AppPrewarmer`, the
machinery in `gen_agent.backends._subprocess.warm_fleet`): what runs before the first turn
is the process start, `initialize`/`initialized` and `thread/start` (a new session) or
`thread/resume`; a ready process has a thread. `thread/start` creates nothing visible until
a turn runs (real CLI 0.171, measured: no rollout file, not in `thread/list`, not
resumable; only a writer lock under `$CODEX_HOME/thread-writer-locks/`, removed when the
process exits), so an unused spare leaves no thread behind.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Final

import msgspec

from gen_agent._event import Event, monotonic_ms
from gen_agent._permission import DENY_FAILED, Allow, Deny, ToolPermissionRequest
from gen_agent._response import TextAccumulator
from gen_agent.backend import BackendError, DispatchError, TurnContext
from gen_agent.backends._subprocess.codex_stream import THREAD_NOT_FOUND, usage_since
from gen_agent.backends._subprocess.jsonl import OutputTail, repair_surrogates
from gen_agent.backends._subprocess.process import ChildProcess, LineTooLong
from gen_agent.backends._subprocess.warm_fleet import (
    START_WAIT_S,
    Prewarmer,
    PrewarmSlot,
    SpareSlot,
    WarmFleet,
    spawn_key,
)
from gen_agent.backends.warm import (
    LiveProcess,
    TurnQueue,
    UnrequestedLines,
    WarmExited,
    WarmOutput,
    drain_abandoned_turn,
    with_process,
)

__all__ = ["AppPrewarmer", "AppSlot", "app_turn", "start_thread"]

PROVIDER: Final = "codex"
_CANCEL = object()
_EXIT = object()
_TOOL_ITEMS: Final = frozenset({"commandExecution", "fileChange", "mcpToolCall", "webSearch"})
_APPROVALS: Final = {
    "item/commandExecution/requestApproval": "commandExecution",
    "item/fileChange/requestApproval": "fileChange",
}
_INPUT_KEYS: Final = ("command", "cwd", "reason", "grantRoot")
_DECODE: Final = msgspec.json.Decoder()
_REQUEST_S: Final = 60.0
OVERLOADED: Final = -32001
"""The app-server's JSON-RPC error code for "Server overloaded; retry later." (codex-rs
app-server `OVERLOADED_ERROR_CODE`)."""
_MAX_OTHER_TURNS: Final = 16  # turns of no asked prompt followed at once (bounded memory)


class _Lines(TurnQueue):
    """The items routed to one turn (messages, EXIT, CANCEL, LineTooLong, a surrogate
    repair count), the turn's id once `turn/start` said it, and its stdout lines that were
    not JSON (`plain`)."""

    __slots__ = ("plain", "turn_id")

    def __init__(self, tail_bytes: int = 64 * 1024) -> None:
        super().__init__()
        self.plain = OutputTail(tail_bytes)
        self.turn_id: Any = None


class _Replaced:
    """Routed before a message whose escaped lone surrogates were read as U+FFFD."""

    __slots__ = ("count", "size_bytes")

    def __init__(self, count: int, size_bytes: int) -> None:
        self.count, self.size_bytes = count, size_bytes


class _Waiter:
    __slots__ = ("answer", "event", "method", "turn")

    def __init__(self, method: str, turn: _Lines | None) -> None:
        self.event = threading.Event()
        self.method = method
        self.turn = turn  # `turn/start`: the turn its answer names
        self.answer: Any = None


class _AppProcess:
    def __init__(self, slot: AppSlot, child: ChildProcess, idle_timeout_ms: int | None,
                 info: Callable[[Any], None] | None, tail_bytes: int = 64 * 1024) -> None:
        self.slot = slot
        self.info = info
        self.tail_bytes = tail_bytes
        self.turn: _Lines | None = None
        self.thread_id: str | None = None
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._pending: dict[int, _Waiter] = {}
        self._others: dict[Any, UnrequestedLines] = {}  # turns of no asked prompt, by id
        self.ready = threading.Event()  # answered `initialize` and started its thread
        # No turn has owned it yet: what it prints with no turn is the start's (e.g. the
        # `thread/started` notification), dropped as a first turn's queue drops it.
        self.fresh = True
        self.live = LiveProcess(child, provider=PROVIDER, route=self._route,
                                on_exit=self._exited, idle_timeout_ms=idle_timeout_ms)

    def _route(self, item: bytes | LineTooLong) -> None:
        turn = self.turn
        if not isinstance(item, bytes):
            if turn is not None:
                turn.put(item)  # a line over max_line_bytes fails the turn
            return
        if not item.strip():
            return
        repaired, count = 0, 0
        try:
            message = _DECODE.decode(item)
        except msgspec.DecodeError:
            fixed, count = repair_surrogates(item)
            try:
                message = _DECODE.decode(fixed) if count else None
            except msgspec.DecodeError:
                message = None
            repaired = count
        if not isinstance(message, dict):
            if turn is not None:
                turn.plain.add(item)
            self._unsolicited(None, len(item))
            return
        if "method" not in message and "id" in message:
            with self._lock:
                waiter = self._pending.pop(message["id"], None)
            if waiter is not None:
                waiter.answer = message
                if waiter.turn is not None:  # our turn's id, before its notifications
                    result = _dict(message.get("result"))
                    waiter.turn.turn_id = _dict(result.get("turn")).get("id")
                waiter.event.set()
            return
        params = _dict(message.get("params"))
        other = turn is None or not _ours(turn, params)
        if other and "id" not in message:
            self._other_turn(message, params, len(item))
        elif other:
            self.respond_error(message["id"], "no turn of the agent is running")
        else:
            assert turn is not None
            if repaired:
                turn.put(_Replaced(repaired, len(item)))
            turn.put(message)

    def _other_turn(self, message: dict[str, Any], params: dict[str, Any], size: int) -> None:
        """A notification of no asked turn: part of another turn's record when it names one,
        else a `WarmOutput` of its own."""
        turn_id = _turn_id(params)
        if turn_id is None:
            self._unsolicited(message, size)
            return
        lines = self._others.get(turn_id)
        if lines is None:
            if len(self._others) >= _MAX_OTHER_TURNS:
                self._others.pop(next(iter(self._others)))
            lines = self._others[turn_id] = UnrequestedLines(self.tail_bytes, str(turn_id))
        item = _dict(params.get("item"))
        text = item.get("text") if (message.get("method") == "item/completed"
                                    and item.get("type") == "agentMessage") else None
        lines.add(size, session_id=params.get("threadId"), text=text)
        if message.get("method") != "turn/completed":
            return
        del self._others[turn_id]
        turn = _dict(params.get("turn"))
        self._tell(lines.record(PROVIDER, self.live.pid,
                                is_error=turn.get("status") not in ("completed", None)))

    def _unsolicited(self, message: Any, size: int) -> None:
        if self.fresh:
            return
        self._tell(WarmOutput(backend=PROVIDER, pid=self.live.pid, line=message,
                              size_bytes=size))

    def _tell(self, message: Any) -> None:
        if self.info is not None:
            self.info(message)

    def _exited(self, live: LiveProcess) -> None:
        with self._lock:
            waiters = list(self._pending.values())
            self._pending.clear()
        for waiter in waiters:
            waiter.event.set()
        others, self._others = list(self._others.values()), {}
        for lines in others:  # turns of their own, cut off
            self._tell(lines.record(PROVIDER, live.pid, complete=False))
        turn = self.turn
        if turn is not None:
            turn.put(_EXIT)
        elif self.info is not None and not live.close_requested:
            tail = live.child.stderr_tail().decode("utf-8", errors="replace")
            self.info(WarmExited(backend=PROVIDER, pid=live.pid,
                                 exit_code=live.child.returncode, stderr_tail=tail))
        self.slot._process_gone(self)

    def request(self, method: str, params: dict[str, Any], wait_s: float = _REQUEST_S,
                *, turn: _Lines | None = None) -> Any:
        """Send a request and wait for its result (`turn`: the turn a `turn/start` starts,
        told its id as the answer is read).

        Raises:
            BackendError: kind `"server_error"` (retryable) for the server's overload
                answer (`OVERLOADED`), `"rpc_error"` with the server's message for another
                error answer, `"rpc_timeout"`, or `"cli_exited"`.
        """
        request_id = next(self._ids)
        waiter = _Waiter(method, turn)
        with self._lock:
            self._pending[request_id] = waiter
        try:
            self.live.write_json({"id": request_id, "method": method, "params": params})
        except OSError:
            raise _exited_error(method) from None
        if not waiter.event.wait(wait_s) or waiter.answer is None:
            with self._lock:
                self._pending.pop(request_id, None)
            raise _exited_error(method) if not self.live.alive else BackendError.new(
                PROVIDER, "rpc_timeout", method, message=f"no answer to {method}")
        answer = waiter.answer
        if "error" in answer:
            raise rpc_error(method, answer)
        return answer.get("result")

    def notify(self, method: str) -> None:
        self.live.write_json({"method": method})

    def respond(self, request_id: Any, result: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):  # gone: the reader routes EXIT
            self.live.write_json({"id": request_id, "result": result})

    def respond_error(self, request_id: Any, message: str) -> None:
        with contextlib.suppress(OSError):
            self.live.write_json({"id": request_id,
                                  "error": {"code": -32601, "message": message}})


def _exited_error(method: str) -> BackendError:
    return BackendError.new(PROVIDER, "cli_exited", method,
                            message=f"codex app-server exited before answering {method}")


def rpc_error(method: str, answer: dict[str, Any]) -> BackendError:
    """The `BackendError` of an error answer to `method` (the one mapping for JSON-RPC
    errors): the overload code is `"server_error"`, retryable, with the server's retry hint
    as `retry_after` when its `data` gives one (`retryAfterMs`, or `retryAfter` in
    seconds; codex 0.171 gives none); anything else `"rpc_error"`."""
    error = _dict(answer.get("error"))
    text = error.get("message")
    message = text if isinstance(text, str) else method
    if error.get("code") == OVERLOADED:
        return BackendError.new(PROVIDER, "server_error", answer, retryable=True,
                                retry_after=_retry_hint(error.get("data")), message=message)
    return BackendError.new(PROVIDER, "rpc_error", answer, message=message)


def _retry_hint(data: Any) -> str | None:
    if not isinstance(data, dict):
        return None
    for key, scale in (("retryAfterMs", 1000), ("retryAfter", 1)):
        value = data.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            seconds = value / scale
            return str(int(seconds)) if float(seconds).is_integer() else str(seconds)
    return None


def _turn_id(params: dict[str, Any]) -> Any:
    """The turn a notification names (`turnId`, else `turn.id`), or None."""
    turn_id = params.get("turnId")
    return turn_id if turn_id is not None else _dict(params.get("turn")).get("id")


def _ours(lines: _Lines, params: dict[str, Any]) -> bool:
    """Whether a message belongs to the running turn: it names none, our id is not known
    yet, or it names ours."""
    turn_id = _turn_id(params)
    return turn_id is None or lines.turn_id is None or turn_id == lines.turn_id


class AppSlot(PrewarmSlot[_AppProcess, _Lines]):
    """The mutable part of a `CodexSession` in app-server mode (the `Slot` bookkeeping of its
    live process; `prewarm`, an `AppPrewarmer` or None, starts one without a turn).
    Thread-safe."""

    provider = PROVIDER

    def acquire(self, spawn: Callable[[], ChildProcess], start_thread: Callable[[Any], str],
                *, info: Any, idle_timeout_ms: int | None, settle_s: float,
                tail_bytes: int = 64 * 1024, resume_id: str | None = None,
                ) -> tuple[_AppProcess, _Lines]:
        """Wait for the previous turn to settle (killing its process past `settle_s`); start
        a process and its thread (`start_thread`) when none is live; make a new turn its
        owner. A pre-warm in flight is waited for first; a live process on another thread
        than `resume_id` (when given) is closed first. Turn task thread.

        Raises:
            BackendError: `start_thread` failed (the new process is killed; the error has
                its diagnostics: exit status, stderr tail, the thread it resumed).
        """
        starting = self.starting
        if starting is not None:
            starting.wait(START_WAIT_S)
        process = self._settle_previous(settle_s)
        if process is not None and resume_id is not None and process.thread_id != resume_id:
            process.live.end(settle_s)
        lines = _Lines(tail_bytes)
        with self._cond:
            self._cond.wait_for(lambda: self.starting is None, START_WAIT_S)  # (a replacement)
            process = self.process
            if process is None or not process.live.alive:
                process = None
                self._turn = lines  # claimed while it starts: no pre-warm starts another
        if process is None:
            try:
                process = _AppProcess(self, spawn(), idle_timeout_ms, info, tail_bytes)
            except BaseException:
                self._unclaim(lines)
                raise
            process.turn = lines  # what the server says while starting belongs to this turn
            try:
                process.thread_id = start_thread(process)
            except BaseException as exc:
                self._unclaim(lines)
                process.live.kill()
                process.live.wait_exited(settle_s)
                if not isinstance(exc, BackendError):
                    raise
                raise with_process(exc, process.live.child, lines.plain, "",
                                   resume_id) from None
            process.ready.set()
        with self._cond:
            self._own_locked(process, lines)
        process.fresh = False
        return process, lines

    def _unclaim(self, lines: _Lines) -> None:
        with self._cond:
            if self._turn is lines:
                self._turn = None
            self._cond.notify_all()

    def cancel(self) -> None:
        """Interrupt the running turn (agent thread; quick): its task ends it."""
        with self._cond:
            lines = self._turn
        if lines is not None:
            lines.put(_CANCEL)


def start_thread(process: _AppProcess, thread_params: dict[str, Any],
                 resume_id: str | None) -> str:
    """`initialize`, `initialized`, then `thread/start` (`resume_id` None) or `thread/resume`
    on a new process; returns the thread id.

    Raises:
        BackendError: as `_AppProcess.request`; `"session_not_found"` for a thread whose
            rollout is gone; `"rpc_error"` for an answer without a thread id.
    """
    process.request("initialize", {"clientInfo": {"name": "gen_agent", "version": "1"}})
    process.notify("initialized")
    if resume_id is not None:
        try:
            result = process.request("thread/resume", {**thread_params, "threadId": resume_id})
        except BackendError as exc:
            if exc.kind == "rpc_error" and THREAD_NOT_FOUND.search(exc.message or ""):
                raise BackendError.new(
                    PROVIDER, "session_not_found", exc.raw,
                    message=f"codex has no thread {resume_id!r} to resume") from None
            raise
    else:
        result = process.request("thread/start", thread_params)
    thread = result.get("thread") if isinstance(result, dict) else None
    thread_id = thread.get("id") if isinstance(thread, dict) else None
    if not isinstance(thread_id, str) or not thread_id:
        raise BackendError.new(PROVIDER, "rpc_error", result, message="no thread id")
    return thread_id


class AppPrewarmer(Prewarmer):
    """How one app-server session starts its process without a turn (the process start,
    `initialize`, and `thread/start` or `thread/resume`); built by
    `CodexCLI.prewarm_session`.

    Args:
        spec: `spec(thread_id)` -> the `ChildProcess.spawn` keyword arguments of a process
            for that thread (None: a new one), `owner` excluded.
        thread_params: the `thread/start` / `thread/resume` parameters (part of a spare's
            key: a spare's thread was started with them).
        info: the agent's `handle_info` sink.
        idle_timeout_ms, tail_bytes: as `AppSlot.acquire` takes them.
        fleet: a `WarmFleet` to take a spare from (new sessions only), or None.
    """

    provider = PROVIDER

    def __init__(self, spec: Callable[[str | None], dict[str, Any]],
                 thread_params: dict[str, Any], info: Callable[[Any], None] | None, *,
                 idle_timeout_ms: int | None, tail_bytes: int,
                 fleet: WarmFleet | None = None) -> None:
        super().__init__(info, idle_timeout_ms=idle_timeout_ms, tail_bytes=tail_bytes,
                         fleet=fleet)
        self.spec = spec
        self.thread_params = thread_params

    def new_process(self, slot: Any, session_id: str | None, info: Any) -> _AppProcess:
        child = ChildProcess.spawn(**self.spec(session_id), owner=slot)
        process = _AppProcess(slot, child, self.idle_timeout_ms, info, self.tail_bytes)
        process.turn = _Lines(self.tail_bytes)  # what it says while starting: dropped
        try:
            process.thread_id = start_thread(process, self.thread_params, session_id)
        except BaseException:
            process.live.kill()
            process.live.wait_exited(5.0)
            raise
        process.turn = None
        process.ready.set()
        return process

    def spare_slot(self) -> _SpareAppSlot:
        return _SpareAppSlot()

    def key(self) -> bytes:
        return spawn_key(self.spec(None), self, thread=sorted(self.thread_params.items()))

    def resume_of(self, dead: _AppProcess) -> str | None:
        # The thread a turn ran on (`_events` names it), else the one it was started to
        # resume; a thread started and never used has no rollout: a new one then.
        return dead.live.child.session_id


class _SpareAppSlot(SpareSlot[_AppProcess, _Lines], AppSlot):
    """The placeholder slot of a spare app-server until a session takes it."""


def app_turn(slot: AppSlot, prompt: str, context: TurnContext, *,
             spawn: Callable[[], ChildProcess], thread_params: dict[str, Any],
             resume_id: str | None, model: str | None, idle_timeout_ms: int | None,
             interrupt_grace_ms: int, permission_timeout_ms: int,
             output_schema: dict[str, Any] | None = None,
             tail_bytes: int = 64 * 1024) -> Iterator[Event]:
    """Start (or reuse) the app-server and its thread, start the turn, return its events.

    `output_schema` (a JSON schema, or None) goes in `turn/start` as `outputSchema`;
    `tail_bytes` bounds the diagnostics' `stdout_tail` (bytes).

    Raises:
        DispatchError: a `BackendError` when the process could not start, the thread could
            not be started or resumed (`"session_not_found"` for a thread whose rollout is
            gone), the server is overloaded (`"server_error"`, retryable), or `turn/start`
            failed; with the diagnostics known then.
    """
    settle_s = interrupt_grace_ms / 1000 + 1.0
    try:
        process, lines = slot.acquire(
            spawn, lambda process: start_thread(process, thread_params, resume_id),
            info=context.info_sink, idle_timeout_ms=idle_timeout_ms, settle_s=settle_s,
            tail_bytes=tail_bytes, resume_id=resume_id)
    except BackendError as exc:
        raise DispatchError(exc, exc.message) from None
    thread_id = process.thread_id
    assert thread_id is not None
    params: dict[str, Any] = {"threadId": thread_id,
                              "input": [{"type": "text", "text": prompt}]}
    if model is not None:
        params["model"] = model
    if output_schema is not None:
        params["outputSchema"] = output_schema
    try:
        result = process.request("turn/start", params, turn=lines)
    except BackendError as exc:
        slot.release(process, lines)
        if exc.kind == "cli_exited":
            process.live.kill()
            process.live.wait_exited(settle_s)
        reason = with_process(exc, process.live.child, None if lines is None else lines.plain, "",
                              thread_id)
        raise DispatchError(reason, reason.message) from None
    except BaseException:
        slot.release(process, lines)  # never a process left claimed by a failed turn
        raise
    turn = result.get("turn") if isinstance(result, dict) else None
    turn_id = turn.get("id") if isinstance(turn, dict) else None
    lines.started = time.monotonic()  # the CLI runs this turn from here on
    if turn_id is not None:
        lines.interrupter = lambda: process.live.write_json(
            {"id": -1, "method": "turn/interrupt",
             "params": {"threadId": thread_id, "turnId": turn_id}})
    return _events(slot, process, lines, context, thread_id, turn_id, model,
                   interrupt_grace_ms, permission_timeout_ms)


def _events(slot: AppSlot, process: _AppProcess, lines: _Lines, context: TurnContext,
            thread_id: str, turn_id: Any, model: str | None, interrupt_grace_ms: int,
            permission_timeout_ms: int) -> Iterator[Event]:
    settled = False
    usage: dict[str, Any] | None = None
    before: dict[str, Any] | None = None  # the thread's totals before this turn
    interrupt_requested = False
    text = TextAccumulator()

    def diagnosed(event: Event) -> Event:
        reason = event.data.get("reason")
        if not isinstance(reason, BackendError):
            return event
        reason = with_process(reason, process.live.child,
                              None if lines is None else lines.plain, text.assembled(), thread_id)
        return Event(event.kind, {**event.data, "reason": reason}, event.timestamp)

    try:
        process.live.child.session_id = thread_id  # (see ChildProcess.spawn)
        context.checkpoint(thread_id)
        while True:
            item = lines.get()
            if item is _CANCEL:
                return
            if item is _EXIT:
                settled = True
                yield diagnosed(_ended(process, thread_id, context))
                return
            if isinstance(item, LineTooLong):
                process.live.kill()
                settled = True
                message = (f"a {PROVIDER} stdout line of {item.size_bytes} bytes exceeds "
                           f"max_line_bytes={item.limit_bytes}")
                raw = {"size_bytes": item.size_bytes, "limit_bytes": item.limit_bytes}
                reason = BackendError.new(PROVIDER, "line_too_long", raw, message=message)
                yield diagnosed(Event("error", {"reason": reason, "session_id": thread_id},
                                      monotonic_ms()))
                return
            if isinstance(item, _Replaced):
                yield Event("codex.surrogates_replaced",
                            {"count": item.count, "size_bytes": item.size_bytes},
                            monotonic_ms())
                continue
            method = item.get("method")
            if "id" in item:  # a request of the server: an approval
                event, interrupt = _approval(process, item, context, permission_timeout_ms)
                if event is not None:
                    yield event
                interrupt_requested = interrupt_requested or interrupt
                continue
            params = _dict(item.get("params"))
            if method == "item/completed":
                for event in _item_events(params.get("item")):
                    if event.kind == "text":
                        text.add(event.data)
                    yield event
            elif method == "item/started":
                started = params.get("item")
                if isinstance(started, dict) and started.get("type") in _TOOL_ITEMS:
                    yield Event("codex.tool_started", dict(started), monotonic_ms())
            elif method == "thread/tokenUsage/updated":
                token_usage = _dict(params.get("tokenUsage"))
                last, total = _usage(_dict(token_usage.get("last"))), _usage(
                    _dict(token_usage.get("total")))
                if before is None and total and last:
                    before = {key: total[key] - last.get(key, 0) for key in total}
                if total and before is not None:
                    usage = usage_since(total, before)
                elif last:
                    usage = last
            elif method == "error":
                yield Event("codex.error", dict(params), monotonic_ms())
            elif method == "turn/completed":
                turn = _dict(params.get("turn"))
                if turn_id is not None and turn.get("id") not in (turn_id, None):
                    continue
                settled = True
                if usage is not None:
                    yield Event("usage", usage, monotonic_ms())
                yield diagnosed(_terminal(turn, thread_id, model, interrupt_requested))
                return
    finally:
        if not settled:
            _settle(process, lines, thread_id, turn_id, interrupt_grace_ms)
        slot.release(process, lines)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _usage(last: dict[str, Any]) -> dict[str, Any]:
    names = {"inputTokens": "input_tokens", "outputTokens": "output_tokens",
             "cachedInputTokens": "cached_input_tokens",
             "cacheWriteInputTokens": "cache_write_input_tokens",
             "reasoningOutputTokens": "reasoning_output_tokens"}
    return {target: last[source] for source, target in names.items()
            if isinstance(last.get(source), int)}


def _item_events(item: Any) -> list[Event]:
    if not isinstance(item, dict):
        return []
    kind = item.get("type")
    now = monotonic_ms()
    if kind == "agentMessage":
        text = item.get("text")
        if isinstance(text, str) and text:
            return [Event("text", {"text": text, "message_boundary": True,
                                   "item_id": item.get("id")}, now)]
        return []
    if kind in _TOOL_ITEMS:
        return [Event("tool_use", dict(item), now), Event("tool_result", dict(item), now)]
    if kind == "userMessage":
        return []
    return [Event("codex.item", dict(item), now)]


def _terminal(turn: dict[str, Any], thread_id: str, model: str | None,
              interrupted: bool) -> Event:
    status = turn.get("status")
    now = monotonic_ms()
    if interrupted:
        return Event("error", {"reason": "interrupted", "session_id": thread_id}, now)
    if status == "completed":
        return Event("result", {"session_id": thread_id, "model": model,
                                "provider": PROVIDER, "raw": turn}, now)
    error = turn.get("error")
    text = error.get("message") if isinstance(error, dict) else None
    reason = BackendError.new(PROVIDER, "turn_failed" if status == "failed" else
                              f"turn_{status}", turn,
                              message=text if isinstance(text, str) else None)
    return Event("error", {"reason": reason, "session_id": thread_id, "model": model,
                           "provider": PROVIDER}, now)


def _approval(process: _AppProcess, message: dict[str, Any], context: TurnContext,
              permission_timeout_ms: int) -> tuple[Event | None, bool]:
    method = message.get("method")
    tool = _APPROVALS.get(method) if isinstance(method, str) else None
    if tool is None:
        process.respond_error(message["id"], f"unsupported request {method}")
        return None, False
    params = _dict(message.get("params"))
    tool_input: dict[str, Any] = {key: params[key] for key in _INPUT_KEYS if key in params}
    item_id = params.get("itemId")
    ask = ToolPermissionRequest(backend=PROVIDER, tool_name=tool, input=tool_input,
                                tool_use_id=item_id if isinstance(item_id, str) else None,
                                details={k: v for k, v in params.items()
                                         if k not in tool_input})
    if context.cancelled:
        decision: Allow | Deny = Deny("the turn was interrupted", interrupt=True)
    elif context.handles_permissions:
        decision = context.request_permission(ask, permission_timeout_ms)
    else:
        decision = DENY_FAILED
    allowed = type(decision) is Allow
    interrupt = not allowed and decision.interrupt  # type: ignore[union-attr]
    process.respond(message["id"], {"decision": "accept" if allowed else
                                    ("cancel" if interrupt else "decline")})
    data = {"tool_name": tool, "tool_use_id": ask.tool_use_id,
            "decision": "allow" if allowed else "deny"}
    return Event("permission", data, monotonic_ms()), interrupt and not context.cancelled


def _settle(process: _AppProcess, lines: _Lines, thread_id: str, turn_id: Any,
            interrupt_grace_ms: int) -> None:
    """An abandoned turn: `turn/interrupt`, then drain to its `turn/completed`; past the
    grace, kill the process (the next turn resumes the thread on a new one)."""
    if turn_id is not None and not lines.interrupt_once():  # (a stop may have sent it)
        return

    def settled(item: Any) -> bool:
        if isinstance(item, dict):
            if "id" in item and "method" in item:
                process.respond(item["id"], {"decision": "cancel"})
            elif item.get("method") == "turn/completed":
                return True
        return False

    drain_abandoned_turn(process.live, lines, _EXIT, interrupt_grace_ms, settled)


def _ended(process: _AppProcess, thread_id: str, context: TurnContext) -> Event:
    live = process.live
    if context.cancelled:
        reason = BackendError.new(PROVIDER, "cancelled", None, message="the turn was cancelled")
    else:
        live.wait_exited(5.0)
        tail = live.child.stderr_tail().decode("utf-8", errors="replace")
        raw = {"exit_code": live.child.returncode, "stderr_tail": tail}
        reason = BackendError.new(PROVIDER, "no_result", raw,
                                  message=f"codex app-server exited ({live.child.returncode}) "
                                          "before the turn completed")
    return Event("error", {"reason": reason, "session_id": thread_id}, monotonic_ms())
