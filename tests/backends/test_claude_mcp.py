"""The agent's Python tools as the in-process MCP server of a warm `claude` process
(gen_agent/backends/_subprocess/claude_mcp.py): a recorded session of the real CLI replayed byte for
byte on the fake (tests/fakes/fake_claude_warm.py), the start-time checks, and the server's
answers and calls on their own."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

import gen_agent
from gen_agent import TurnError
from gen_agent._errors import AgentStartError
from gen_agent._permission import Allow, Deny
from gen_agent.backend import TurnContext
from gen_agent.backends._subprocess.claude_mcp import McpServer, cli_tool_name
from gen_agent.backends.claude import ClaudeCLI
from gen_agent.tools import ToolContext, tool

from .test_claude_warm import (
    RECORDED,
    WAIT_S,
    FakeWarm,
    Permitting,
    ask,
    in_background,
    start,
    wait_text,
)

pytestmark = pytest.mark.usefixtures("no_child_left")


@pytest.fixture
def fake(tmp_path: Path) -> FakeWarm:
    return FakeWarm(tmp_path)


@tool
def lookup(key: str) -> str:
    """Look up the value stored under a key.

    Args:
        key: the key to look up.
    """
    return {"plum": "42-violet"}[key]


# -- the recorded session of the real CLI, replayed ------------------------------------------


def test_the_recorded_mcp_session_replays_byte_exactly(fake: FakeWarm):
    """`mcp.jsonl`: claude 2.1.197 with `tools=[lookup]` and a policy denying key "fig":
    turn 1 calls lookup("plum") and quotes its result, turn 2 calls lookup("fig"), denied."""
    seen: list[Any] = []

    def permit(request: Any, state: Any) -> Any:
        seen.append(request)
        return Deny("no, not that key") if request.input.get("key") == "fig" else Allow()

    start(fake, module=Permitting, permit=permit,
          backend={"tools": [lookup],
                   "env": {"FAKE_CLAUDE_REPLAY": str(RECORDED / "mcp.jsonl")}})
    first, second = ask("What is stored under plum?"), ask("And under fig?")
    # Every line we wrote is the one the real CLI got, byte for byte: initialize, the
    # prompt, the answers to both MCP handshakes and tool lists, the tool call's result...
    replayed = fake.replayed()
    assert len(replayed) == 11
    assert [x["got"] for x in replayed] == [x["expected"] for x in replayed]
    answers = [json.loads(x["got"])["response"]["response"]["mcp_response"]
               for x in replayed if '"mcp_response"' in x["got"]]
    assert [json.loads(x["got"])["type"] for x in replayed].count("user") == 2
    assert answers[-2]["result"] == {"content": [{"type": "text", "text": "42-violet"}]}
    assert answers[-1]["result"] == {"content": [{"type": "text", "text": "no, not that key"}],
                                     "isError": True}
    assert first.text == "The value is 42-violet."
    assert second.text == "Denied."
    # The events show the call and its result as the CLI streamed them.
    use = next(e for e in first.events if e.kind == "tool_use")
    assert (use.data["name"], use.data["input"]) == ("mcp__gen_agent__lookup", {"key": "plum"})
    assert [e.kind for e in second.events] == [
        "session", "tool_use", "permission", "tool_result", "text", "usage", "result"]
    denied = next(e for e in second.events if e.kind == "tool_result")
    assert denied.data["is_error"] is True
    assert [(r.tool_name, r.tool_use_id, r.input) for r in seen] == [
        ("lookup", "toolu_mcp_1", {"key": "plum"}), ("lookup", "toolu_mcp_2", {"key": "fig"})]
    # The command line declares the server and allows its tool in the CLI.
    argv = fake.calls()[0]["argv"]
    config = json.loads(argv[argv.index("--mcp-config") + 1])
    assert config == {"mcpServers": {"gen_agent": {"type": "sdk", "name": "gen_agent"}}}
    assert argv[argv.index("--allowedTools") + 1] == "mcp__gen_agent__lookup"
    gen_agent.stop("w")


def test_an_interrupt_tells_the_running_tool_to_stop_and_the_process_survives(fake: FakeWarm):
    started, told = threading.Event(), threading.Event()

    @tool(timeout_s=None)
    def crawl(ctx: ToolContext) -> str:
        """Crawl until told to stop."""
        started.set()
        if ctx.cancelled.wait(WAIT_S):
            told.set()
        return "crawled"

    start(fake, backend={"tools": [crawl, lookup]})
    caller, outcome = in_background("pytool crawl")
    assert started.wait(WAIT_S)
    pid = gen_agent.backend_session("w", timeout=WAIT_S).pid
    gen_agent.interrupt("w")
    assert outcome.get(timeout=WAIT_S).reason == "interrupted"
    caller.join(WAIT_S)
    assert told.wait(WAIT_S)  # the tool saw the turn's cancellation
    # The same process takes the next turn, whose tool runs normally.
    assert ask("pytool lookup").text == "tool said invalid arguments: Object missing " \
        "required field `key`"
    assert gen_agent.backend_session("w", timeout=WAIT_S).pid == pid
    gen_agent.stop("w")


def test_a_call_while_an_interrupted_turn_settles_is_answered_cancelled(fake: FakeWarm):
    ran = threading.Event()

    @tool
    def act() -> str:
        """Do something."""
        ran.set()
        return "done"

    start(fake, backend={"tools": [act]})
    caller, outcome = in_background("late act")
    wait_text("partial ")
    gen_agent.interrupt("w")
    assert outcome.get(timeout=WAIT_S).reason == "interrupted"
    caller.join(WAIT_S)
    assert ask("hello after").text == "echo: hello after"  # the turn settled first
    answer = json.loads((fake.dir / "late.json").read_text())
    assert answer["response"]["request_id"] == "mcp-late-1"
    assert answer["response"]["response"]["mcp_response"] == {
        "jsonrpc": "2.0", "id": 9,
        "result": {"content": [{"type": "text", "text": "cancelled"}], "isError": True}}
    assert not ran.is_set()
    gen_agent.stop("w")


def test_a_denial_with_interrupt_ends_the_turn_as_interrupted(fake: FakeWarm):
    start(fake, module=Permitting, permit=lambda r, s: Deny("stop here", interrupt=True),
          backend={"tools": [lookup]})
    with pytest.raises(TurnError) as caught:
        ask("pytool lookup")
    assert caught.value.reason == "interrupted"
    assert ask("hello again").text == "echo: hello again"  # the process took the next turn
    assert len(fake.calls()) == 1
    gen_agent.stop("w")


# -- start-time checks -----------------------------------------------------------------------


def test_tools_in_per_turn_mode_fail_at_start_saying_they_need_warm_mode(fake: FakeWarm):
    with pytest.raises(AgentStartError, match="Python tools need warm mode") as caught:
        start(fake, backend={"tools": [lookup], "mode": "per_turn"})
    assert caught.value.reason[1][:2] == ("invalid_option", "tools")


@pytest.mark.parametrize(("tools", "message"), [
    ([lookup, lookup], "two tools are named 'lookup'"),
    (["lookup"], "must be a list of functions or gen_agent.tools.Tool"),
    (lookup, "must be a list of functions or gen_agent.tools.Tool"),
])
def test_bad_tools_fail_at_start(fake: FakeWarm, tools: Any, message: str):
    with pytest.raises(AgentStartError, match=message):
        start(fake, backend={"tools": tools})


def test_functions_become_tools_at_start():
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    session = ClaudeCLI.start_session({"cli_path": "/bin/sh", "tools": [add, lookup]})
    assert [t.name for t in session.options.tools] == ["add", "lookup"]
    argv = ClaudeCLI.warm_command(session, permission_prompt=False)
    assert argv.count("--allowedTools") == 2
    assert "mcp__gen_agent__add" in argv and "mcp__gen_agent__lookup" in argv


# -- the server on its own -------------------------------------------------------------------


def context(*, permission: Any = None, cancel: threading.Event | None = None) -> TurnContext:
    return TurnContext(agent="a", ref=None, attempt=1, cancel_event=cancel or threading.Event(),
                       checkpoint=lambda _id: None, permission=permission)


def call(name: str, arguments: Any, request_id: int = 7) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {
        "name": name, "arguments": arguments, "_meta": {"claudecode/toolUseId": "toolu_9"}}}


def test_session_messages_are_answered_from_the_tool_specs():
    server = McpServer([lookup])
    assert server.answer({"jsonrpc": "2.0", "id": 0, "method": "initialize"}) == {
        "jsonrpc": "2.0", "id": 0, "result": {
            "protocolVersion": "2024-11-05", "capabilities": {"tools": {}},
            "serverInfo": {"name": "gen_agent", "version": "1.0.0"}}}
    assert server.answer({"jsonrpc": "2.0", "method": "notifications/initialized"}) == {
        "jsonrpc": "2.0", "result": {}}
    listing = server.answer({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert listing["result"]["tools"] == [{
        "name": "lookup", "description": "Look up the value stored under a key.",
        "inputSchema": {"type": "object", "additionalProperties": False, "required": ["key"],
                        "properties": {"key": {"type": "string",
                                               "description": "the key to look up."}}}}]
    assert server.answer({"jsonrpc": "2.0", "id": 2, "method": "resources/list"})["error"] == {
        "code": -32601, "message": "method 'resources/list' not found"}
    assert server.answer(call("lookup", {"key": "plum"}))["result"] == {
        "content": [{"type": "text", "text": "no turn is running"}], "isError": True}
    assert cli_tool_name("lookup") == "mcp__gen_agent__lookup"


def test_a_call_without_a_permission_callback_runs():
    answer, asked, decision = McpServer([lookup]).call(
        call("lookup", {"key": "plum"}), context(), permission_timeout_ms=1000)
    assert answer == {"jsonrpc": "2.0", "id": 7,
                      "result": {"content": [{"type": "text", "text": "42-violet"}]}}
    assert asked is None and decision is None


@pytest.mark.parametrize(("arguments", "text"), [
    ({"key": 3}, "invalid arguments: Expected `str`, got `int` - at `$.key`"),
    ({"key": "missing"}, "tool raised KeyError"),
    ({}, "invalid arguments: Object missing required field `key`"),
])
def test_bad_calls_are_error_results(arguments: Any, text: str):
    answer, _, _ = McpServer([lookup]).call(call("lookup", arguments), context(),
                                            permission_timeout_ms=1000)
    assert answer["result"] == {"content": [{"type": "text", "text": text}], "isError": True}


def test_an_unknown_tool_is_an_error_result_without_asking_the_agent():
    asked: list[Any] = []
    answer, request, _ = McpServer([lookup]).call(
        call("nope", {}), context(permission=lambda r, t: asked.append(r) or Allow()),
        permission_timeout_ms=1000)
    assert answer["result"]["isError"] is True
    assert answer["result"]["content"][0]["text"] == "unknown tool 'nope'"
    assert asked == [] and request is None


def test_the_permission_callback_may_change_the_input():
    seen: list[Any] = []

    def permission(request: Any, timeout_s: float) -> Any:
        seen.append((request, timeout_s))
        return Allow(updated_input={"key": "plum"})

    answer, request, decision = McpServer([lookup]).call(
        call("lookup", {"key": "fig"}), context(permission=permission), permission_timeout_ms=2500)
    assert answer["result"]["content"][0]["text"] == "42-violet"
    assert seen[0][1] == 2.5  # seconds
    assert (request.tool_name, request.tool_use_id, request.input) == (
        "lookup", "toolu_9", {"key": "fig"})
    assert decision == Allow(updated_input={"key": "plum"})


def test_a_denied_call_never_runs():
    ran = threading.Event()

    @tool
    def act() -> str:
        """Do something."""
        ran.set()
        return "done"

    answer, _, decision = McpServer([act]).call(
        call("act", {}), context(permission=lambda r, t: Deny("no")), permission_timeout_ms=1000)
    assert answer["result"] == {"content": [{"type": "text", "text": "no"}], "isError": True}
    assert decision == Deny("no") and not ran.is_set()


def test_a_call_past_its_timeout_and_a_cancelled_call_are_error_results():
    release = threading.Event()

    @tool(timeout_s=0.2)
    def stuck(ctx: ToolContext) -> str:
        """Block until told."""
        ctx.cancelled.wait(30)
        release.set()
        return "late"

    answer, _, _ = McpServer([stuck]).call(call("stuck", {}), context(),
                                           permission_timeout_ms=1000)
    assert answer["result"]["content"][0]["text"] == "tool timed out"
    assert release.wait(5)  # the tool was told to stop

    cancel = threading.Event()
    started = threading.Event()

    @tool(timeout_s=None)
    def slow(ctx: ToolContext) -> str:
        """Block until cancelled."""
        started.set()
        ctx.cancelled.wait(30)
        return "late"

    canceller = threading.Thread(target=lambda: started.wait(5) and cancel.set())
    canceller.start()
    answer, _, _ = McpServer([slow]).call(call("slow", {}), context(cancel=cancel),
                                          permission_timeout_ms=1000)
    canceller.join(5)
    assert answer["result"]["content"][0]["text"] == "cancelled"
    assert answer["result"]["isError"] is True


def test_a_tool_result_holding_a_nul_is_sent_escaped_a_lone_surrogate_is_refused(
        fake: FakeWarm):
    @tool
    def nul() -> str:
        """Return text with a NUL, which JSON carries escaped."""
        return "a \x00 nul"

    @tool
    def odd() -> str:
        """Return text with a lone surrogate, which no UTF-8 wire carries."""
        return "half \ud800"

    start(fake, backend={"tools": [nul, odd]})
    assert ask("pytool nul").text == "tool said a \x00 nul"
    # As on every backend (gen_agent.tools): an error result for the model, not a crash.
    assert ask("pytool odd").text == ("tool said tool result cannot be encoded: a lone "
                                      "surrogate (U+D800), which UTF-8 cannot encode")
    assert ask("hello after").text == "echo: hello after"  # nothing crashed, nothing claimed
    gen_agent.stop("w")
