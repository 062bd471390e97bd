"""Tools written as plain Python functions: the schema from the signature, the description from
the docstring, the result from the return value.

    @tool
    def read_file(path: str, max_bytes: int = 10_000) -> str:
        \"\"\"Read a text file of the workspace.

        Args:
            path: the file, relative to the workspace.
            max_bytes: read at most this many bytes.
        \"\"\"
        return Path(path).read_text()[:max_bytes]

An agent offers tools in its backend options (`"tools": [read_file, ...]` for `MockBackend`
scripts; the HTTP backends' tool loop and the Claude CLI's in-process MCP channel take the
same objects). What the model sends is validated against the signature (msgspec) before the
function runs; a call that does not validate, a function that raises or one that outlives its
`timeout_s` becomes an *error result* for the model (its message is never logged), never a
failure of the turn or the agent.

- `tool(fn)` / `@tool(name=..., timeout_s=...)`: a `Tool` from a function or callable object.
  A parameter annotated `ToolContext` is not part of the schema: it receives the call's
  context (its id, the agent's name, and a `cancelled` event set when the turn is
  interrupted or times out, so a long tool can stop early).
- `run_calls(tools, calls, ...)`: run a step's calls in parallel, each on its own thread,
  bounded by its timeout and the turn's cancellation; returns one `ToolResult` per call, in
  order.

Mirrors: nothing in the Elixir original; the function tools of pydantic-ai and openai-agents,
and the in-process tools of claude-agent-sdk (`@tool`).
"""

from __future__ import annotations

import hashlib
import inspect
import math
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, get_type_hints

import msgspec

__all__ = [
    "AgentCall",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolInterrupted",
    "ToolRefused",
    "ToolResult",
    "as_tools",
    "permission_check",
    "run_calls",
    "tool",
]

DEFAULT_TIMEOUT_S = 60.0
"""Seconds a tool call may run before it fails with a timeout error result."""

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """One call the model asked for: `id` (the provider's tool-use id), `name`, `input` (the
    arguments as the model sent them, a JSON object)."""

    id: str
    name: str
    input: Any


class ToolResult(msgspec.Struct, frozen=True, kw_only=True):
    """What goes back to the model for one call: `tool_use_id`, `content` (text: a str
    result as is, anything else JSON-encoded) and `is_error` (the call failed: `content`
    says how, without the exception's message, which stays with the caller's code)."""

    tool_use_id: str
    content: str
    is_error: bool = False


class ToolContext:
    """What a running tool may know about its call. `call_id`: the tool-use id; `agent`: the
    calling agent's name; `cancelled`: a `threading.Event` set when the turn is interrupted,
    times out, or the call's own timeout passes (stop early when you see it); `chain`: the
    agents whose tools led here, outermost first, ending with `agent`; `records`: where a
    tool notes what it did for the turn's record (agent tools append an `AgentCall`);
    `idempotency_key`: a 32-character hex `str` derived from the session key, the request's
    ref and the call id (without a store: from the agent's name and the call id), the same
    for every run of this call (a `resend` of a call in doubt by a `retry_safe` tool gets
    the original call's key): hand it to the external system so it can refuse a
    duplicate."""

    __slots__ = ("agent", "call_id", "cancelled", "chain", "idempotency_key", "records")

    def __init__(self, call_id: str, agent: Any, cancelled: threading.Event,
                 chain: tuple[Any, ...] = (), records: list[Any] | None = None,
                 idempotency_key: str = "") -> None:
        self.call_id = call_id
        self.agent = agent
        self.cancelled = cancelled
        self.chain = chain
        self.records = records if records is not None else []
        self.idempotency_key = idempotency_key or idempotency_key_of(repr(agent), "", call_id)


def idempotency_key_of(session: str, ref: str, call_id: str) -> str:
    """The `ToolContext.idempotency_key` of a call: a hash of its session key (or agent
    name), request ref and call id (32 hex characters)."""
    return hashlib.sha256(f"{session}\0{ref}\0{call_id}".encode("utf-8", "replace")
                          ).hexdigest()[:32]


