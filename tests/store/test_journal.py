
"""The tool journal: schema migration, the store API, and agents whose Python tools are
journalled before they run and after (AnthropicAPI against the loopback model server), the
interrupted turn you can act on, and the at-most-once guard of `resend`."""

from __future__ import annotations

import shutil
import sqlite3
import threading
from pathlib import Path
from typing import Any

import msgspec
import pytest
from _agents import start

import gen_agent
from gen_agent import GenAgent, NoReply
from gen_agent.backends.mock import MockBackend, text_turn
from gen_agent.store import (
    INTERRUPTED_NOTE,
    OUTCOME_UNKNOWN,
    SCHEMA_VERSION,
    InFlightTurn,
    InterruptedTurn,
    MemoryStore,
    SQLiteStore,
    StoreError,
    StoreSchemaError,
    ToolCallEntry,
)
from gen_agent.testing._model_server import Reply, ScriptedModelServer
from gen_agent.tools import ToolContext, tool

pytestmark = pytest.mark.usefixtures("agent_system")
V1 = Path(__file__).parents[1] / "fixtures" / "store" / "v1.sqlite"


# ---------------------------------------------------------------------- migration
def test_a_schema_1_file_is_migrated_in_place(tmp_path: Path) -> None:
    path = tmp_path / "v1.sqlite"
    shutil.copy(V1, path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    store = SQLiteStore(path)
    try:
        done = store.load("done")
        assert done is not None and done.totals.turns == 2 and done.state == b"\x01"
        assert done.totals.usage == {"input_tokens": 30, "output_tokens": 7}
        assert done.conversation == {"history": [{"role": "user", "content": "hi"}]}
        cut = store.load("cut")
        assert cut is not None and cut.in_flight is not None
        assert (cut.in_flight.ref, cut.in_flight.prompt, cut.in_flight.usage,
                cut.in_flight.phase) == ("ref-9", None, {}, "turn")
        assert store.journal("cut") == []
        lease = store.acquire("cut")
        store.journal_write(lease, ToolCallEntry(ref="r", call_id="c", tool="t", input={}))
        assert [e.call_id for e in store.journal("cut")] == ["c"]
    finally:
        store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 2
    SQLiteStore(path).close()  # opens again, nothing left to migrate


def test_an_interrupted_schema_1_turn_is_reported_after_the_upgrade(tmp_path: Path) -> None:
    path = tmp_path / "v1.sqlite"
    shutil.copy(V1, path)
    store = SQLiteStore(path)
    gen_agent.start_agent(Recorder, name="a", backend=MockBackend, store=store,
                          session_key="cut", backend_opts={"scripts": []})
    interrupted = gen_agent.status("a").store.interrupted_turn
    assert interrupted is not None and interrupted.ref == "ref-9"
    assert (interrupted.prompt, interrupted.finished, interrupted.in_doubt) == (None, (), ())
    gen_agent.stop("a")
    store.close()


def test_a_newer_file_is_still_refused(tmp_path: Path) -> None:
    path = tmp_path / "v1.sqlite"
    shutil.copy(V1, path)
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StoreSchemaError) as caught:
        SQLiteStore(path)
    assert (caught.value.found, caught.value.supported) == (SCHEMA_VERSION + 1, SCHEMA_VERSION)


# ---------------------------------------------------------------------- store API
def test_payloads_stay_out_of_repr() -> None:
    entry = ToolCallEntry(ref="r", call_id="c", tool="pay", input={"card": "4111-SECRET"},
                          result="paid SECRET")
    turn = InterruptedTurn(key="k", ref="r", origin="ask", attempt=1, started_at=0.0,
                           detected_at=0.0, prompt="my SECRET prompt", finished=(entry,),
                           response="SECRET")
    marker = InFlightTurn(ref="r", origin="ask", attempt=1, started_at=0, pid=1,
                          prompt="SECRET")
    for text in (repr(entry), repr(turn), repr(marker), str(turn)):
        assert "SECRET" not in text


# ---------------------------------------------------------------------- agents
LOG: list[tuple[str, Any]] = []
GATE: dict[str, threading.Event] = {}


@tool(side_effects=True)
def refund(order_id: str, amount: int, ctx: ToolContext) -> str:
    """Refund an order.

    Args:
        order_id: the order. amount: cents.
    """
    LOG.append(("refund", order_id, amount, ctx.idempotency_key))
    probe = GATE.get("probe")
    if probe is not None:
        LOG.append(("journal", probe()))
    entered = GATE.get("entered")
    if entered is not None:
        entered.set()
        GATE["release"].wait(10)
    return f"refunded {amount} on {order_id}"


