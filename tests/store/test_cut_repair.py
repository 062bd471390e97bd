"""The opt-in repair of a turn cut in process (issue 35, item 4): an agent class with
`repair_interrupted_turns = True` whose turn is interrupted (or hit by the watchdog) inside a
Python tool keeps the cut turn in its provider-neutral history, as a resumed agent does
(`tests/store/test_journal.py`); without it, the contract's rule holds (the session from
before the turn). Both HTTP providers, with and without a store, on the loopback model
server; MockBackend for a backend whose transcript gen_agent cannot edit (the preamble)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from _agents import WAIT_S, PassThrough, in_thread, start

import gen_agent
from gen_agent.backends.mock import MockBackend, text_turn
from gen_agent.store import INTERRUPTED_NOTE, OUTCOME_UNKNOWN, MemoryStore
from gen_agent.testing._model_server import Reply, ScriptedModelServer
from gen_agent.tools import tool

GATE: dict[str, threading.Event] = {}
RAN: list[tuple[str, str]] = []


@tool(side_effects=True)
def refund(order_id: str, amount: int) -> str:
    """Refund an order; blocks until the test releases it.

    Args:
        order_id: the order. amount: cents.
    """
    RAN.append(("refund", order_id))
    GATE["entered"].set()
    GATE["release"].wait(WAIT_S)
    return f"refunded {amount} on {order_id}"


@tool
def lookup(order_id: str) -> str:
    """Look an order up."""
    RAN.append(("lookup", order_id))
    return f"order {order_id}: open"


class Repairing(PassThrough):
    repair_interrupted_turns = True


@pytest.fixture(autouse=True)
def _gate() -> Any:
    RAN.clear()
    GATE["entered"], GATE["release"] = threading.Event(), threading.Event()
    yield
    GATE["release"].set()


@pytest.fixture
def server() -> Any:
    with ScriptedModelServer() as model:
        yield model


def _options(provider: str, server: Any) -> tuple[Any, dict[str, Any]]:
    tools = [refund, lookup]
    if provider == "anthropic":
        pytest.importorskip("anthropic", reason="the anthropic extra is not installed")
        from gen_agent.backends.anthropic import AnthropicAPI

        return AnthropicAPI, {"api_key": "test-key", "base_url": server.url,
                              "model": "claude-test", "tools": tools}
    pytest.importorskip("openai", reason="the openai extra is not installed")
    from gen_agent.backends.openai import OpenAIResponses
    from gen_agent.testing._openai_protocol import openai_base_url

    return OpenAIResponses, {"api_key": "test-key", "base_url": openai_base_url(server),
                             "model": "gpt-test", "store": provider == "openai-stored",
                             "tools": tools}


def _lookup_then_refund() -> Reply:
    """A step that calls `lookup` (which finishes) and `refund` (which blocks)."""
    return Reply.message(*Reply.tool_use("lookup", {"order_id": "o1"}, id="toolu_l").blocks,
                         *Reply.tool_use("refund", {"order_id": "o1", "amount": 5},
                                         id="toolu_r").blocks, stop_reason="tool_use")


def _cut(provider: str, server: Any, module: Any, how: str, **opts: Any) -> str | None:
    """Answer "hi", then cut the turn "refund o1" inside `refund` (`how`: an interrupt or
    the watchdog); the agent "a" is left running. Returns the first reply's response id."""
    backend, backend_opts = _options(provider, server)
    watchdog = {"watchdog_ms": 1_500} if how == "watchdog" else {}
    start(module, "a", backend=backend, backend_opts=backend_opts, **watchdog, **opts)
    server.enqueue(Reply.text("hello"), _lookup_then_refund())
    first = gen_agent.ask("a", "hi", timeout=WAIT_S)
    assert first.text == "hello"
    asked = in_thread(gen_agent.ask, "a", "refund o1", timeout=WAIT_S)
    assert GATE["entered"].wait(WAIT_S)
    if how == "interrupt":
        gen_agent.interrupt("a")
    with pytest.raises(gen_agent.TurnError) as cut:
        asked.result(WAIT_S)
    assert cut.value.reason == ("interrupted" if how == "interrupt" else "timeout")
    assert RAN == [("lookup", "o1"), ("refund", "o1")]
    return first.response_id


def _next_history(provider: str, server: Any) -> list[dict[str, Any]]:
    """The history the next request sends, as provider-neutral (kind, ...) tuples."""
    server.enqueue(Reply.text("noted"))
    assert gen_agent.ask("a", "what happened?", timeout=WAIT_S).text == "noted"
    body = server.model_requests()[-1].body
    if provider == "anthropic":
        return body["messages"]
    return body["input"] if isinstance(body["input"], list) else [
        {"role": "user", "content": body["input"]}]


PROVIDERS = ["anthropic", "openai", "openai-stored"]


CASES = [pytest.param(provider, with_store, how,
                      id=f"{provider}-{'store' if with_store else 'no_store'}-{how}")
         for provider in PROVIDERS for with_store in (False, True)
         for how in ("interrupt", "watchdog")
         # the watchdog once per provider and once with a store (each waits 1.5 s)
         if how == "interrupt" or with_store == (provider == "openai-stored")
         or (provider == "anthropic" and with_store)]