class AgentCall(msgspec.Struct, frozen=True, kw_only=True):
    """One call of another agent made through `agent_tool` during a turn (an `"agent_call"`
    event; `Response.agent_calls`).

    Fields:
        agent: the called agent's name. ref: the sub-request's `RequestRef` (None when it was
            refused before being sent). tool_use_id: the model's tool call that made it.
        duration_ms: wall time of the call (milliseconds).
        outcome: `"ok"`, `"error"` (the sub-turn failed), `"timeout"`, `"cycle"` (refused:
            the agent is already in the call chain) or `"not_found"`.
        reason_kind: the failure's kind (a reason tag or `BackendError.kind`), else None.
        usage: the sub-turn's usage (tokens), else None. cost_usd: its cost, else None.
    """

    agent: Any
    ref: Any
    tool_use_id: str
    duration_ms: int
    outcome: str
    reason_kind: str | None = None
    usage: dict[str, Any] | None = None
    cost_usd: float | None = None


class ToolInterrupted(Exception):
    """Raised by `run_calls` (after every call of the step finished) when the permission
    callback denied a call with `Deny(interrupt=True)`: the backend ends the turn as
    interrupted. `results` holds the step's results."""

    def __init__(self, results: list[ToolResult]) -> None:
        super().__init__("a tool call was denied with interrupt=True")
        self.results = results


class Tool:
    """A Python function the model can call. Build it with `tool(fn)`.

    Attributes:
        name: the name the model calls it by (`[A-Za-z0-9_-]{1,64}`).
        description: what it does (the docstring's summary, unless given).
        input_schema: the JSON Schema of its arguments (an object), from the signature.
        fn: the function (or callable object).
        timeout_s: seconds a call may run (None = no bound).
        side_effects: the tool changes something outside the turn (a payment, a file, a
            message): with a store, it runs only once its start is journalled, and a
            `resend` never runs it again for a call already journalled.
        retry_safe: a `resend` may run it again for a call in doubt (it hands
            `ToolContext.idempotency_key`, the original call's, to an external system that
            refuses duplicates); otherwise such a call gets the "outcome unknown" result.
    """

    __slots__ = ("_context_param", "_input_type", "description", "fn", "input_schema", "name",
                 "retry_safe", "side_effects", "timeout_s")

    def __init__(self, fn: Callable[..., Any], *, name: str | None = None,
                 description: str | None = None,
                 timeout_s: float | None = DEFAULT_TIMEOUT_S, side_effects: bool = False,
                 retry_safe: bool = False) -> None:
        if not callable(fn):
            raise TypeError(f"tool: expected a function or callable, got {type(fn).__name__}")
        target = fn if inspect.isfunction(fn) or inspect.ismethod(fn) else type(fn).__call__
        self.name = name or getattr(fn, "__name__", None) or type(fn).__name__
        if not _NAME.match(self.name):
            raise ValueError(f"tool: name must match [A-Za-z0-9_-]{{1,64}}, got {self.name!r}")
        if timeout_s is not None and not (
                isinstance(timeout_s, int | float) and not isinstance(timeout_s, bool)
                and math.isfinite(timeout_s) and timeout_s > 0):
            raise ValueError("tool: timeout_s must be positive seconds (a finite number > 0) or "
                             f"None (no bound), got {timeout_s!r}")
        for flag, value in (("side_effects", side_effects), ("retry_safe", retry_safe)):
            if type(value) is not bool:
                raise TypeError(f"tool: {flag} must be a bool, got {type(value).__name__}")
        self.side_effects = side_effects
        self.retry_safe = retry_safe
        doc = inspect.getdoc(fn) or inspect.getdoc(target) or ""
        summary, arg_docs = _parse_doc(doc)
        self.description = description if description is not None else summary
        self.fn = fn
        self.timeout_s = timeout_s
        self._input_type, self._context_param = _input_struct(self.name, target, arg_docs)
        self.input_schema = _object_schema(self._input_type)

    def __repr__(self) -> str:
        return f"<Tool {self.name}>"

    def spec(self) -> dict[str, Any]:
        """`{"name", "description", "input_schema"}`: the provider-neutral declaration."""
        return {"name": self.name, "description": self.description,
                "input_schema": self.input_schema}

    def call(self, call: ToolCall, *, agent: Any = None,
             cancelled: threading.Event | None = None, chain: tuple[Any, ...] = (),
             records: list[Any] | None = None, idempotency_key: str = "") -> ToolResult:
        """Validate `call.input` and run the function in this thread.

        Returns:
            A `ToolResult`: the encoded return value, or `is_error=True` with
            `"invalid arguments: ..."` (the validation message), `"tool raised <Type>"`
            (an `Exception` or `SystemExit`), or `"tool result cannot be encoded: ..."` (a
            value msgspec cannot encode as JSON, or text with a lone surrogate, which no
            wire can carry).
        """
        try:
            args: Any = msgspec.convert(call.input if call.input is not None else {},
                                   type=self._input_type)
        except msgspec.ValidationError as exc:
            return ToolResult(tool_use_id=call.id, content=f"invalid arguments: {exc}",
                              is_error=True)
        kwargs = {field: getattr(args, field) for field in args.__struct_fields__}
        if self._context_param is not None:
            kwargs[self._context_param] = ToolContext(call.id, agent,
                                                      cancelled or threading.Event(),
                                                      chain, records, idempotency_key)
        try:
            value = self.fn(**kwargs)
        except ToolRefused as exc:  # an agent tool's own, content-free explanation
            return ToolResult(tool_use_id=call.id, content=str(exc), is_error=True)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - an error result for the model
            return ToolResult(tool_use_id=call.id, content=f"tool raised {type(exc).__name__}",
                              is_error=True)
        try:
            content = _encode(value)
        except Exception as exc:  # noqa: BLE001 - the value's fault: an error result
            return ToolResult(tool_use_id=call.id, is_error=True,
                              content=f"tool result cannot be encoded: {_unencodable(exc)}")
        return ToolResult(tool_use_id=call.id, content=content)


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None,
         description: str | None = None,
         timeout_s: float | None = DEFAULT_TIMEOUT_S, side_effects: bool = False,
         retry_safe: bool = False) -> Any:
    """Make a `Tool` of `fn`; usable as `@tool` or `@tool(name=..., timeout_s=...)`.

    Args:
        fn: a function or callable object with annotated parameters (msgspec-supported
            types: str, int, float, bool, lists, dicts, Structs, dataclasses, Literal, ...).
        name: the tool's name (default: the function's).
        description: what the tool does (default: the docstring's first paragraph).
        timeout_s: seconds a call may run (default 60; None = no bound).
        side_effects: the tool acts on the world (see `Tool`); default False.
        retry_safe: a `resend` may run it again for a call in doubt (see `Tool`); default
            False.

    Returns:
        A `Tool` (or, without `fn`, a decorator making one).

    Raises:
        TypeError: `fn` is not callable, a parameter type msgspec cannot validate, or a
            flag that is not a bool.
        ValueError: a bad `name` or `timeout_s`.
    """
    def make(f: Callable[..., Any]) -> Tool:
        return Tool(f, name=name, description=description, timeout_s=timeout_s,
                    side_effects=side_effects, retry_safe=retry_safe)

    return make if fn is None else make(fn)


