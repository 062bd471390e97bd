"""Tests for `gen_agent.tools` (schemas, validation, parallel runs, timeouts, cancellation) and
`mock.tool_round` (a tool-using agent tested offline)."""

from __future__ import annotations

import threading
from typing import Any, Literal

import msgspec
import pytest
from _agents import WAIT_S

import gen_agent
from gen_agent._errors import AgentStartError
from gen_agent.backends import mock
from gen_agent.tools import Tool, ToolCall, ToolContext, ToolResult, run_calls, tool


class Point(msgspec.Struct):
    x: int
    y: int


@tool
def add(a: int, b: int = 1) -> int:
    """Add two numbers.

    The second defaults to one.

    Args:
        a: the first number.
        b: the second
            number.
    """
    return a + b


@tool(name="where", timeout_s=5)
def locate(point: Point, unit: Literal["m", "km"] = "m") -> dict[str, Any]:
    """Say where a point is."""
    return {"at": [point.x, point.y], "unit": unit}


class NotValidatable:
    """A plain class: msgspec cannot validate it from JSON."""


def _takes_a_plain_class(obj: NotValidatable) -> str:
    return ""


def test_the_schema_comes_from_the_signature_and_the_docstring() -> None:
    assert add.spec() == {
        "name": "add",
        "description": "Add two numbers.",
        "input_schema": {
            "type": "object",
            "properties": {
                "a": {"type": "integer", "description": "the first number."},
                "b": {"type": "integer", "default": 1, "description": "the second number."},
            },
            "required": ["a"],
            "additionalProperties": False,
        },
    }
    schema = locate.input_schema
    assert schema["properties"]["point"] == {"$ref": "#/$defs/Point"}
    assert schema["properties"]["unit"] == {"enum": ["km", "m"], "default": "m"}
    assert schema["$defs"]["Point"]["required"] == ["x", "y"]


def test_a_call_validates_and_encodes_its_result() -> None:
    ok = locate.call(ToolCall(id="t1", name="where", input={"point": {"x": 1, "y": 2}}))
    assert ok == ToolResult(tool_use_id="t1", content='{"at":[1,2],"unit":"m"}')
    bad = add.call(ToolCall(id="t2", name="add", input={"a": "one"}))
    assert bad.is_error and bad.content.startswith("invalid arguments: Expected `int`")
    extra = add.call(ToolCall(id="t3", name="add", input={"a": 1, "c": 2}))
    assert extra.is_error and "unknown field `c`" in extra.content
    assert add.call(ToolCall(id="t4", name="add", input={"a": 2})).content == "3"


def test_a_raising_tool_is_an_error_result_without_its_message() -> None:
    @tool
    def boom() -> str:
        raise RuntimeError("secret detail")

    result = boom.call(ToolCall(id="x", name="boom", input={}))
    assert result == ToolResult(tool_use_id="x", content="tool raised RuntimeError",
                                is_error=True)


def test_bad_tools_are_refused_when_made() -> None:
    with pytest.raises(ValueError, match="name must match"):
        tool(lambda: None, name="has space")
    for bad in (0, float("nan"), float("inf"), True):
        with pytest.raises(ValueError, match=r"timeout_s must be positive seconds \(a finite "):
            tool(add.fn, timeout_s=bad)
    with pytest.raises(TypeError, match="cannot validate"):
        tool(_takes_a_plain_class)

    def local(obj: LocalOnly) -> str:  # type: ignore[name-defined]  # noqa: F821
        return ""

    with pytest.raises(TypeError, match="cannot resolve its annotations"):
        tool(local)


def test_calls_run_in_parallel_in_call_order_with_unknown_tools_and_denials() -> None:
    barrier = threading.Barrier(2, timeout=WAIT_S)

    @tool
    def meet(who: str) -> str:
        barrier.wait()  # both calls must be running at once to get past this
        return f"met {who}"

    calls = [ToolCall(id="1", name="meet", input={"who": "a"}),
             ToolCall(id="2", name="nope", input={}),
             ToolCall(id="3", name="meet", input={"who": "b"}),
             ToolCall(id="4", name="add", input={"a": 1})]
    results = run_calls([meet, add], calls,
                        allow=lambda call: "denied by policy" if call.name == "add" else None)
    assert results == [
        ToolResult(tool_use_id="1", content="met a"),
        ToolResult(tool_use_id="2", content="unknown tool 'nope'", is_error=True),
        ToolResult(tool_use_id="3", content="met b"),
        ToolResult(tool_use_id="4", content="denied by policy", is_error=True),
    ]


def test_a_tool_past_its_timeout_fails_that_call_and_is_told_to_stop() -> None:
    told = threading.Event()

    @tool(timeout_s=0.05)
    def slow(ctx: ToolContext) -> str:
        if ctx.cancelled.wait(WAIT_S):
            told.set()
        return "late"

    results = run_calls([slow, add], [ToolCall(id="s", name="slow", input={}),
                                      ToolCall(id="a", name="add", input={"a": 4})])
    assert results == [ToolResult(tool_use_id="s", content="tool timed out", is_error=True),
                       ToolResult(tool_use_id="a", content="5")]
    assert told.wait(WAIT_S)
    assert "ctx" not in slow.input_schema["properties"]