@tool(side_effects=True, retry_safe=True)
def charge(order_id: str, ctx: ToolContext) -> str:
    """Charge an order (idempotent through the key)."""
    LOG.append(("charge", order_id, ctx.idempotency_key))
    entered = GATE.get("entered")
    if entered is not None:
        entered.set()
        GATE["release"].wait(10)
    return f"charged {order_id}"


@tool
def lookup(order_id: str) -> str:
    """Look an order up."""
    LOG.append(("lookup", order_id))
    return f"order {order_id}: open"


class Recorder(GenAgent):
    """Stores its state (answered turns); records `handle_info`."""

    persist_state = True
    infos: list[Any] = []

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return dict(opts["backend_opts"]), {"turns": 0}

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return NoReply({"turns": state["turns"] + 1})

    def handle_info(self, message: Any, state: Any) -> Any:
        type(self).infos.append(message)
        return NoReply(state)


@pytest.fixture(autouse=True)
def _fresh() -> Any:
    LOG.clear()
    GATE.clear()
    Recorder.infos = []
    yield
    release = GATE.get("release")
    if release is not None:
        release.set()


@pytest.fixture
def server() -> Any:
    pytest.importorskip("anthropic", reason="the anthropic extra is not installed")
    with ScriptedModelServer() as model:
        yield model


def _start(store: Any, server: Any, name: str = "a", module: Any = None, **opts: Any) -> Any:
    from gen_agent.backends.anthropic import AnthropicAPI

    backend_opts = {"api_key": "test-key", "base_url": server.url, "model": "claude-test",
                    "tools": [refund, charge, lookup]}
    return start(module or Recorder, name, backend=AnthropicAPI, store=store, session_key="k",
                 backend_opts=backend_opts, **opts)


def test_a_python_tool_is_journalled_before_it_runs_and_after(server: Any) -> None:
    store = MemoryStore()
    GATE["probe"] = lambda: [(e.call_id, e.finished_at is None) for e in store.journal("k")]
    server.enqueue(Reply.tool_use("refund", {"order_id": "o1", "amount": 5}, id="toolu_1"),
                   Reply.text("done"))
    _start(store, server)
    assert gen_agent.ask("a", "refund o1", timeout=10).text == "done"
    assert LOG[0][:3] == ("refund", "o1", 5) and len(LOG[0][3]) == 32
    assert LOG[1] == ("journal", [("toolu_1", True)])  # started, not finished, inside it
    assert store.journal("k") == []  # the answered turn's journal is cleared
    record = store.load("k")
    assert record is not None and record.in_flight is None


def _cut_turn(store: Any, server: Any, script: list[Reply], module: Any = None
              ) -> InterruptedTurn:
    """Run a turn whose side-effecting tool is cut short by stopping the agent inside it,
    then start a new owner: the `InterruptedTurn` it found."""
    GATE["entered"], GATE["release"] = threading.Event(), threading.Event()
    server.enqueue(*script)
    _start(store, server, shutdown_ms=50)
    gen_agent.tell("a", "refund o1 and look it up")
    assert GATE["entered"].wait(10)
    gen_agent.stop("a")
    GATE.pop("entered")
    _start(store, server, module=module)
    interrupted = gen_agent.status("a").store.interrupted_turn
    assert interrupted is not None
    return interrupted


def test_an_interrupted_turn_carries_prompt_calls_and_usage(server: Any) -> None:
    store = MemoryStore()
    both = Reply.message(*Reply.tool_use("lookup", {"order_id": "o1"}, id="toolu_l").blocks,
                         *Reply.tool_use("refund", {"order_id": "o1", "amount": 5},
                                         id="toolu_r").blocks,
                         stop_reason="tool_use", input_tokens=40, output_tokens=9)
    interrupted = _cut_turn(store, server, [both])
    assert interrupted.prompt == "refund o1 and look it up"
    assert interrupted.tools == ("refund", "charge", "lookup")
    assert [(e.call_id, e.tool, e.result) for e in interrupted.finished] == [
        ("toolu_l", "lookup", "order o1: open")]
    assert [(e.call_id, e.input, e.side_effects) for e in interrupted.in_doubt] == [
        ("toolu_r", {"order_id": "o1", "amount": 5}, True)]
    assert interrupted.usage["input_tokens"] == 40 and interrupted.usage["output_tokens"] == 9
    assert Recorder.infos == [interrupted]
    record = store.load("k")
    assert record is not None and record.totals.interrupted_turns == 1
    assert record.totals.usage["input_tokens"] == 40  # counted, so spend caps see it
    assert store.journal("k") == []


