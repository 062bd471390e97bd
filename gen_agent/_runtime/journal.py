"""The tool journal of one turn of an agent with a store: every tool call journalled as it
happens, and the at-most-once guard of side-effecting Python tools.

`Durable.turn_started` makes one `TurnJournal` per turn; it travels in the `TurnContext`
(`context.journal`). Python tools (the HTTP backends' tool loop, the Claude CLI's in-process
MCP tools) reach it through `run_calls`: `before` journals `started` *before* the tool runs
(and may answer the call itself), `after` journals `finished` once it returned. Tools a
backend runs itself (a CLI's own Bash, Edit..., Codex's commands) are journalled by the turn
task from their events (`observe`): reported, not guarded. Two shapes are read: Claude's
(`tool_use` {id, name, input}, then `tool_result` {tool_use_id, content, is_error}) and
Codex's whole items (`codex.tool_started` when the CLI starts the item, then `tool_use` and
`tool_result` with the completed item: id, type, command / changes / arguments, output,
status, exit code; a backend that never reports the start has it journalled from the
`tool_use`). `usage` events keep
the in-flight marker's usage current (at most every `USAGE_EVERY_S`, and with every
journal write).

The guard: a call id already journalled this turn is never run again (its journalled
result, or "outcome unknown"); in a `resend` of an interrupted turn, a call of the same tool
with the same canonical input as one of its finished calls gets that call's result without
running, and one matching an in-doubt call gets "outcome unknown" unless the tool is
`retry_safe` (it then runs with the original call's idempotency key). A side-effecting
tool whose `started` cannot be written does not run.

Runs in the turn task's thread and the tool threads (a lock guards the entries); every
store failure is reported through the agent's `Durable` (log, telemetry, `Status.store`),
never raised into the turn.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Final

import msgspec

from gen_agent._tools import ToolCall, ToolResult, idempotency_key_of
from gen_agent.store import OUTCOME_UNKNOWN, InFlightTurn, InterruptedTurn, ToolCallEntry

USAGE_EVERY_S: Final = 0.5
"""The most often (seconds) a `usage` event rewrites the in-flight marker's usage."""

RESULT_CHARS: Final = 65_536
"""The longest result text the journal keeps (characters); longer ones are cut, marked."""

_JOURNAL_KINDS: Final = frozenset({"tool_use", "tool_result", "codex.tool_started", "usage"})


def canonical(value: Any) -> bytes:
    """A tool input's canonical form (JSON, keys sorted) for matching calls across turns."""
    try:
        return msgspec.json.encode(value, order="sorted")
    except (TypeError, msgspec.EncodeError, UnicodeEncodeError):
        return repr(value).encode("utf-8", "replace")


def bounded(text: str) -> str:
    """`text` cut to `RESULT_CHARS`, with a note of what was cut."""
    if len(text) <= RESULT_CHARS:
        return text
    return text[:RESULT_CHARS] + f"…[{len(text) - RESULT_CHARS} characters not journalled]"


# A Codex item (`command_execution`, `file_change`, `mcp_tool_call`, `web_search`, or the
# app-server's camelCase types) is a tool event's whole data: its input and output fields.
_ITEM_INPUTS: Final = ("command", "changes", "query")
_ITEM_OUTPUTS: Final = ("aggregated_output", "aggregatedOutput", "output", "result")
_ITEM_FAILED: Final = frozenset({"failed", "declined"})


def _input(data: dict[str, Any]) -> Any:
    """A tool event's input: Claude's `input`; a Codex item's command, changes or query, an
    MCP call's server, tool and arguments."""
    if "input" in data:
        return data["input"]
    if "arguments" in data:
        return {k: data[k] for k in ("server", "tool", "arguments") if k in data}
    for key in _ITEM_INPUTS:
        if key in data:
            return data[key]
    return None


def _output(data: dict[str, Any]) -> str:
    """A tool result's text: Claude's `content`; a Codex item's output (a command's
    aggregated output, an MCP call's result), else its error, else its status."""
    if "content" in data:
        return _text(data["content"])
    for key in _ITEM_OUTPUTS:
        value = data.get(key)
        if value is not None:
            return _text(value)
    for key in ("error", "status"):
        value = data.get(key)
        if value is not None:
            return _text(value)
    return ""


