"""Agents on a session store, in one process: resume, write order, failure reporting, leases,
corrupt records, interrupted turns, supervisors and pools (issue #22)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import _agents as agents
import msgspec
import pytest

import gen_agent
from gen_agent import AgentStartError, GenAgent, NoReply, Pool, Supervisor, TurnError, child_spec
from gen_agent._client import backend_session
from gen_agent.backends.mock import MockBackend, raising, text_turn
from gen_agent.store import (
    STORE_ERROR,
    InFlightTurn,
    InterruptedTurn,
    MemoryStore,
    SQLiteStore,
    StoreError,
)
from gen_agent.telemetry import attach, detach
from gen_agent.testing._helpers import wait_for_state

pytestmark = pytest.mark.usefixtures("agent_system")


class Counter(GenAgent):
    """Counts its answered turns; stores its state; records what the store held when
    `handle_response` ran and every message `handle_info` got."""

    persist_state = True
    seen: list[Any] = []

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        scripts = [text_turn(f"answer {i}") for i in range(opts.get("turns", 5))]
        return {"scripts": scripts}, {"turns": 0}

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        probe = type(self).probe
        if probe is not None:
            type(self).seen.append(probe())
        return NoReply({"turns": state["turns"] + 1})

    def handle_error(self, ref: Any, reason: Any, state: Any) -> Any:
        type(self).seen.append(("error", reason))
        return NoReply(state)

    def handle_info(self, message: Any, state: Any) -> Any:
        type(self).seen.append(("info", message))
        return NoReply(state)

    probe: Any = None


@pytest.fixture(autouse=True)
def _fresh_counter() -> None:
    Counter.seen = []
    Counter.probe = None


def start(store: Any, name: str = "a", key: str = "k", **opts: Any) -> Any:
    return agents.start(Counter, name, store=store, session_key=key, **opts)


class FlakyStore(MemoryStore):
    """A MemoryStore whose writes of chosen fields fail (`fail` holds field names)."""

    def __init__(self) -> None:
        super().__init__()
        self.fail: set[str] = set()

    def update(self, lease: Any, **fields: Any) -> None:
        if self.fail & set(fields):
            raise StoreError("io_error", "injected")
        super().update(lease, **fields)


def test_a_restarted_agent_resumes_state_totals_and_session(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    start(store)
    gen_agent.ask("a", "one", timeout=5)
    gen_agent.ask("a", "two", timeout=5)
    assert gen_agent.status("a").store.resumed is False
    gen_agent.stop("a")
    start(store)
    status = gen_agent.status("a")
    assert status.agent_state == {"turns": 2}
    assert (status.store.key, status.store.resumed, status.store.interrupted_turn) == (
        "k", True, None)
    record = store.load("k")
    assert record is not None and record.totals.turns == 2 and record.backend == "MockBackend"
    assert record.last_outcome is not None and record.last_outcome.ok is True
    store.close()


def test_the_conversation_is_written_before_handle_response_and_state_after() -> None:
    store = MemoryStore()
    Counter.probe = lambda: store.load("k")
    start(store)
    gen_agent.ask("a", "one", timeout=5)
    seen = Counter.seen[0]
    assert seen.totals.turns == 1  # written before the callback
    # ...with a marker saying the decision is not stored yet (a death now is reported)
    assert seen.in_flight is not None and seen.in_flight.phase == "after_response"
    assert seen.in_flight.prompt == "one"
    assert seen.state is None  # the state is written after the decision callback
    record = store.load("k")
    assert record is not None and msgspec.msgpack.decode(record.state) == {"turns": 1}
    assert record.in_flight is None  # and the marker goes with it


def test_a_failed_conversation_write_fails_the_turn_through_handle_error() -> None:
    store = FlakyStore()
    start(store)
    store.fail = {"conversation"}
    with pytest.raises(TurnError) as caught:
        gen_agent.ask("a", "one", timeout=5)
    assert caught.value.reason == ("store_failed", "io_error")
    assert Counter.seen == [("error", ("store_failed", "io_error"))]
    status = gen_agent.status("a")
    assert status.agent_state == {"turns": 0}  # handle_response never ran
    assert status.store.last_error == ("conversation", "io_error")
    store.fail = set()
    assert gen_agent.ask("a", "two", timeout=5).text == "answer 1"
    assert gen_agent.status("a").store.last_error is None


def test_a_failed_state_write_keeps_the_answer_and_is_retried() -> None:
    store = FlakyStore()
    events: list[dict[str, Any]] = []
    attach("store-test", STORE_ERROR, lambda _n, _m, meta, _c: events.append(meta))
    try:
        start(store)
        store.fail = {"state"}
        assert gen_agent.ask("a", "one", timeout=5).text == "answer 0"
        status = gen_agent.status("a")
        assert status.store.state_pending is True
        assert status.store.last_error == ("state", "io_error")
        assert events == [{"agent": "a", "key": "k", "operation": "state", "kind": "io_error"}]
        store.fail = set()
        gen_agent.ask("a", "two", timeout=5)
        status = gen_agent.status("a")
        assert (status.store.state_pending, status.store.last_error) == (False, None)
        record = store.load("k")
        assert record is not None and msgspec.msgpack.decode(record.state) == {"turns": 2}
    finally:
        detach("store-test")


def test_a_turn_that_was_running_is_reported_not_replayed() -> None:
    store = MemoryStore()
    lease = store.acquire("k")
    flight = InFlightTurn(ref="dead-1", origin="tell", attempt=2, started_at=10.0, pid=1)
    store.update(lease, in_flight=flight, conversation={"session_id": "s-1"})
    store.release(lease)
    start(store)
    interrupted = gen_agent.status("a").store.interrupted_turn
    assert isinstance(interrupted, InterruptedTurn)
    assert (interrupted.key, interrupted.ref, interrupted.origin, interrupted.attempt,
            interrupted.started_at) == ("k", "dead-1", "tell", 2, 10.0)
    assert Counter.seen == [("info", interrupted)]
    assert MockBackend.history("a") == []  # nothing was replayed
    assert backend_session("a").session_id == "s-1"  # the conversation was restored
    record = store.load("k")
    assert record is not None and record.in_flight is None and record.interrupted == interrupted


def test_a_stopped_running_turn_is_reported_at_the_next_start() -> None:
    store = MemoryStore()
    release = threading.Event()

    def held(prompt: str) -> list[gen_agent.Event]:
        release.wait(5)
        return text_turn("late")

    gen_agent.start_agent(Counter, name="a", backend=MockBackend, store=store, session_key="k")
    backend_session("a")._scripts.appendleft(held)  # the next turn blocks until released
    gen_agent.tell("a", "blocked")
    wait_for_state("a", lambda s: s.state == "processing")
    release.set()
    gen_agent.stop("a")
    start(store)
    assert gen_agent.status("a").store.interrupted_turn is not None


def test_one_live_owner_per_key_in_one_process() -> None:
    store = MemoryStore()
    start(store)
    with pytest.raises(AgentStartError) as caught:
        start(store, name="b")
    reason = caught.value.reason
    assert reason == ("session_leased", "k", {"pid": os.getpid(), "host": reason[2]["host"]})
    start(store, name="c", key="other")  # other keys are unaffected


def test_a_corrupt_record_is_a_start_error_naming_the_key() -> None:
    store = MemoryStore()
    store.corrupt("bad", "totals", b"\xc1")
    with pytest.raises(AgentStartError) as caught:
        start(store, key="bad")
    assert caught.value.reason == ("store_corrupt", "bad", "field 'totals' does not decode")
    start(store, name="b", key="good")
    assert gen_agent.ask("b", "hi", timeout=5).text == "answer 0"
    with pytest.raises(AgentStartError):  # the lease was released: the error repeats
        start(store, name="c", key="bad")


def test_a_state_that_does_not_decode_is_corrupt() -> None:
    store = MemoryStore()
    store.corrupt("k", "state", msgspec.msgpack.encode(b"\xc1"))
    with pytest.raises(AgentStartError) as caught:
        start(store)
    assert caught.value.reason == ("store_corrupt", "k", "the agent state does not decode")


def test_store_options_are_validated() -> None:
    with pytest.raises(AgentStartError) as caught:
        gen_agent.start_agent(Counter, name="a", backend=MockBackend, store=MemoryStore())
    assert caught.value.reason == ("init_failed", "error", "ValueError")
    with pytest.raises(AgentStartError):
        gen_agent.start_agent(Counter, name="a", backend=MockBackend, session_key="k")
    with pytest.raises(AgentStartError):
        gen_agent.start_agent(Counter, name="a", backend=MockBackend, store=object(),
                              session_key="k")


def test_without_persist_state_only_the_conversation_is_stored() -> None:
    class Plain(Counter):
        persist_state = False

    store = MemoryStore()
    gen_agent.start_agent(Plain, name="a", backend=MockBackend, store=store, session_key="k")
    gen_agent.ask("a", "one", timeout=5)
    gen_agent.stop("a")
    record = store.load("k")
    assert record is not None and record.state is None and record.totals.turns == 1
    gen_agent.start_agent(Plain, name="a", backend=MockBackend, store=store, session_key="k")
    assert gen_agent.status("a").agent_state == {"turns": 0}


def test_a_supervisor_restart_resumes_from_the_store() -> None:
    class Crashy(Counter):
        def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
            if response.prompt == "crash":
                raise ValueError("boom")
            return super().handle_response(ref, response, state)

    store = MemoryStore()
    starts: list[Any] = []
    restarted = threading.Event()

    def listen(event: Any) -> None:
        if event.kind == "started":
            starts.append(event)
            if len(starts) == 2:
                restarted.set()

    sup = Supervisor([child_spec(Crashy, name="w", backend=MockBackend, restart="permanent",
                                 store=store, session_key="k")], listener=listen)
    try:
        gen_agent.ask("w", "one", timeout=5)
        with pytest.raises(gen_agent.AgentDown):
            gen_agent.ask("w", "crash", timeout=5)
        assert restarted.wait(5)
        status = gen_agent.status("w")
        assert status.store.resumed is True
        assert status.agent_state == {"turns": 1}
    finally:
        sup.stop()


def test_pool_workers_each_get_their_own_key() -> None:
    store = MemoryStore()
    with Pool(Counter, size=2, backend=MockBackend, name_prefix="p", store=store,
              session_key="pool", turns=50) as pool:
        pool.map(["a", "b", "c", "d"], timeout=10)
    assert store.list_keys() == ["pool/p-0", "pool/p-1"]
    turns = [store.load(key).totals.turns for key in store.list_keys()]  # type: ignore[union-attr]
    assert sum(turns) == 4


def test_a_failed_turns_reason_is_stored_in_portable_form() -> None:
    class Raising(Counter):
        def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
            return {"scripts": [raising(ValueError("secret detail"))]}, {"turns": 0}

    store = MemoryStore()
    gen_agent.start_agent(Raising, name="a", backend=MockBackend, store=store, session_key="k")
    with pytest.raises(TurnError) as caught:
        gen_agent.ask("a", "one", timeout=5)
    assert caught.value.reason[0] == "task_crashed"
    record = store.load("k")
    assert record is not None and record.last_outcome is not None
    assert record.in_flight is None and record.last_outcome.ok is False
    kind, error = record.last_outcome.reason  # data only: no exception object survives
    assert kind == "task_crashed"
    assert isinstance(error, dict) and error["type_name"] == "ValueError"
    assert error["module"] == "builtins"


def test_a_reset_session_is_stored_at_once() -> None:
    class Resuming(Counter):
        def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
            backend_opts, state = super().init_agent(opts)
            return {**backend_opts, "session_id": "conversation-1"}, state

    store = MemoryStore()
    gen_agent.start_agent(Resuming, name="a", backend=MockBackend, store=store, session_key="k")
    gen_agent.ask("a", "one", timeout=5)
    record = store.load("k")
    assert record is not None and record.conversation == {"session_id": "conversation-1"}
    gen_agent.reset_session("a")
    record = store.load("k")
    assert record is not None and record.conversation == {"session_id": None}


def test_a_killed_agent_frees_its_key_at_once() -> None:
    entered, release = threading.Event(), threading.Event()

    class Stuck(Counter):
        def handle_event(self, event: Any, state: Any) -> Any:
            entered.set()
            release.wait(10)
            return NoReply(state)

    store = MemoryStore()
    gen_agent.start_agent(Stuck, name="a", backend=MockBackend, store=store, session_key="k",
                          shutdown_ms=50)
    gen_agent.notify("a", "block")
    assert entered.wait(5)
    try:
        gen_agent.stop("a")  # the window passes: killed, no cleanup ran, no release
        start(store, name="b")  # the key is free for a new owner at once
        assert gen_agent.status("b").store.resumed is False
    finally:
        release.set()


def test_state_changed_by_a_notification_is_stored_without_a_turn() -> None:
    class Noting(Counter):
        def handle_event(self, event: Any, state: Any) -> Any:
            return NoReply({**state, "note": event})

    store = MemoryStore()
    gen_agent.start_agent(Noting, name="a", backend=MockBackend, store=store, session_key="k")
    assert gen_agent.notify_ack("a", "remember me", timeout=5) is None
    record = store.load("k")
    assert record is not None and record.state is not None
    assert msgspec.msgpack.decode(record.state) == {"turns": 0, "note": "remember me"}