def as_tools(items: Sequence[Any]) -> tuple[Tool, ...]:
    """`Tool`s of `items` (a `Tool` as is, a callable through `tool`). Names must be unique.

    Raises:
        ValueError: two tools share a name. TypeError: an item is neither.
    """
    tools = tuple(item if isinstance(item, Tool) else tool(item) for item in items)
    names = [t.name for t in tools]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        raise ValueError(f"tools: two tools are named {duplicate!r}")
    return tools


def run_calls(tools: Sequence[Tool], calls: Sequence[ToolCall], *, agent: Any = None,
              cancel: Any = None, allow: Callable[[ToolCall], Any] | None = None,
              chain: tuple[Any, ...] = (), records: list[Any] | None = None,
              journal: Any = None) -> list[ToolResult]:
    """Run one step's tool calls in parallel and return their results in call order.

    Args:
        tools: the tools on offer. calls: what the model asked for.
        agent: the calling agent's name (for `ToolContext`).
        cancel: the turn's cancel signal (anything with `is_set()`): when it is set, running
            calls are told (`ToolContext.cancelled`) and those still running get an error
            result at once ("cancelled").
        allow: the permission check, `allow(call)` → None or `Allow(updated_input)` to run
            it (with the updated input), a `Deny` or a str to refuse it (the call gets an
            error result with that message and never runs). See `permission_check`.
        chain: the agents whose tools led to this step, ending with `agent` (agent tools
            refuse a cycle). records: a list the tools append their records to (`AgentCall`).
        journal: the turn's tool journal (the runtime's, for an agent with a store or
            `repair_interrupted_turns`), or
            None: `journal.before(call, tool)` runs before a call (it journals the start and
            may answer the call itself: a journalled result, "outcome unknown", or a refusal
            when a side-effecting tool's start could not be written), `journal.after(call,
            tool, result)` once the tool returned, `journal.idempotency_key(call_id)` names
            the call for `ToolContext`.

    Returns:
        One `ToolResult` per call, in the order of `calls`. An unknown tool, invalid
        arguments, a raise, a denial, a timeout (`timeout_s`) or a cancellation each give an
        error result.

    Raises:
        ToolInterrupted: a call was denied with `Deny(interrupt=True)` (after the others ran).
    """
    from gen_agent._permission import Allow, Deny

    by_name = {t.name: t for t in tools}
    results: list[ToolResult | None] = [None] * len(calls)
    running: list[tuple[int, threading.Thread, threading.Event, float | None]] = []
    interrupt = False
    for index, call in enumerate(calls):
        found = by_name.get(call.name)
        if found is None:
            results[index] = ToolResult(tool_use_id=call.id, content=f"unknown tool {call.name!r}",
                                        is_error=True)
            continue
        decision = allow(call) if allow is not None else None
        if isinstance(decision, (Deny, str)):
            message = decision if isinstance(decision, str) else decision.message
            interrupt = interrupt or (isinstance(decision, Deny) and decision.interrupt)
            results[index] = ToolResult(tool_use_id=call.id, content=message, is_error=True)
            continue
        if isinstance(decision, Allow) and decision.updated_input is not None:
            call = ToolCall(id=call.id, name=call.name, input=decision.updated_input)
        key = ""
        if journal is not None:
            answered = journal.before(call, found)
            if answered is not None:  # journalled already, or not safe to run
                results[index] = answered
                continue
            key = journal.idempotency_key(call.id)
        stop = threading.Event()

        def work(i: int = index, t: Tool = found, c: ToolCall = call,
                 s: threading.Event = stop, k: str = key) -> None:
            try:
                result = t.call(c, agent=agent, cancelled=s, chain=chain, records=records,
                                idempotency_key=k)
            except BaseException as exc:  # noqa: BLE001 - nobody else sees this thread's raise
                result = ToolResult(tool_use_id=c.id, is_error=True,
                                    content=f"tool raised {type(exc).__name__}")
            if journal is not None:
                journal.after(c, t, result)  # before the result is seen: finished first
            results[i] = result

        thread = threading.Thread(target=work, name="gen_agent-tool", daemon=True)
        thread.start()
        deadline = None if found.timeout_s is None else time.monotonic() + found.timeout_s
        running.append((index, thread, stop, deadline))
    for index, thread, stop, deadline in running:
        _wait(thread, deadline, cancel)
        if results[index] is None:  # still running: timed out or cancelled
            stop.set()
            cancelled = cancel is not None and cancel.is_set()
            results[index] = ToolResult(
                tool_use_id=calls[index].id, is_error=True,
                content="cancelled" if cancelled else "tool timed out")
    done = [r for r in results if r is not None]
    if interrupt:
        raise ToolInterrupted(done)
    return done