def test_resend_answers_journalled_calls_without_running_them(server: Any) -> None:
    store = MemoryStore()
    both = Reply.message(*Reply.tool_use("lookup", {"order_id": "o1"}, id="toolu_l").blocks,
                         *Reply.tool_use("refund", {"order_id": "o1", "amount": 5},
                                         id="toolu_r").blocks, stop_reason="tool_use")
    interrupted = _cut_turn(store, server, [both])
    LOG.clear()
    # The model re-issues both calls with new ids (same tools, same inputs, keys reordered).
    again = Reply.message(*Reply.tool_use("lookup", {"order_id": "o1"}, id="toolu_l2").blocks,
                          *Reply.tool_use("refund", {"amount": 5, "order_id": "o1"},
                                          id="toolu_r2").blocks, stop_reason="tool_use")
    server.enqueue(again, Reply.text("checked"))
    before = len(server.model_requests())
    response = gen_agent.resend("a", interrupted, timeout=10)
    assert response.text == "checked"
    assert LOG == []  # neither ran: one had a result, one is in doubt
    results = _tool_results(server.model_requests()[before + 1])
    assert results["toolu_l2"] == ("order o1: open", False)
    assert results["toolu_r2"] == (OUTCOME_UNKNOWN, True)


def test_an_agent_words_the_unknown_outcome_its_own_way(server: Any) -> None:
    class Careful(Recorder):
        outcome_unknown = "UNKNOWN: ask the payments team before refunding again"

    store = MemoryStore()
    interrupted = _cut_turn(store, server, [Reply.tool_use(
        "refund", {"order_id": "o1", "amount": 5}, id="toolu_r")], module=Careful)
    server.enqueue(Reply.tool_use("refund", {"order_id": "o1", "amount": 5}, id="toolu_r2"),
                   Reply.text("asked"))
    assert gen_agent.resend("a", interrupted, timeout=10).text == "asked"
    results = _tool_results(server.model_requests()[-1])
    assert results["toolu_r2"] == (Careful.outcome_unknown, True)


def test_a_retry_safe_tool_in_doubt_runs_again_with_the_original_key(server: Any) -> None:
    store = MemoryStore()
    interrupted = _cut_turn(store, server, [Reply.tool_use("charge", {"order_id": "o2"},
                                                           id="toolu_c")])
    first_key = LOG[0][2]
    GATE["release"].set()
    LOG.clear()
    server.enqueue(Reply.tool_use("charge", {"order_id": "o2"}, id="toolu_c2"),
                   Reply.text("charged"))
    assert gen_agent.resend("a", interrupted, timeout=10).text == "charged"
    assert list(LOG) == [("charge", "o2", first_key)]


def test_a_failed_started_write_keeps_a_side_effecting_tool_from_running(server: Any) -> None:
    class NoJournal(MemoryStore):
        def journal_write(self, lease: Any, entry: Any, **kw: Any) -> None:
            raise StoreError("io_error", "disk gone")

    store = NoJournal()
    server.enqueue(Reply.message(*Reply.tool_use("lookup", {"order_id": "o1"},
                                                 id="t1").blocks,
                                 *Reply.tool_use("refund", {"order_id": "o1", "amount": 1},
                                                 id="t2").blocks, stop_reason="tool_use"),
                   Reply.text("went on"))
    _start(store, server)
    assert gen_agent.ask("a", "go", timeout=10).text == "went on"  # the turn goes on
    assert LOG == [("lookup", "o1")]  # the read-only tool ran, the refund did not
    results = _tool_results(server.model_requests()[-1])
    assert results["t2"][1] is True and "not run" in results["t2"][0]
    assert gen_agent.status("a").store.last_error == ("journal", "io_error")


