"""Tests for `gen_agent._limits`: shared provider limits enforced at dispatch."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from _agents import WAIT_S, CallLog, PassThrough, start

import gen_agent
from gen_agent._errors import AgentStartError, TurnError
from gen_agent._limits import JoinedLimit, LimitStatus, ProviderLimit
from gen_agent.backends import mock
from gen_agent.testing._model_server import Reply, ScriptedModelServer

anthropic = pytest.importorskip("anthropic")


def test_bounds_are_checked_and_shared_limits_are_one_object() -> None:
    with pytest.raises(ValueError, match="max_concurrent must be a positive int"):
        ProviderLimit("k", max_concurrent=0)
    a = ProviderLimit.shared("test-shared-key", max_concurrent=3)
    assert ProviderLimit.shared("test-shared-key") is a
    assert ProviderLimit.shared("test-shared-key", max_concurrent=3) is a
    with pytest.raises(ValueError, match="exists with max_concurrent=3"):
        ProviderLimit.shared("test-shared-key", max_concurrent=4)


def test_the_start_option_takes_only_a_provider_limit() -> None:
    with pytest.raises(AgentStartError) as info:
        start(provider_limit={"max_concurrent": 2})
    assert "provider_limit must be a gen_agent.ProviderLimit" in str(info.value)


def test_a_waiting_agent_stays_responsive_and_its_status_shows_the_limit() -> None:
    limit = ProviderLimit("one-at-a-time", max_concurrent=1)
    held = mock.gate(mock.text_turn("first"), timeout=WAIT_S)
    log_b = CallLog()
    start(name="a", scripts=[held], provider_limit=limit)
    start(name="b", scripts=[mock.text_turn("second")], provider_limit=limit, log=log_b)
    gen_agent.tell("a", "hold the permit")
    assert held.wait_blocked(WAIT_S)
    ref = gen_agent.tell("b", "wait for it")
    status = gen_agent.status("b", timeout=WAIT_S)  # answered while b waits for a permit
    assert (status.state, status.queued) == ("idle", 1)
    assert status.provider_limit == LimitStatus(
        name="one-at-a-time", in_flight=1, max_concurrent=1, requests_per_minute=None,
        tokens_per_minute=None, requests_last_minute=1, tokens_last_minute=0, waiting=1,
        held_ms=0)
    assert log_b.of("pre_turn") == []  # nothing of b's turn ran yet
    held.release()
    log_b.wait_for(("handle_response", "wait for it"))
    assert gen_agent.poll("b", ref).response.text == "second"
    assert limit.status().in_flight == 0


def test_a_request_rate_holds_the_next_turn_for_its_window() -> None:
    limit = ProviderLimit("rpm", requests_per_minute=2)
    log = CallLog()
    start(scripts=[mock.text_turn(str(n)) for n in range(3)], provider_limit=limit, log=log)
    assert gen_agent.ask("a", "1", timeout=WAIT_S).text == "0"
    assert gen_agent.ask("a", "2", timeout=WAIT_S).text == "1"
    gen_agent.tell("a", "3")
    status = gen_agent.status("a", timeout=WAIT_S)
    assert (status.queued, status.provider_limit.requests_last_minute) == (1, 2)
    assert log.of("pre_turn") == [("pre_turn", "1"), ("pre_turn", "2")]


def test_a_stopped_waiter_is_forgotten() -> None:
    limit = ProviderLimit("forget", max_concurrent=1)
    held = mock.gate(mock.text_turn("x"), timeout=WAIT_S)
    start(name="a", scripts=[held], provider_limit=limit)
    start(name="b", scripts=[mock.text_turn("y")], provider_limit=limit)
    gen_agent.tell("a", "p")
    assert held.wait_blocked(WAIT_S)
    gen_agent.tell("b", "q")
    assert gen_agent.status("b").provider_limit.waiting == 1
    gen_agent.stop("b")
    assert limit.status().waiting == 0
    held.release()


# ---------------------------------------------------------------------- on a real client
class _Counting:
    """A scripted answer that records how many requests the server holds at once."""

    def __init__(self) -> None:
        self.active = 0
        self.max_active = 0
        self.lock = threading.Lock()

    def __call__(self, request: Any) -> Reply:
        with self.lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        time.sleep(0.02)  # keep the request in flight so that overlaps are visible
        with self.lock:
            self.active -= 1
        return Reply.text("ok")


def _start_api(server: ScriptedModelServer, name: str, limit: ProviderLimit) -> None:
    from gen_agent.backends.anthropic import AnthropicAPI

    start(PassThrough, name, backend=AnthropicAPI, provider_limit=limit,
          backend_opts={"api_key": "k", "base_url": server.url, "model": "claude-test"})


def test_two_concurrent_turns_per_key_across_six_agents() -> None:
    counting = _Counting()
    limit = ProviderLimit("anthropic:test", max_concurrent=2)
    with ScriptedModelServer([counting] * 30) as server:
        for i in range(6):
            _start_api(server, f"api{i}", limit)
        with ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(
                lambda i: [gen_agent.ask(f"api{i}", f"t{n}", timeout=30).text for n in range(5)],
                range(6)))
    assert answers == [["ok"] * 5] * 6
    assert counting.max_active == 2
    assert limit.status().in_flight == 0


def test_a_429_with_retry_after_holds_back_every_agent_on_the_key() -> None:
    limit = ProviderLimit("anthropic:held")
    replies = [Reply.http_error(429, retry_after="0.4"), Reply.text("b answered")]
    with ScriptedModelServer(replies) as server:
        _start_api(server, "a", limit)
        _start_api(server, "b", limit)
        with pytest.raises(TurnError) as info:
            gen_agent.ask("a", "first", timeout=30)
        assert info.value.reason.kind == "rate_limited"
        assert limit.status().held_ms > 0
        assert gen_agent.ask("b", "second", timeout=30).text == "b answered"
        first, second = server.model_requests()
    # b's request reached the server only once the key's hold was over
    assert second.received_ms - first.received_ms >= 350


def test_a_joined_limit_needs_a_permit_of_each_and_gives_back_what_it_held() -> None:
    tenant = ProviderLimit("tenant", max_concurrent=2)
    key = ProviderLimit("key", max_concurrent=1)
    joined = JoinedLimit(tenant, JoinedLimit(key))  # nested ones are flattened
    assert joined.parts() == (tenant, key) and joined.name == "tenant+key"
    woken: list[str] = []
    assert joined.try_acquire("w1", lambda: woken.append("w1"))
    assert not joined.try_acquire("w2", lambda: woken.append("w2"))  # the key's one is taken
    assert tenant.status().in_flight == 2 and key.status().waiting == 1  # w2 holds tenant's
    joined.release(7)  # w1's turn ended: both given back, its tokens counted on both
    assert woken == ["w2"] and tenant.status().tokens_last_minute == 7
    assert joined.try_acquire("w2", lambda: None)  # only the key's permit was missing
    assert (tenant.status().in_flight, key.status().in_flight) == (1, 1)
    joined.release()
    assert joined.try_acquire("w3", lambda: None)
    joined.release()
    assert joined.try_take() is None and joined.try_take() == 0.0
    assert (tenant.status().in_flight, key.status().in_flight) == (1, 1)  # no permit leaked
    joined.release()
    held = JoinedLimit(tenant, key)
    assert key.try_take() is None
    assert not held.try_acquire("w4", lambda: None)
    held.forget("w4")  # it stopped waiting: the tenant permit it held goes back
    assert tenant.status().in_flight == 0 and key.status().waiting == 0
    with pytest.raises(ValueError):
        JoinedLimit()
    with pytest.raises(ValueError):
        JoinedLimit(tenant, "key")  # type: ignore[arg-type]