def permission_check(context: Any, backend: str,
                     decisions: list[dict[str, Any]] | None = None
                     ) -> Callable[[ToolCall], Any] | None:
    """The `allow` for `run_calls` from a turn's `TurnContext`: each call asks the agent's
    `handle_tool_permission` (a `ToolPermissionRequest` of `backend`, the tool's name, its
    input and the call id) and waits for its `Allow` / `Deny`; None when the agent has no
    such callback (Python tools are then allowed).

    Args:
        context: the `TurnContext` (None: no check). backend: the provider name it reports.
        decisions: a list that receives `{"tool_name", "tool_use_id", "decision"}` per call
            (`"allow"` / `"deny"`; never the input): the backend's `"permission"` events.
    """
    if context is None or not getattr(context, "handles_permissions", False):
        return None
    from gen_agent._permission import ToolPermissionRequest, decision_name

    def allow(call: ToolCall) -> Any:
        arguments = call.input if isinstance(call.input, dict) else {}
        decision = context.request_permission(ToolPermissionRequest(
            backend=backend, tool_name=call.name, input=arguments, tool_use_id=call.id))
        if decisions is not None:
            decisions.append({"tool_name": call.name, "tool_use_id": call.id,
                              "decision": decision_name(decision)})
        return decision

    return allow