def test_a_cancelled_turn_cancels_its_running_calls() -> None:
    cancel = threading.Event()
    started, told = threading.Event(), threading.Event()

    @tool(timeout_s=None)
    def waits(ctx: ToolContext) -> str:
        started.set()
        if ctx.cancelled.wait(WAIT_S):
            told.set()
        return "never seen"

    def cancel_soon() -> None:
        started.wait(WAIT_S)
        cancel.set()

    threading.Thread(target=cancel_soon).start()
    results = run_calls([waits], [ToolCall(id="w", name="waits", input={})], cancel=cancel)
    assert results == [ToolResult(tool_use_id="w", content="cancelled", is_error=True)]
    assert told.wait(WAIT_S)



@tool
def unencodable(kind: str) -> Any:
    """Return what no wire can carry."""
    return {"object": object(), "text": "half \ud83d", "nested": {"t": ["x\udc00"]}}[kind]


@tool
def exits() -> str:
    """Call sys.exit."""
    raise SystemExit(3)


@pytest.mark.parametrize(("kind", "why"), [
    ("object", "TypeError (not a JSON value)"),
    ("text", "a lone surrogate (U+D83D), which UTF-8 cannot encode"),
    ("nested", "a lone surrogate (U+DC00), which UTF-8 cannot encode"),
])
def test_a_result_that_cannot_be_encoded_is_reported_as_such(kind: str, why: str) -> None:
    [result] = run_calls([unencodable], [ToolCall(id="u", name="unencodable",
                                                  input={"kind": kind})])
    assert result == ToolResult(tool_use_id="u", is_error=True,
                                content=f"tool result cannot be encoded: {why}")


def test_a_tool_raising_system_exit_is_reported_as_a_raise_not_a_timeout() -> None:
    results = run_calls([exits, add], [ToolCall(id="e", name="exits", input={}),
                                       ToolCall(id="a", name="add", input={"a": 1})])
    assert results == [ToolResult(tool_use_id="e", content="tool raised SystemExit",
                                  is_error=True),
                       ToolResult(tool_use_id="a", content="2")]


def test_a_base_exception_in_a_tool_thread_is_reported_not_lost() -> None:
    class Stop(BaseException):
        pass

    @tool
    def stops() -> str:
        """Raise a BaseException that is not an Exception."""
        raise Stop

    [result] = run_calls([stops], [ToolCall(id="s", name="stops", input={})])
    assert result == ToolResult(tool_use_id="s", content="tool raised Stop", is_error=True)


def test_an_agent_whose_tools_fail_so_answers_this_ask_and_the_next() -> None:
    round_ = mock.tool_round(
        [("unencodable", {"kind": "text"}), ("exits", {})],
        lambda results: mock.text_turn(" | ".join(r.content for r in results)))

    class Tools(gen_agent.GenAgent):
        def init_agent(self, opts: dict[str, Any]) -> Any:
            return {"scripts": [round_, mock.text_turn("next")],
                    "tools": [unencodable, exits]}, None

        def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
            return gen_agent.NoReply(state)

    gen_agent.start_agent(Tools, name="t", backend=mock.MockBackend)
    response = gen_agent.ask("t", "go", timeout=WAIT_S)
    assert response.text == ("tool result cannot be encoded: a lone surrogate (U+D83D), which "
                             "UTF-8 cannot encode | tool raised SystemExit")
    assert gen_agent.ask("t", "again", timeout=WAIT_S).text == "next"


# ---------------------------------------------------------------------- mock tool rounds
def test_a_mock_tool_round_runs_the_agents_tools_and_answers_from_the_results() -> None:
    script = mock.tool_round(
        [("add", {"a": 2, "b": 3}), ("where", {"point": {"x": 0, "y": 9}})],
        lambda results: mock.text_turn(f"sum is {results[0].content}"))

    class WithTools(gen_agent.GenAgent):
        def init_agent(self, opts: dict[str, Any]) -> Any:
            return {"scripts": [script], "tools": [add, locate]}, None

        def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
            return gen_agent.NoReply(state)

    gen_agent.start_agent(WithTools, name="t", backend=mock.MockBackend)
    response = gen_agent.ask("t", "compute", timeout=WAIT_S)
    assert response.text == "sum is 5"
    kinds = [e.kind for e in response.events]
    assert kinds == ["tool_use", "tool_use", "tool_result", "tool_result", "text", "result"]
    assert [e.data for e in response.events if e.kind == "tool_result"] == [
        {"tool_use_id": "call_0", "content": "5", "is_error": False},
        {"tool_use_id": "call_1", "content": '{"at":[0,9],"unit":"m"}', "is_error": False}]
    assert [c.data["name"] for c in response.tool_calls] == ["add", "where"]


