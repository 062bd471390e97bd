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
  {turn: {id, status, error}}: `item/completed` items (`agentMessage` text,
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
  `{"decision": "accept" | "decline" | "cancel"}` from `handle_tool_permission`.

`AppSlot` is the mutable part of a session (shared by its copies): the live process, its
thread, the turn that owns it.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Final

import msgspec

from gen_agent.backend import BackendError, DispatchError, TurnContext
from gen_agent.backends._codex_stream import usage_since
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
from gen_agent.permission import DENY_FAILED, Allow, Deny, ToolPermissionRequest

__all__ = ["AppSlot", "app_turn"]

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


class _Lines(TurnQueue):
    """The items routed to one turn (messages, EXIT, CANCEL)."""


class _AppProcess:
    def __init__(self, slot: AppSlot, child: ChildProcess, idle_timeout_ms: int | None,
                 info: Callable[[Any], None] | None) -> None:
        self.slot = slot
        self.info = info
        self.turn: _Lines | None = None
        self.thread_id: str | None = None
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._pending: dict[int, list[Any]] = {}
        self.live = LiveProcess(child, provider=PROVIDER, route=self._route,
                                on_exit=self._exited, idle_timeout_ms=idle_timeout_ms)

    def _route(self, item: bytes | LineTooLong) -> None:
        if not isinstance(item, bytes) or not item.strip():
            return
        try:
            message = _DECODE.decode(item)
        except msgspec.DecodeError:
            message = None
        if not isinstance(message, dict):
            self._unsolicited(None, len(item))
            return
        if "method" not in message and "id" in message:
            with self._lock:
                waiter = self._pending.pop(message["id"], None)
            if waiter is not None:
                waiter.append(message)
                waiter[0].set()
            return
        turn = self.turn
        if turn is not None:
            turn.put(message)
        elif "id" in message:
            self.respond_error(message["id"], "no turn is running")
        else:
            self._unsolicited(message, len(item))

    def _unsolicited(self, message: Any, size: int) -> None:
        if self.info is not None:
            self.info(WarmOutput(backend=PROVIDER, pid=self.live.pid, line=message,
                                 size_bytes=size))

    def _exited(self, live: LiveProcess) -> None:
        with self._lock:
            waiters = list(self._pending.values())
            self._pending.clear()
        for waiter in waiters:
            waiter[0].set()
        turn = self.turn
        if turn is not None:
            turn.put(_EXIT)
        elif self.info is not None and not live.close_requested:
            tail = live.child.stderr_tail().decode("utf-8", errors="replace")
            self.info(WarmExited(backend=PROVIDER, pid=live.pid,
                                 exit_code=live.child.returncode, stderr_tail=tail))
        self.slot._process_gone(self)

    def request(self, method: str, params: dict[str, Any], wait_s: float = _REQUEST_S) -> Any:
        """Send a request and wait for its result. Raises BackendError (kind
        `"rpc_error"` with the server's message, or `"cli_exited"`)."""
        request_id = next(self._ids)
        waiter: list[Any] = [threading.Event()]
        with self._lock:
            self._pending[request_id] = waiter
        try:
            self.live.write_json({"id": request_id, "method": method, "params": params})
        except OSError:
            raise _exited_error(method) from None
        if not waiter[0].wait(wait_s) or len(waiter) < 2:
            with self._lock:
                self._pending.pop(request_id, None)
            raise _exited_error(method) if not self.live.alive else BackendError.new(
                PROVIDER, "rpc_timeout", method, message=f"no answer to {method}")
        answer = waiter[1]
        if "error" in answer:
            error = answer["error"]
            text = error.get("message") if isinstance(error, dict) else None
            raise BackendError.new(PROVIDER, "rpc_error", answer,
                                   message=text if isinstance(text, str) else method)
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


class AppSlot(Slot[_AppProcess, _Lines]):
    """The mutable part of a `CodexSession` in app-server mode (the `Slot` bookkeeping of its
    live process). Thread-safe."""

    provider = PROVIDER

    def acquire(self, spawn: Callable[[], ChildProcess], start_thread: Callable[[Any], str],
                *, info: Any, idle_timeout_ms: int | None,
                settle_s: float) -> tuple[_AppProcess, _Lines]:
        """Wait for the previous turn to settle (killing its process past `settle_s`); start
        a process and its thread (`start_thread`) when none is live; make a new turn its
        owner. Turn task thread.

        Raises:
            BackendError: `start_thread` failed (the new process is killed).
        """
        process = self._settle_previous(settle_s)
        lines = _Lines()
        if process is None:
            process = _AppProcess(self, spawn(), idle_timeout_ms, info)
            process.turn = lines  # what the server says while starting belongs to this turn
            try:
                process.thread_id = start_thread(process)
            except BackendError:
                process.live.kill()
                raise
        with self._cond:
            self._own_locked(process, lines)
        return process, lines

    def cancel(self) -> None:
        """Interrupt the running turn (agent thread; quick): its task ends it."""
        with self._cond:
            lines = self._turn
        if lines is not None:
            lines.put(_CANCEL)


def app_turn(slot: AppSlot, prompt: str, context: TurnContext, *,
             spawn: Callable[[], ChildProcess], thread_params: dict[str, Any],
             resume_id: str | None, model: str | None, idle_timeout_ms: int | None,
             interrupt_grace_ms: int, permission_timeout_ms: int,
             output_schema: dict[str, Any] | None = None) -> Iterator[Event]:
    """Start (or reuse) the app-server and its thread, start the turn, return its events.

    `output_schema` (a JSON schema, or None) goes in `turn/start` as `outputSchema`.

    Raises:
        DispatchError: a `BackendError` when the process could not start, the thread could
            not be started or resumed, or `turn/start` failed.
    """
    settle_s = interrupt_grace_ms / 1000 + 1.0

    def start_thread(process: _AppProcess) -> str:
        process.request("initialize", {"clientInfo": {"name": "gen_agent", "version": "1"}})
        process.notify("initialized")
        if resume_id is not None:
            result = process.request("thread/resume", {**thread_params, "threadId": resume_id})
        else:
            result = process.request("thread/start", thread_params)
        thread = result.get("thread") if isinstance(result, dict) else None
        thread_id = thread.get("id") if isinstance(thread, dict) else None
        if not isinstance(thread_id, str) or not thread_id:
            raise BackendError.new(PROVIDER, "rpc_error", result, message="no thread id")
        return thread_id

    try:
        process, lines = slot.acquire(spawn, start_thread, info=context.info_sink,
                                      idle_timeout_ms=idle_timeout_ms, settle_s=settle_s)
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
        result = process.request("turn/start", params)
    except BackendError as exc:
        slot.release(process, lines)
        if exc.kind == "cli_exited":
            process.live.kill()
        raise DispatchError(exc, exc.message) from None
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
    try:
        process.live.child.session_id = thread_id  # (see ChildProcess.spawn)
        context.checkpoint(thread_id)
        while True:
            item = lines.get()
            if item is _CANCEL:
                return
            if item is _EXIT:
                settled = True
                yield _ended(process, thread_id, context)
                return
            method = item.get("method")
            if "id" in item:  # a request of the server: an approval
                event, interrupt = _approval(process, item, context, permission_timeout_ms)
                if event is not None:
                    yield event
                interrupt_requested = interrupt_requested or interrupt
                continue
            params = _dict(item.get("params"))
            if method == "item/completed":
                yield from _item_events(params.get("item"))
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
                yield _terminal(turn, thread_id, model, interrupt_requested)
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