def test_a_death_between_conversation_and_state_is_reported_with_the_reply() -> None:
    store = MemoryStore()
    entered, release = threading.Event(), threading.Event()

    class Slow(Recorder):
        def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
            entered.set()
            release.wait(10)
            return NoReply({"turns": state["turns"] + 1})

    gen_agent.start_agent(Slow, name="a", backend=MockBackend, store=store,
                          session_key="k", shutdown_ms=50,
                          backend_opts={"scripts": [text_turn("hi!")]})
    gen_agent.tell("a", "say hi")
    assert entered.wait(10)
    try:
        gen_agent.stop("a")  # killed inside handle_response: the state write never happens
        # (a new owner first: the killed agent's thread, let go, finds its lease lost)
        gen_agent.start_agent(Recorder, name="b", backend=MockBackend, store=store,
                              session_key="k", backend_opts={"scripts": []})
    finally:
        release.set()
    interrupted = gen_agent.status("b").store.interrupted_turn
    assert interrupted is not None
    assert (interrupted.phase, interrupted.response, interrupted.prompt) == (
        "after_response", "hi!", "say hi")
    record = store.load("k")
    assert record is not None and record.totals.turns == 1  # answered: counted once
    assert record.totals.interrupted_turns == 0
    with pytest.raises(ValueError, match="answered"):
        gen_agent.resend("b", interrupted)


def _tool_results(request: Any) -> dict[str, tuple[str, bool]]:
    """The tool results a recorded Anthropic request sent back, by tool-use id."""
    found: dict[str, tuple[str, bool]] = {}
    for message in request.body["messages"]:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for block in content:
            if block.get("type") == "tool_result":
                text = block.get("content")
                if isinstance(text, list):
                    text = "".join(part.get("text", "") for part in text)
                found[block["tool_use_id"]] = (text, bool(block.get("is_error")))
    return found


def test_sessions_show_hides_turn_payloads_without_the_flag() -> None:
    from gen_agent.cli._sessions import describe_record
    from gen_agent.store import SessionRecord

    entry = ToolCallEntry(ref="r", call_id="c", tool="pay", input={"card": "SECRET"},
                          finished_at=1.0, result="paid SECRET")
    turn = InterruptedTurn(key="k", ref="r", origin="ask", attempt=1, started_at=0.0,
                           detected_at=0.0, prompt="SECRET prompt", finished=(entry,),
                           in_doubt=(entry,), usage={"input_tokens": 3})
    flight = InFlightTurn(ref="r", origin="ask", attempt=1, started_at=0, pid=1,
                          prompt="SECRET")
    record = SessionRecord(key="k", interrupted=turn, in_flight=flight)
    hidden = describe_record(record)
    assert "SECRET" not in msgspec.json.encode(hidden).decode()
    assert hidden["interrupted"]["usage"] == {"input_tokens": 3}
    assert hidden["interrupted"]["finished"][0]["call_id"] == "c"
    shown = describe_record(record, payload=True)
    assert shown["interrupted"]["prompt"] == "SECRET prompt"
    assert shown["interrupted"]["in_doubt"][0]["input"] == {"card": "SECRET"}


def test_an_interrupted_turns_tokens_count_against_the_spend_cap(server: Any) -> None:
    store = MemoryStore()
    GATE["entered"], GATE["release"] = threading.Event(), threading.Event()
    server.enqueue(Reply.tool_use("refund", {"order_id": "o1", "amount": 5}, id="toolu_r",
                                  input_tokens=40, output_tokens=9))
    _start(store, server, shutdown_ms=50)
    gen_agent.tell("a", "refund o1")
    assert GATE["entered"].wait(10)
    gen_agent.stop("a")
    _start(store, server, max_total_tokens=45)  # 49 tokens billed before the death
    with pytest.raises(gen_agent.TurnError) as refused:
        gen_agent.ask("a", "anything else?", timeout=10)
    assert refused.value.reason[0] == "budget_exceeded"


def _both() -> Reply:
    return Reply.message(*Reply.tool_use("lookup", {"order_id": "o1"}, id="toolu_l").blocks,
                         *Reply.tool_use("refund", {"order_id": "o1", "amount": 5},
                                         id="toolu_r").blocks, stop_reason="tool_use")


def test_the_resumed_history_shows_the_cut_turn_and_its_calls(server: Any) -> None:
    store = MemoryStore()
    _cut_turn(store, server, [_both()])
    server.enqueue(Reply.text("noted"))
    assert gen_agent.ask("a", "what happened?", timeout=10).text == "noted"
    messages = server.model_requests()[-1].body["messages"]
    assert messages[0] == {"role": "user", "content": "refund o1 and look it up"}
    assert [(b["type"], b["id"], b["name"]) for b in messages[1]["content"]] == [
        ("tool_use", "toolu_l", "lookup"), ("tool_use", "toolu_r", "refund")]
    assert _tool_results(server.model_requests()[-1]) == {
        "toolu_l": ("order o1: open", False), "toolu_r": (OUTCOME_UNKNOWN, True)}
    assert messages[3] == {"role": "assistant", "content": INTERRUPTED_NOTE}
    assert messages[4] == {"role": "user", "content": "what happened?"}