def test_mock_tools_must_be_tools() -> None:
    class Bad(gen_agent.GenAgent):
        def init_agent(self, opts: dict[str, Any]) -> Any:
            return {"tools": [add, Tool(add.fn)]}, None

    with pytest.raises(AgentStartError) as info:
        gen_agent.start_agent(Bad, name="bad", backend=mock.MockBackend)
    assert info.value.reason == ("backend_start_failed", ("invalid_option", "tools"))


# ---------------------------------------------------------------------- permissions
class _Guarded(gen_agent.GenAgent):
    """Offers `add` and `where`; its permission policy: no `where`, `add` with b forced to
    10, interrupt on a call of `add` with a == 99."""

    def init_agent(self, opts: dict[str, Any]) -> Any:
        return {"scripts": opts["scripts"], "tools": [add, locate]}, []

    def handle_tool_permission(self, request: Any, state: Any) -> Any:
        from gen_agent._permission import Allow, Deny

        if request.tool_name == "where":
            return Deny("no locating today")
        if request.input.get("a") == 99:
            return Deny("stop everything", interrupt=True)
        return Allow(updated_input={**request.input, "b": 10})

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return gen_agent.NoReply(state)


def test_every_python_tool_call_passes_the_agents_permission_callback() -> None:
    round_ = mock.tool_round([("add", {"a": 1}), ("where", {"point": {"x": 1, "y": 1}})],
                             mock.text_turn("done"))
    gen_agent.start_agent(_Guarded, name="g", backend=mock.MockBackend, scripts=[round_])
    response = gen_agent.ask("g", "go", timeout=WAIT_S)
    results = [e.data for e in response.events if e.kind == "tool_result"]
    assert results == [
        {"tool_use_id": "call_0", "content": "11", "is_error": False},  # b forced to 10
        {"tool_use_id": "call_1", "content": "no locating today", "is_error": True}]
    assert [e.data["decision"] for e in response.events if e.kind == "permission"] == [
        "allow", "deny"]


def test_a_deny_with_interrupt_ends_the_turn_as_interrupted() -> None:
    round_ = mock.tool_round([("add", {"a": 99})], mock.text_turn("never"))
    gen_agent.start_agent(_Guarded, name="g", backend=mock.MockBackend, scripts=[round_])
    with pytest.raises(gen_agent.TurnError) as info:
        gen_agent.ask("g", "go", timeout=WAIT_S)
    assert info.value.reason == "interrupted"


# ---------------------------------------------------------------------- agents as tools
class _Delegating(gen_agent.GenAgent):
    def init_agent(self, opts: dict[str, Any]) -> Any:
        return {"scripts": opts["scripts"], "tools": opts.get("tools", [])}, None

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return gen_agent.NoReply(state)


def test_another_agent_as_a_tool_is_asked_and_recorded() -> None:
    from gen_agent.tools import agent_tool

    gen_agent.start_agent(_Delegating, name="expert", backend=mock.MockBackend,
                          scripts=[mock.text_turn("42", usage={"input_tokens": 7})])
    ask_expert = agent_tool("expert", description="Ask the expert.")
    round_ = mock.tool_round([("ask_expert", {"prompt": "the answer?"})],
                             lambda results: mock.text_turn(f"expert says {results[0].content}"))
    gen_agent.start_agent(_Delegating, name="lead", backend=mock.MockBackend,
                          scripts=[round_], tools=[ask_expert])
    response = gen_agent.ask("lead", "ask the expert", timeout=WAIT_S)
    assert response.text == "expert says 42"
    assert mock.MockBackend.history("expert") == ["the answer?"]
    [call] = response.agent_calls
    assert (call["agent"], call["outcome"], call["tool_use_id"], call["usage"]) == (
        "expert", "ok", "call_0", {"input_tokens": 7})
    assert isinstance(call["ref"], gen_agent.RequestRef)
    assert call["duration_ms"] >= 0


def test_a_cycle_through_agent_tools_is_refused_not_deadlocked() -> None:
    from gen_agent.tools import agent_tool

    ask_a, ask_b = (agent_tool(n, description=f"Ask {n}.", timeout_s=WAIT_S) for n in "ab")
    b_round = mock.tool_round([("ask_a", {"prompt": "back to a"})],
                              lambda results: mock.text_turn(results[0].content))
    a_round = mock.tool_round([("ask_b", {"prompt": "to b"})],
                              lambda results: mock.text_turn(f"b said: {results[0].content}"))
    gen_agent.start_agent(_Delegating, name="b", backend=mock.MockBackend,
                          scripts=[b_round], tools=[ask_a])
    gen_agent.start_agent(_Delegating, name="a", backend=mock.MockBackend,
                          scripts=[a_round], tools=[ask_b])
    response = gen_agent.ask("a", "start", timeout=WAIT_S)
    assert response.text == ("b said: refused: a -> b -> a would call an agent already "
                             "waiting on this call")
    assert [c["outcome"] for c in response.agent_calls] == ["ok"]
    assert mock.MockBackend.history("a") == ["start"]
