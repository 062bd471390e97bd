"""Tests for gen_agent._client: the bounded poll cache seen through the API (contract §4.16),
addressing rules and errors (§2.1), caller timeouts, completion recipients (§2.6), `AgentRef`,
`send` / `send_after`, and `backend_session`."""

from __future__ import annotations

import functools
import queue
from typing import Any

import _agents as agents
import pykka
import pytest

import gen_agent
from gen_agent import (
    AgentDown,
    AgentNotFound,
    CallTimeout,
    GenAgent,
    NoReply,
    RequestError,
    RequestRef,
    TurnError,
)
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend, MockSession

T = 5.0  # seconds: the bound of every wait in this file


class Agent(GenAgent):
    """Scripts from the start options; logs info messages and response prompts to `sink`."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        self.sink: queue.Queue[Any] = opts.get("sink") or queue.Queue()
        self.on_response = opts.get("on_response")
        return {"scripts": opts.get("scripts", [])}, None

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        if self.on_response is not None:
            self.on_response()
        return NoReply(state)

    def handle_info(self, message: Any, state: Any) -> Any:
        self.sink.put(("info", message))
        return NoReply(state)


start = functools.partial(agents.start, Agent)


def tell_and_wait(ref: gen_agent.AgentRef, prompt: str) -> tuple[RequestRef, Any]:
    """A tell whose completion is awaited; returns (ref, outcome)."""
    done: queue.Queue[Any] = queue.Queue()
    request = ref.tell_with_completion(prompt, done, timeout=T)
    message = done.get(timeout=T)
    assert message[3] == request
    return request, message[4]


# --- the bounded poll cache (§4.16) ----------------------------------------------------------


def test_the_poll_cache_keeps_the_newest_results_by_count() -> None:
    ref = start(max_tell_results=2, scripts=[mock.text_turn(t) for t in ("1", "2", "3")])

    requests = [tell_and_wait(ref, p)[0] for p in ("one", "two", "three")]

    polled = [ref.poll(r, timeout=T) for r in requests]
    assert polled[0] == gen_agent.PollResult(status="failed", reason="not_found")
    assert [(p.status, p.response.text if p.response else None) for p in polled[1:]] == [
        ("completed", "2"), ("completed", "3")]


def test_a_zero_count_caches_nothing_but_completions_are_still_delivered() -> None:
    ref = start(max_tell_results=0, scripts=[mock.text_turn("x"), mock.error("e")])

    ok_ref, ok = tell_and_wait(ref, "one")
    err_ref, err = tell_and_wait(ref, "two")

    assert ok[0] == "ok" and ok[1].text == "x" and err == ("error", "e")
    assert ref.poll(ok_ref, timeout=T).reason == "not_found"
    assert ref.poll(err_ref, timeout=T).reason == "not_found"


def test_failures_are_cached_too() -> None:
    ref = start(scripts=[mock.error(("quota", 1))])

    request, _ = tell_and_wait(ref, "q")

    assert ref.poll(request, timeout=T) == gen_agent.PollResult(status="failed",
                                                                reason=("quota", 1))


def test_a_result_bigger_than_the_byte_budget_evicts_older_results_and_itself() -> None:
    # Small results measure ~0.5 KB, the big one ~25 KB (term_size of (ref, result)).
    ref = start(max_tell_result_bytes=5_000,
                scripts=[mock.text_turn("a"), mock.text_turn("b"), mock.text_turn("x" * 5_000)])

    small = [tell_and_wait(ref, p)[0] for p in ("one", "two")]
    assert [ref.poll(r, timeout=T).status for r in small] == ["completed", "completed"]
    big, outcome = tell_and_wait(ref, "big")

    assert outcome[0] == "ok" and len(outcome[1].text) == 5_000  # still delivered
    assert [ref.poll(r, timeout=T).reason for r in (*small, big)] == ["not_found"] * 3


def test_the_byte_budget_prunes_the_oldest_results_first() -> None:
    ref = start(scripts=[mock.text_turn("a")])
    _, outcome = tell_and_wait(ref, "probe")
    size = gen_agent.term_size((RequestRef.new().id, outcome))
    ref.stop()
    ref = start(max_tell_result_bytes=2 * size + size // 2,
                scripts=[mock.text_turn("a") for _ in range(3)])

    requests = [tell_and_wait(ref, "probe")[0] for _ in range(3)]

    assert [ref.poll(r, timeout=T).status for r in requests] == ["failed", "completed",
                                                                 "completed"]


def test_a_cancellation_is_cached_and_idempotent() -> None:
    g = mock.gate(mock.text_turn("x"))
    ref = start(scripts=[g])
    ref.tell("busy", timeout=T)
    g.wait_blocked(T)
    queued = ref.tell("queued", timeout=T)

    assert ref.cancel_request(queued, timeout=T) == "cancelled"
    assert ref.cancel_request(queued, timeout=T) == "cancelled"
    g.release()

    assert ref.poll(queued, timeout=T).reason == "cancelled"


# --- addressing (§2.1) -----------------------------------------------------------------------


@pytest.mark.parametrize("call", [
    lambda: gen_agent.ask("ghost", "q", T),
    lambda: gen_agent.tell("ghost", "q", T),
    lambda: gen_agent.tell_with_completion("ghost", "q", queue.Queue(), timeout=T),
    lambda: gen_agent.notify_ack("ghost", "e", T),
    lambda: gen_agent.status("ghost", T),
    lambda: gen_agent.runtime_snapshot("ghost", T),
    lambda: gen_agent.reset_session("ghost", T),
    lambda: gen_agent.drain("ghost", T),
    lambda: gen_agent.backend_session("ghost", T),
    lambda: gen_agent.stop("ghost"),
])
def test_synchronous_calls_to_a_missing_agent_raise_agent_not_found(call: Any) -> None:
    with pytest.raises(AgentNotFound) as info:
        call()
    assert isinstance(info.value, LookupError) and info.value.reason == "not_found"


def test_lookups_that_answer_not_found_instead_of_raising() -> None:
    ref = RequestRef.new()
    assert gen_agent.poll("ghost", ref).reason == "not_found"
    assert gen_agent.interrupt_request("ghost", ref) == "not_found"
    assert gen_agent.cancel_request("ghost", ref) == "not_found"


def test_asynchronous_calls_to_a_missing_agent_do_nothing() -> None:
    gen_agent.notify("ghost", "e")
    gen_agent.interrupt("ghost")
    gen_agent.halt("ghost")
    gen_agent.resume("ghost")
    gen_agent.send("ghost", "m")
    gen_agent.send_after("ghost", "m", 0).cancel()


def test_the_agent_ref_addresses_its_own_system() -> None:
    ref = start(scripts=[mock.text_turn("inner")])
    with gen_agent.AgentSystem():  # another system is now the current one
        assert gen_agent.whereis("a") is None
        assert ref.ask("q", timeout=T).text == "inner"


def test_a_call_from_the_agent_thread_to_itself_is_refused() -> None:
    refused: queue.Queue[Any] = queue.Queue()

    def call_self() -> None:
        try:
            gen_agent.status(gen_agent.current_name(), T)
        except RequestError as exc:
            refused.put(exc.reason)

    ref = start(scripts=[mock.text_turn("x")], on_response=call_self)
    ref.ask("q", timeout=T)

    assert refused.get(timeout=T) == "calling_self"
    assert ref.status(timeout=T).state == "idle"


# --- caller timeouts (§2.1, §4.14) -----------------------------------------------------------


def test_a_caller_timeout_leaves_the_request_queued_and_the_agent_unaffected() -> None:
    g = mock.gate(mock.text_turn("first"))
    ref = start(scripts=[g, mock.text_turn("late"), mock.text_turn("sync")])
    first = ref.tell("first", timeout=T)
    g.wait_blocked(T)

    with pytest.raises(CallTimeout) as info:
        ref.ask("slow", timeout=0.05)
    assert isinstance(info.value, TimeoutError)
    assert ref.status(timeout=T).queued == 1  # still queued: this caller is alive
    g.release()

    assert ref.ask("sync", timeout=T).text == "sync"  # FIFO: "slow" ran before it
    assert MockBackend.history("a") == ["first", "slow", "sync"]
    assert ref.poll(first, timeout=T).status == "completed"


# --- completion recipients (§2.6) ------------------------------------------------------------


class Collector(pykka.ThreadingActor):
    def __init__(self, sink: queue.Queue[Any]) -> None:
        super().__init__()
        self.sink = sink

    def on_receive(self, message: Any) -> None:
        self.sink.put(message)


def test_every_kind_of_recipient_receives_exactly_one_completion() -> None:
    ref = start(scripts=[mock.text_turn(t) for t in "abcd"])
    into_queue: queue.Queue[Any] = queue.Queue()
    into_callable: list[Any] = []
    into_actor: queue.Queue[Any] = queue.Queue()
    actor = Collector.start(into_actor)
    info_sink: queue.Queue[Any] = queue.Queue()
    listener = start(name="listener", sink=info_sink)
    try:
        refs = [ref.tell_with_completion(p, r, timeout=T) for p, r in (
            ("q", into_queue), ("c", into_callable.append), ("p", actor), ("l", listener))]
        received = [into_queue.get(timeout=T), into_actor.get(timeout=T),
                    info_sink.get(timeout=T)[1]]
        ref.status(timeout=T)
    finally:
        actor.stop(timeout=T)

    assert [m[3] for m in received] == [refs[0], refs[2], refs[3]]
    assert [m[3] for m in into_callable] == [refs[1]]
    for message in (*received, *into_callable):
        assert message[:3] == ("gen_agent", "completion", "a") and message[4][0] == "ok"
    assert into_queue.empty() and into_actor.empty() and info_sink.empty()


def test_a_failing_recipient_is_ignored() -> None:
    def broken(message: Any) -> None:
        raise RuntimeError("recipient is gone")

    ref = start(scripts=[mock.text_turn("x"), mock.text_turn("y")])
    ref.tell_with_completion("q", broken, timeout=T)

    assert ref.ask("next", timeout=T).text == "y"


def test_an_invalid_on_halt_policy_raises_in_the_caller() -> None:
    ref = start(scripts=[mock.text_turn("x")])

    with pytest.raises(ValueError, match="on_halt"):
        ref.tell_with_completion("q", queue.Queue(), on_halt="drop")

    assert MockBackend.history("a") == []


def test_a_completion_may_arrive_before_tell_with_completion_returns() -> None:
    done: queue.Queue[Any] = queue.Queue()
    ref = start(scripts=[])  # no script left: a synchronous dispatch error

    request = ref.tell_with_completion("q", done, timeout=T)

    assert done.get(timeout=T) == ("gen_agent", "completion", "a", request,
                                   ("error", "no_script"))


# --- AgentRef --------------------------------------------------------------------------------


def test_agent_ref_identity_liveness_and_exit() -> None:
    ref = start()
    same = gen_agent.whereis("a")

    assert ref == same and hash(ref) == hash(same) and ref.name == "a"
    assert ref.is_alive() and ref.exit_reason is None
    assert ref.wait_stopped(0) is False
    assert "Agent" in repr(ref)
    ref.stop()
    assert not ref.is_alive() and ref.exit_reason == "shutdown" and ref.wait_stopped(T)
    assert ref != start()  # a new incarnation under the same name


def test_an_old_agent_ref_never_reaches_a_new_incarnation_of_its_name() -> None:
    sink: queue.Queue[Any] = queue.Queue()
    old = start(scripts=[mock.text_turn("old")])
    old.stop()
    new = start(sink=sink, scripts=[mock.text_turn("new")])

    with pytest.raises(AgentDown):
        old.ask("q", timeout=T)
    old.send_info("for the old one")  # a cast to a stopped incarnation is dropped
    new.send_info("for the new one")

    assert sink.get(timeout=T) == ("info", "for the new one")
    assert gen_agent.ask("a", "q", T).text == "new"  # the name reaches the new one
    assert MockBackend.history("a") == ["q"]


# --- send / send_after / backend_session -----------------------------------------------------


def test_send_and_send_after_deliver_to_handle_info() -> None:
    sink: queue.Queue[Any] = queue.Queue()
    start(sink=sink)

    gen_agent.send("a", "now")
    gen_agent.send_after("a", "later", 10)

    assert sink.get(timeout=T) == ("info", "now")
    assert sink.get(timeout=T) == ("info", "later")


def test_a_cancelled_send_after_is_not_delivered() -> None:
    sink: queue.Queue[Any] = queue.Queue()
    start(sink=sink)

    gen_agent.send_after("a", "cancelled", 20).cancel()
    gen_agent.send_after("a", "delivered", 40)

    assert sink.get(timeout=T) == ("info", "delivered")
    assert sink.empty()


def test_backend_session_returns_the_raw_session() -> None:
    ref = start(scripts=[mock.text_turn("x", session_id="s-7")])
    ref.ask("q", timeout=T)

    session = gen_agent.backend_session("a")

    assert isinstance(session, MockSession) and session.session_id == "s-7"
    assert MockBackend.history("a") == ["q"]


def test_turn_errors_carry_their_reason_as_data() -> None:
    ref = start(scripts=[mock.error({"code": 429})])

    with pytest.raises(TurnError) as info:
        ref.ask("q", timeout=T)

    assert info.value.reason == {"code": 429}


def test_on_exit_reports_the_incarnation_and_its_reason_once() -> None:
    exits: queue.Queue[Any] = queue.Queue()
    agent = agents.start(agents.Scripted, "watched")
    agent.on_exit(lambda ref, reason: exits.put((ref, reason)))
    agent.stop()
    assert exits.get(timeout=10) == (agent, "shutdown")
    agent.on_exit(lambda ref, reason: exits.put(("late", reason)))  # already stopped: at once
    assert exits.get(timeout=10) == ("late", "shutdown")
    assert exits.empty()


def test_a_full_completion_queue_never_blocks_the_agent() -> None:
    full: queue.Queue[Any] = queue.Queue(maxsize=1)
    full.put("occupied")
    agent = agents.start(agents.Scripted, "full-queue",
                         [mock.text_turn("one"), mock.text_turn("two")])
    agent.tell_with_completion("first", full)  # its completion cannot fit: dropped
    assert agent.ask("second", timeout=10).text == "two"  # the agent was not blocked
    assert full.get_nowait() == "occupied" and full.empty()