def test_an_agent_may_keep_the_history_to_the_completed_turns(server: Any) -> None:
    class Plain(Recorder):
        repair_interrupted_history = False

    store = MemoryStore()
    _cut_turn(store, server, [_both()], module=Plain)
    server.enqueue(Reply.text("noted"))
    gen_agent.ask("a", "what happened?", timeout=10)
    assert server.model_requests()[-1].body["messages"] == [
        {"role": "user", "content": "what happened?"}]


def test_a_backends_own_tools_are_journalled_from_their_events() -> None:
    store = MemoryStore()
    entered, release = threading.Event(), threading.Event()

    def bash_then_hang(prompt: str) -> Any:
        yield gen_agent.Event.new("tool_use", {"id": "b1", "name": "Bash",
                                               "input": {"command": "touch x"}})
        yield gen_agent.Event.new("tool_result", {"tool_use_id": "b1", "is_error": False,
                                                  "content": [{"type": "text", "text": "ok"}]})
        yield gen_agent.Event.new("tool_use", {"id": "b2", "name": "Bash",
                                               "input": {"command": "rm x"}})
        yield gen_agent.Event.new("usage", {"input_tokens": 7, "output_tokens": 2})
        entered.set()
        release.wait(10)
        yield from text_turn("late")

    gen_agent.start_agent(Recorder, name="a", backend=MockBackend, store=store,
                          session_key="k", shutdown_ms=50,
                          backend_opts={"scripts": [bash_then_hang]})
    gen_agent.tell("a", "clean up")
    assert entered.wait(10)
    try:
        gen_agent.stop("a")
        gen_agent.start_agent(Recorder, name="b", backend=MockBackend, store=store,
                              session_key="k", backend_opts={"scripts": []})
    finally:
        release.set()
    cut = gen_agent.status("b").store.interrupted_turn
    assert cut is not None
    assert [(e.call_id, e.source, e.result) for e in cut.finished] == [("b1", "event", "ok")]
    assert [(e.call_id, e.input) for e in cut.in_doubt] == [("b2", {"command": "rm x"})]


def test_openai_with_server_state_gets_the_cut_turn_as_input_items(server: Any) -> None:
    pytest.importorskip("openai", reason="the openai extra is not installed")
    from gen_agent.backends.openai import OpenAIResponses
    from gen_agent.testing._openai_protocol import openai_base_url

    store = MemoryStore()
    opts = {"api_key": "test-key", "base_url": openai_base_url(server), "model": "gpt-test",
            "store": True, "tools": [refund, charge, lookup]}
    GATE["entered"], GATE["release"] = threading.Event(), threading.Event()
    server.enqueue(Reply.text("hello"), _both())
    gen_agent.start_agent(Recorder, name="a", backend=OpenAIResponses, store=store,
                          session_key="k", backend_opts=opts, shutdown_ms=50)
    gen_agent.ask("a", "hi", timeout=10)
    gen_agent.tell("a", "refund o1 and look it up")
    assert GATE["entered"].wait(10)
    gen_agent.stop("a")
    gen_agent.start_agent(Recorder, name="a", backend=OpenAIResponses, store=store,
                          session_key="k", backend_opts=opts)
    server.enqueue(Reply.text("noted"))
    assert gen_agent.ask("a", "what happened?", timeout=10).text == "noted"
    body = server.model_requests()[-1].body
    assert body["previous_response_id"]  # continues from the last completed response
    items = body["input"]
    assert items[0] == {"role": "user", "content": "refund o1 and look it up"}
    calls = [(i["type"], i["call_id"], i["name"]) for i in items if i.get("type") ==
             "function_call"]
    assert calls == [("function_call", "toolu_l", "lookup"), ("function_call", "toolu_r",
                                                              "refund")]
    outputs = {i["call_id"]: i["output"] for i in items if i.get("type") ==
               "function_call_output"}
    assert outputs["toolu_l"] == "order o1: open"
    assert OUTCOME_UNKNOWN in outputs["toolu_r"]
    assert items[-2] == {"role": "assistant", "content": INTERRUPTED_NOTE}
    assert items[-1] == {"role": "user", "content": "what happened?"}