@pytest.mark.parametrize(("provider", "with_store", "how"), CASES)
def test_a_cut_turn_is_kept_in_the_history_of_an_agent_that_asks(
        provider: str, with_store: bool, how: str, server: Any) -> None:
    store = {"store": MemoryStore(), "session_key": "k"} if with_store else {}
    first = _cut(provider, server, Repairing, how, **store)
    items = _next_history(provider, server)
    if provider == "anthropic":
        assert items[:2] == [{"role": "user", "content": "hi"},
                             {"role": "assistant", "content": "hello"}]
        assert items[2] == {"role": "user", "content": "refund o1"}
        assert [(b["type"], b["id"], b["name"]) for b in items[3]["content"]] == [
            ("tool_use", "toolu_l", "lookup"), ("tool_use", "toolu_r", "refund")]
        assert [(b["tool_use_id"], b["content"], b.get("is_error", False))
                for b in items[4]["content"]] == [
            ("toolu_l", "order o1: open", False), ("toolu_r", OUTCOME_UNKNOWN, True)]
        assert items[5:] == [{"role": "assistant", "content": INTERRUPTED_NOTE},
                             {"role": "user", "content": "what happened?"}]
        return
    body = server.model_requests()[-1].body
    if provider == "openai-stored":  # after the last completed response: "hello"
        assert body["previous_response_id"] == first
    else:
        assert items[:2] == [{"role": "user", "content": "hi"},
                             {"role": "assistant", "content": "hello"}]
        items = items[2:]
    assert items[0] == {"role": "user", "content": "refund o1"}
    assert [(i["type"], i["call_id"], i["name"]) for i in items[1:3]] == [
        ("function_call", "toolu_l", "lookup"), ("function_call", "toolu_r", "refund")]
    outputs = {i["call_id"]: i["output"] for i in items if i.get("type") ==
               "function_call_output"}
    assert outputs["toolu_l"] == "order o1: open"
    assert OUTCOME_UNKNOWN in outputs["toolu_r"]
    assert items[-2:] == [{"role": "assistant", "content": INTERRUPTED_NOTE},
                          {"role": "user", "content": "what happened?"}]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_by_default_a_cut_turn_leaves_the_session_as_before_it(provider: str,
                                                               server: Any) -> None:
    first = _cut(provider, server, PassThrough, "interrupt")
    items = _next_history(provider, server)
    body = server.model_requests()[-1].body
    if provider == "openai-stored":
        assert body["previous_response_id"] == first
        assert items == [{"role": "user", "content": "what happened?"}]
    elif provider == "anthropic":
        assert items == [{"role": "user", "content": "hi"},
                         {"role": "assistant", "content": "hello"},
                         {"role": "user", "content": "what happened?"}]
    else:
        assert [i.get("content") for i in items] == ["hi", "hello", "what happened?"]


def test_a_rolled_back_turn_is_not_repaired(server: Any) -> None:
    backend, backend_opts = _options("anthropic", server)
    start(Repairing, "a", backend=backend, backend_opts=backend_opts)
    server.enqueue(_lookup_then_refund(), Reply.text("noted"))
    gen_agent.tell("a", "refund o1")
    assert GATE["entered"].wait(WAIT_S)
    options = gen_agent.RequestOptions(busy="rollback")
    assert gen_agent.ask("a", "never mind", timeout=WAIT_S, options=options).text == "noted"
    assert server.model_requests()[-1].body["messages"] == [
        {"role": "user", "content": "never mind"}]


def test_a_cli_like_backend_gets_the_cut_turn_as_the_next_prompts_preamble() -> None:
    entered, release = threading.Event(), threading.Event()
    seen: list[str] = []

    def bash_then_hang(prompt: str) -> Any:
        yield gen_agent.Event.new("tool_use", {"id": "b1", "name": "Bash",
                                               "input": {"command": "ls"}})
        yield gen_agent.Event.new("tool_result", {"tool_use_id": "b1", "content": "a.txt"})
        yield gen_agent.Event.new("tool_use", {"id": "b2", "name": "Bash",
                                               "input": {"command": "rm a.txt"}})
        entered.set()
        release.wait(WAIT_S)
        yield from text_turn("late")

    def record(prompt: str) -> Any:
        seen.append(prompt)
        return text_turn("ok")

    start(Repairing, "a", backend=MockBackend,
          backend_opts={"scripts": [bash_then_hang, record, record]})
    try:
        ref = gen_agent.tell("a", "tidy up")
        assert entered.wait(WAIT_S)
        assert gen_agent.interrupt_request("a", ref) == "accepted"
    finally:
        release.set()
    gen_agent.ask("a", "and now?", timeout=WAIT_S)
    gen_agent.ask("a", "again", timeout=WAIT_S)
    assert seen[0] == (
        "[Context: your previous turn was interrupted before it was answered (the process "
        "running it stopped).\nThe request was: tidy up\nTool calls made in that turn:\n"
        '- Bash {"command":"ls"} -> result: a.txt\n'
        f'- Bash {{"command":"rm a.txt"}} -> {OUTCOME_UNKNOWN}]\n\nand now?')
    assert seen[1] == "again"  # once