def _failed(data: dict[str, Any]) -> bool:
    """Whether a tool result is an error: Claude's `is_error`; a Codex item that failed or
    was declined, a command with a non-zero exit code, an MCP call with an error."""
    if "is_error" in data or "tool_use_id" in data:
        return bool(data.get("is_error"))
    if data.get("status") in _ITEM_FAILED or data.get("error") is not None:
        return True
    code = data.get("exit_code", data.get("exitCode"))
    return isinstance(code, int) and not isinstance(code, bool) and code != 0


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # a CLI's content blocks
        parts = [b.get("text") for b in content if isinstance(b, dict)]
        if all(isinstance(p, str) for p in parts):
            return "".join(parts)  # type: ignore[arg-type]
    try:
        return msgspec.json.encode(content).decode()
    except (TypeError, msgspec.EncodeError, UnicodeEncodeError):
        return repr(content)


class TurnJournal:
    """The journal of one turn (see the module docstring)."""

    def __init__(self, durable: Any, ref: str, marker: InFlightTurn,
                 python_tools: frozenset[str], prior: InterruptedTurn | None,
                 unknown: str = OUTCOME_UNKNOWN) -> None:
        self._durable = durable
        self._unknown = unknown
        self.ref = ref
        self.marker = marker
        self._python_tools = python_tools
        self._lock = threading.Lock()
        self.entries: dict[str, ToolCallEntry] = {}
        self._keys: dict[str, str] = {}
        self._session = durable.key
        self._usage: dict[str, int] = {}
        self._usage_written: dict[str, int] = {}
        self._usage_at = time.monotonic()
        # A resend's matches: (tool, canonical input) -> the prior calls, oldest first.
        self._finished: dict[tuple[str, bytes], list[ToolCallEntry]] = {}
        self._in_doubt: dict[tuple[str, bytes], list[ToolCallEntry]] = {}
        if prior is not None:
            for entry in prior.finished:
                self._finished.setdefault((entry.tool, canonical(entry.input)), []).append(entry)
            for entry in prior.in_doubt:
                self._in_doubt.setdefault((entry.tool, canonical(entry.input)), []).append(entry)

    @property
    def written(self) -> bool:
        """Whether any entry was journalled (the turn's end then clears them)."""
        return bool(self.entries)

    def snapshot(self) -> list[ToolCallEntry]:
        """The entries journalled so far (a copy; any thread)."""
        with self._lock:
            return list(self.entries.values())

    def idempotency_key(self, call_id: str) -> str:
        """The `ToolContext.idempotency_key` of `call_id` in this turn."""
        key = self._keys.get(call_id)
        return key if key is not None else idempotency_key_of(self._session, self.ref, call_id)

    # ------------------------------------------------------------------ Python tools
    def before(self, call: ToolCall, tool: Any) -> ToolResult | None:
        """Journal `call` as started; None to run it, or the result it gets instead."""
        side_effects = bool(getattr(tool, "side_effects", False))
        with self._lock:
            known = self.entries.get(call.id)
            if known is not None and known.source == "python":
                return self._answer(call, known)
            answered = self._match(call, tool)
            now = time.time()
            if answered is not None:
                # Nothing runs: journalled as finished at once, so a later resend answers
                # it alike.
                entry = ToolCallEntry(ref=self.ref, call_id=call.id, tool=call.name,
                                      input=call.input, started_at=now,
                                      side_effects=side_effects, finished_at=now,
                                      result=answered.content, is_error=answered.is_error)
            else:
                entry = ToolCallEntry(ref=self.ref, call_id=call.id, tool=call.name,
                                      input=call.input, started_at=now,
                                      side_effects=side_effects)
            self.entries[call.id] = entry
        kind = self._write(entry, sync=side_effects and answered is None)
        if answered is not None:
            return answered
        if kind is not None and side_effects:
            return ToolResult(tool_use_id=call.id, is_error=True, content=(
                f"not run: the tool journal could not record this call's start ({kind}), and "
                "a side-effecting tool runs only once its start is recorded"))
        return None

    def _match(self, call: ToolCall, tool: Any) -> ToolResult | None:
        """A resend's answer to `call` from the interrupted turn's journal, or None to run."""
        if not (self._finished or self._in_doubt):
            return None
        key = (call.name, canonical(call.input))
        done = self._finished.get(key)
        if done:
            prior = done.pop(0)
            return ToolResult(tool_use_id=call.id, content=prior.result or "",
                              is_error=prior.is_error)
        doubt = self._in_doubt.get(key)
        if doubt:
            prior = doubt.pop(0)
            if getattr(tool, "retry_safe", False):
                # Runs again, as the same call for the external system.
                self._keys[call.id] = idempotency_key_of(self._session, prior.ref,
                                                         prior.call_id)
                return None
            return ToolResult(tool_use_id=call.id, content=self._unknown, is_error=True)
        return None

    def _answer(self, call: ToolCall, known: ToolCallEntry) -> ToolResult:
        if known.finished_at is None:
            return ToolResult(tool_use_id=call.id, content=self._unknown, is_error=True)
        return ToolResult(tool_use_id=call.id, content=known.result or "",
                          is_error=known.is_error)

    def after(self, call: ToolCall, tool: Any, result: ToolResult) -> None:
        """Journal `call` as finished with `result` (a failure: the call stays in doubt)."""
        with self._lock:
            started = self.entries.get(call.id)
            if started is None or started.finished_at is not None:
                return
            entry = msgspec.structs.replace(started, finished_at=time.time(),
                                            result=bounded(result.content),
                                            is_error=result.is_error)
            self.entries[call.id] = entry
        self._write(entry, sync=False)

    # ------------------------------------------------------------------ events
    def observe(self, event: Any) -> None:
        """Journal a backend-run tool from its events; keep the marker's usage current."""
        kind = event.kind
        if kind not in _JOURNAL_KINDS:
            return
        data = event.data
        if kind == "usage":
            self._usage = {k: v for k, v in data.items()
                           if isinstance(v, int) and not isinstance(v, bool)}
            if time.monotonic() - self._usage_at >= USAGE_EVERY_S:
                self._write_marker()
            return
        if kind != "tool_result":  # tool_use, codex.tool_started: the call started
            name = data.get("name", data.get("type"))
            call_id = data.get("id")
            if not isinstance(name, str) or not isinstance(call_id, str):
                return
            if name in self._python_tools or name.rsplit("__", 1)[-1] in self._python_tools:
                return  # a Python tool: `before` journals it
            with self._lock:
                if call_id in self.entries:
                    return
                entry = ToolCallEntry(ref=self.ref, call_id=call_id, tool=name,
                                      input=_input(data), started_at=time.time(),
                                      source="event")
                self.entries[call_id] = entry
            self._write(entry, sync=False)
            return
        call_id = data.get("tool_use_id", data.get("id"))
        with self._lock:
            started = self.entries.get(call_id) if isinstance(call_id, str) else None
            if started is None or started.source != "event" or started.finished_at is not None:
                return
            entry = msgspec.structs.replace(
                started, finished_at=time.time(), result=bounded(_output(data)),
                is_error=_failed(data))
            self.entries[started.call_id] = entry
        self._write(entry, sync=False)

    # ------------------------------------------------------------------ writes
    def usage_marker(self) -> InFlightTurn | None:
        """The marker with the usage so far, when it changed since the last write."""
        if self._usage == self._usage_written:
            return None
        self.marker = msgspec.structs.replace(self.marker, usage=dict(self._usage))
        self._usage_written = dict(self._usage)
        self._usage_at = time.monotonic()
        return self.marker

    def _write_marker(self) -> None:
        marker = self.usage_marker()
        if marker is not None:
            self._durable.write_marker(marker)

    def _write(self, entry: ToolCallEntry, *, sync: bool) -> str | None:
        return self._durable.write_entry(entry, self.usage_marker(), sync=sync)


def observed_kinds() -> frozenset[str]:
    """The event kinds `TurnJournal.observe` acts on."""
    return _JOURNAL_KINDS


__all__ = ["TurnJournal", "bounded", "canonical", "observed_kinds"]