class ToolRefused(Exception):
    """A tool's own failure whose message is safe to give the model (no payload)."""


def _wait(thread: threading.Thread, deadline: float | None, cancel: Any) -> None:
    # Wake at least every 50 ms to see the turn's cancellation (a thread cannot be waited on
    # together with an event); most calls end long before.
    while thread.is_alive():
        if cancel is not None and cancel.is_set():
            return
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            return
        thread.join(0.05 if remaining is None else min(0.05, remaining))


def _encode(value: Any) -> str:
    if isinstance(value, str):
        value.encode("utf-8")  # a lone surrogate raises here, not on the wire
        return value
    if value is None:
        return ""
    return msgspec.json.encode(value).decode()


def _unencodable(exc: BaseException) -> str:
    """Why a tool's value cannot be encoded, without quoting it."""
    if isinstance(exc, UnicodeEncodeError) and isinstance(exc.object, str):
        point = ord(exc.object[exc.start])
        return f"a lone surrogate (U+{point:04X}), which UTF-8 cannot encode"
    return f"{type(exc).__name__} (not a JSON value)"


def _parse_doc(doc: str) -> tuple[str, dict[str, str]]:
    """The docstring's first paragraph, and `name: text` entries of its Args section."""
    summary = doc.split("\n\n", 1)[0].replace("\n", " ").strip()
    args: dict[str, str] = {}
    match = re.search(r"^(?:Args|Arguments|Parameters):\s*\n((?:[ \t]+.*\n?)+)", doc, re.M)
    if match:
        current = None
        for line in match.group(1).splitlines():
            entry = re.match(r"^\s{1,8}(\w+)(?:\s*\([^)]*\))?:\s*(.*)$", line)
            if entry:
                current = entry.group(1)
                args[current] = entry.group(2).strip()
            elif current is not None and line.strip():
                args[current] += " " + line.strip()
    return summary, args


def _input_struct(name: str, fn: Any, arg_docs: dict[str, str]) -> tuple[type, str | None]:
    signature = inspect.signature(fn)
    try:
        hints = get_type_hints(fn)
    except Exception as exc:
        raise TypeError(f"tool {name!r}: cannot resolve its annotations ({exc})") from exc
    fields: list[Any] = []
    context_param = None
    for param in signature.parameters.values():
        if param.name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        annotation = hints.get(param.name, Any)
        if annotation is ToolContext:
            context_param = param.name
            continue
        if param.default is inspect.Parameter.empty:
            fields.append((param.name, annotation))
        else:
            fields.append((param.name, annotation, param.default))
    struct = msgspec.defstruct(f"{name}_input", fields, kw_only=True,
                               forbid_unknown_fields=True)
    struct.__gen_agent_arg_docs__ = arg_docs  # type: ignore[attr-defined]
    try:
        msgspec.json.schema(struct)
    except TypeError as exc:
        raise TypeError(f"tool {name!r}: a parameter type msgspec cannot validate ({exc})") \
            from exc
    return struct, context_param


def _object_schema(struct: type) -> dict[str, Any]:
    """The JSON Schema object of `struct`'s fields, with the Args descriptions, definitions
    of nested types kept under `$defs`."""
    schema = msgspec.json.schema(struct)
    defs = dict(schema.get("$defs", {}))
    ref = schema.get("$ref", "")
    top = defs.pop(ref.rsplit("/", 1)[-1], schema) if ref else schema
    top = {k: v for k, v in top.items() if k != "title"}
    docs = getattr(struct, "__gen_agent_arg_docs__", {})
    properties = {key: ({**value, "description": docs[key]} if key in docs else value)
                  for key, value in top.get("properties", {}).items()}
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if top.get("required"):
        out["required"] = top["required"]
    out["additionalProperties"] = False
    if defs:
        out["$defs"] = defs
    return out