def _bash_then_hang(entered: threading.Event, release: threading.Event) -> Any:
    """A mock script: one finished Bash call, then one that hangs (in doubt when cut)."""
    def script(prompt: str) -> Any:
        yield gen_agent.Event.new("tool_use", {"id": "b1", "name": "Bash",
                                               "input": {"command": "ls"}})
        yield gen_agent.Event.new("tool_result", {"tool_use_id": "b1", "content": "a.txt"})
        yield gen_agent.Event.new("tool_use", {"id": "b2", "name": "Bash",
                                               "input": {"command": "rm a.txt"}})
        entered.set()
        release.wait(10)
        yield from text_turn("late")
    return script


def _recording(seen: list[str]) -> Any:
    """A mock script that records each prompt it is sent and answers "ok"."""
    def script(prompt: str) -> Any:
        seen.append(prompt)
        return text_turn("ok")
    return script


def test_a_cli_agent_may_ask_for_the_cut_turn_as_a_preamble() -> None:
    store = MemoryStore()
    entered, release = threading.Event(), threading.Event()
    seen: list[str] = []
    bash_then_hang, record = _bash_then_hang(entered, release), _recording(seen)

    class Told(Recorder):
        interrupted_preamble = True

    gen_agent.start_agent(Recorder, name="a", backend=MockBackend, store=store,
                          session_key="k", shutdown_ms=50,
                          backend_opts={"scripts": [bash_then_hang]})
    gen_agent.tell("a", "tidy up")
    assert entered.wait(10)
    try:
        gen_agent.stop("a")
        gen_agent.start_agent(Told, name="b", backend=MockBackend, store=store,
                              session_key="k", backend_opts={"scripts": [record, record]})
    finally:
        release.set()
    gen_agent.ask("b", "and now?", timeout=10)
    gen_agent.ask("b", "again", timeout=10)
    assert seen[0] == (
        "[Context: your previous turn was interrupted before it was answered (the process "
        "running it stopped).\nThe request was: tidy up\nTool calls made in that turn:\n"
        '- Bash {"command":"ls"} -> result: a.txt\n'
        f'- Bash {{"command":"rm a.txt"}} -> {OUTCOME_UNKNOWN}]\n\nand now?')
    assert seen[1] == "again"  # once


class KeepsCutTurns(MockBackend):
    """A backend whose own transcript keeps a cut turn's request and calls (as Codex's)."""

    keeps_cut_turn = frozenset({"prompt", "tool_calls"})


@pytest.mark.parametrize("stored_turn", [True, False])
def test_the_preamble_leaves_out_what_the_backends_transcript_kept(stored_turn: bool) -> None:
    store = MemoryStore()
    entered, release = threading.Event(), threading.Event()
    seen: list[str] = []
    bash_then_hang, record = _bash_then_hang(entered, release), _recording(seen)

    class Told(Recorder):
        interrupted_preamble = True

    first = [text_turn("hi", session_id="s-1")] if stored_turn else []
    gen_agent.start_agent(Recorder, name="a", backend=KeepsCutTurns, store=store,
                          session_key="k", shutdown_ms=50,
                          backend_opts={"scripts": [*first, bash_then_hang]})
    if stored_turn:
        gen_agent.ask("a", "hi", timeout=10)
    gen_agent.tell("a", "tidy up")
    assert entered.wait(10)
    try:
        gen_agent.stop("a")
        gen_agent.start_agent(Told, name="b", backend=KeepsCutTurns, store=store,
                              session_key="k", backend_opts={"scripts": [record]})
    finally:
        release.set()
    gen_agent.ask("b", "and now?", timeout=10)
    in_doubt = f'- Bash {{"command":"rm a.txt"}} -> {OUTCOME_UNKNOWN}]\n\nand now?'
    head = ("[Context: your previous turn was interrupted before it was answered (the process "
            "running it stopped).\n")
    if stored_turn:
        # The session resumed holds the request and the finished call: neither is repeated;
        # the in-doubt call stays, since a transcript's "aborted" does not say it may have run.
        assert seen == [
            f"{head}Its request is the unanswered message above.\nA tool call of it shown "
            "above as aborted, or without a result, may have run before the stop: check its "
            f"effect before repeating it.\nTool calls made in that turn:\n{in_doubt}"]
    else:  # cut before a session was stored: a fresh one, which kept nothing
        assert seen == [
            f"{head}The request was: tidy up\nTool calls made in that turn:\n"
            f'- Bash {{"command":"ls"}} -> result: a.txt\n{in_doubt}']
