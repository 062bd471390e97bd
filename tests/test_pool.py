"""Worker pools (gen_agent._pool): routing, results delivered once, overload per task,
quiescence, resize, and crashed workers replaced without losing undispatched work.

Contract §10 ("Pool") and issue 7. Turns that must stay in flight block in a mock script on
a `threading.Event` the test sets; the script reports that it is blocked through a queue.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections import Counter
from typing import Any

import pytest

import gen_agent
from gen_agent import (
    AgentStartError,
    CallTimeout,
    GenAgent,
    InitAgentError,
    NoReply,
    Prompt,
    RequestError,
    TurnError,
)
from gen_agent._pool import Pool, PoolRef
from gen_agent._status import OverloadInfo
from gen_agent.backends.mock import MockBackend, error_turn, text_turn
from gen_agent.testing._helpers import wait_for_state

CRASH = ("callback_failed", "error", "ValueError")
INTENSITY = ("shutdown", "reached_max_restart_intensity")


class Holds:
    """Scripts for pool workers: "hold*" prompts block until `release`; "fail" is a turn
    error; "crash" makes handle_response raise; "chain" self-chains a "hold-chained" turn."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.held: queue.Queue[str] = queue.Queue()

    def script(self, prompt: str) -> list[gen_agent.Event]:
        if prompt.startswith("hold"):
            self.held.put(prompt)
            assert self.release.wait(10), "the test never released a held turn"
        if prompt == "fail":
            return error_turn("boom")
        if prompt in ("crash", "chain"):
            return text_turn(prompt)
        return text_turn(f"echo:{prompt}")

    def options(self) -> dict[str, Any]:
        return {"scripts": [self.script] * 500}

    def wait_held(self, count: int) -> list[str]:
        return [self.held.get(timeout=5) for _ in range(count)]


class PoolWorker(GenAgent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        refuse = opts.get("refuse")
        if refuse is not None and refuse():
            raise InitAgentError("refused")
        return {"scripts": opts["scripts"]}, {}

    def handle_response(self, ref: Any, response: Any, state: Any) -> NoReply | Prompt:
        if response.text == "crash":
            raise ValueError("the marked prompt")
        if response.text == "chain":
            return Prompt("hold-chained", state)
        return NoReply(state)


@pytest.fixture
def holds() -> Holds:
    return Holds()


def make_pool(holds: Holds, **kwargs: Any) -> Pool:
    kwargs.setdefault("size", 2)
    return Pool(PoolWorker, backend=MockBackend, name_prefix="w", **holds.options(), **kwargs)


def histories(pool: Pool) -> dict[str, list[str]]:
    return {name: MockBackend.history(name) for name in pool.workers()}


# ----------------------------------------------------------------------------- the recipe test
def test_four_workers_take_400_concurrent_submissions_100_each(holds):
    pool = make_pool(holds, size=4, routing="round_robin")
    prompts = [f"task-{i}" for i in range(400)]
    refs: dict[str, PoolRef] = {}
    lock = threading.Lock()
    go = threading.Barrier(8)

    def submitter(chunk: list[str]) -> None:
        go.wait(5)
        for prompt in chunk:
            ref = pool.submit(prompt)
            with lock:
                refs[prompt] = ref

    threads = [threading.Thread(target=submitter, args=(prompts[i::8],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(refs) == 400 and len(set(refs.values())) == 400

    for prompt, ref in refs.items():
        assert pool.result(ref, timeout=30).text == f"echo:{prompt}"
        with pytest.raises(LookupError):
            pool.result(ref, timeout=0)  # each outcome is handed out once
    done = histories(pool)
    assert sorted(len(h) for h in done.values()) == [100, 100, 100, 100]
    assert Counter(p for h in done.values() for p in h) == Counter(prompts)  # each ran once
    status = pool.status()
    assert [(w.dispatched, w.completed) for w in status.workers] == [(100, 100)] * 4
    assert (status.queued, status.in_flight) == (0, 0)
    pool.stop(timeout=10)


def test_map_returns_responses_in_order(holds):
    with make_pool(holds, size=3) as pool:
        prompts = [f"p{i}" for i in range(30)]
        assert [r.text for r in pool.map(prompts, timeout=30)] == [f"echo:{p}" for p in prompts]


def test_a_failed_task_raises_turn_error_with_the_turn_reason(holds):
    with make_pool(holds) as pool:
        ok, bad = pool.submit("fine"), pool.submit("fail")
        assert pool.result(ok, timeout=5).text == "echo:fine"
        with pytest.raises(TurnError) as info:
            pool.result(bad, timeout=5)
        assert info.value.reason == "boom"
        with pytest.raises(TurnError) as info:
            pool.map(["a", "fail", "b"], timeout=5)
        assert info.value.reason == "boom"


# ----------------------------------------------------------------------------- routing
def test_least_loaded_sends_work_to_the_idle_worker(holds):
    with make_pool(holds, size=2) as pool:
        held = pool.submit("hold")
        holds.wait_held(1)
        quick = [pool.submit(f"q{i}") for i in range(3)]
        assert [pool.result(r, timeout=5).text for r in quick] == ["echo:q0", "echo:q1", "echo:q2"]
        busy = [w for w in pool.status().workers if w.in_flight]
        assert len(busy) == 1 and busy[0].dispatched == 1  # the quick ones all went elsewhere
        holds.release.set()
        assert pool.result(held, timeout=5).text == "echo:hold"


def test_tasks_wait_in_the_pool_until_a_worker_has_capacity(holds):
    with make_pool(holds, size=1) as pool:
        first = pool.submit("hold")
        holds.wait_held(1)
        later = [pool.submit(f"t{i}") for i in range(3)]
        status = pool.status()
        assert (status.queued, status.in_flight) == (3, 1)
        with pytest.raises(CallTimeout):
            pool.result(later[0], timeout=0.05)  # still queued; the outcome stays collectable
        holds.release.set()
        assert pool.result(first, timeout=5).text == "echo:hold"
        assert [pool.result(r, timeout=5).text for r in later] == ["echo:t0", "echo:t1", "echo:t2"]
        assert histories(pool) == {"w-0": ["hold", "t0", "t1", "t2"]}  # FIFO


# ----------------------------------------------------------------------------- overload
def test_pool_queue_overload_is_surfaced_per_task(holds):
    with make_pool(holds, size=1, max_queued_tasks=1) as pool:
        running = pool.submit("hold")
        holds.wait_held(1)
        queued = pool.submit("queued")
        refused = pool.submit("refused")
        with pytest.raises(TurnError) as info:
            pool.result(refused, timeout=5)
        kind, overload = info.value.reason
        assert kind == "overloaded" and isinstance(overload, OverloadInfo)
        assert (overload.queue, overload.limit) == ("prompts", "count")
        assert (overload.pending_count, overload.max_count) == (1, 1)
        holds.release.set()
        assert pool.result(running, timeout=5).text == "echo:hold"
        assert pool.result(queued, timeout=5).text == "echo:queued"


def test_a_workers_own_mailbox_overload_is_surfaced_per_task(holds):
    with make_pool(holds, size=1, max_in_flight=2, max_pending_prompts=0) as pool:
        running = pool.submit("hold")
        holds.wait_held(1)
        refused = pool.submit("second")  # handed over, but the worker keeps no queue
        with pytest.raises(TurnError) as info:
            pool.result(refused, timeout=5)
        assert info.value.reason[0] == "overloaded"
        assert info.value.reason[1].queue == "prompts" and info.value.reason[1].max_count == 0
        holds.release.set()
        assert pool.result(running, timeout=5).text == "echo:hold"


# ----------------------------------------------------------------------------- crashes
@pytest.mark.parametrize("routing", ["round_robin", "least_loaded"])
def test_a_worker_crash_mid_pool_loses_no_result(holds, routing):
    pool = make_pool(holds, size=2, routing=routing)
    first = [pool.submit("hold-0"), pool.submit("hold-1")]
    holds.wait_held(2)  # both workers busy: everything below waits in the pool
    prompts = [f"t{i}" for i in range(18)]
    prompts[2] = "crash"
    refs = [pool.submit(p) for p in prompts]
    assert pool.status().queued == 18
    holds.release.set()

    outcomes = {}
    for prompt, ref in zip(prompts, refs, strict=True):
        try:
            outcomes[prompt] = pool.result(ref, timeout=10).text
        except TurnError as exc:
            outcomes[prompt] = exc.reason
    assert outcomes.pop("crash") == ("worker_down", CRASH)
    assert outcomes == {p: f"echo:{p}" for p in prompts if p != "crash"}
    assert sorted(pool.result(r, timeout=5).text for r in first) == ["echo:hold-0",
                                                                     "echo:hold-1"]
    children = pool.supervisor.which_children()
    assert sorted(c.restarts for c in children) == [0, 1]
    assert all(c.ref.is_alive() for c in children)
    crashed = next(c for c in children if c.restarts == 1)
    assert crashed.last_exit_reason == CRASH
    if routing == "round_robin":  # its share after the crash ran on the replacement
        assert MockBackend.history(crashed.id) == [p for p in prompts[::2] if p != "crash"][1:]
    pool.wait_idle(timeout=5)
    pool.stop(timeout=10)


def test_the_pool_stops_when_its_supervisor_gives_up(holds):
    pool = make_pool(holds, size=1, max_restarts=0)
    held = pool.submit("hold")
    holds.wait_held(1)
    crash, after = pool.submit("crash"), pool.submit("after")
    holds.release.set()
    assert pool.result(held, timeout=5).text == "echo:hold"
    with pytest.raises(TurnError) as info:
        pool.result(crash, timeout=5)
    assert info.value.reason == ("worker_down", CRASH)
    with pytest.raises(TurnError) as info:
        pool.result(after, timeout=5)
    assert info.value.reason == ("pool_down", INTENSITY)
    assert pool.wait_stopped(5)
    with pytest.raises(RequestError) as exc:
        pool.submit("more")
    assert exc.value.reason == "pool_stopped"
    assert gen_agent.list_agents() == []


# ----------------------------------------------------------------------------- quiescence
def test_wait_idle_waits_for_self_chained_work_inside_the_workers(holds):
    with make_pool(holds, size=1) as pool:
        ref = pool.submit("chain")
        assert pool.result(ref, timeout=5).text == "chain"  # the task itself is done ...
        holds.wait_held(1)  # ... but the worker runs the follow-up it chained
        with pytest.raises(CallTimeout):
            pool.wait_idle(timeout=0.2)
        holds.release.set()
        pool.wait_idle(timeout=5)
        assert histories(pool) == {"w-0": ["chain", "hold-chained"]}


# ----------------------------------------------------------------------------- resize
def test_resize_up_starts_workers_that_take_work(holds):
    with make_pool(holds, size=1, routing="round_robin") as pool:
        pool.resize(3)
        assert pool.workers() == ["w-0", "w-1", "w-2"] and pool.size == 3
        assert all(gen_agent.whereis(name) is not None for name in pool.workers())
        pool.map([f"p{i}" for i in range(9)], timeout=10)
        assert [len(h) for h in histories(pool).values()] == [3, 3, 3]


def test_resize_down_drains_removed_workers_and_keeps_their_queued_work(holds):
    with make_pool(holds, size=2, routing="round_robin") as pool:
        held = [pool.submit("hold-0"), pool.submit("hold-1")]
        holds.wait_held(2)
        queued = [pool.submit(f"t{i}") for i in range(4)]  # t0, t2 -> w-0; t1, t3 -> w-1
        shrink = threading.Thread(target=pool.resize, args=(1,), kwargs={"timeout": 5})
        shrink.start()
        wait_for_state("w-1", lambda s: s.draining, timeout=5)
        assert pool.workers() == ["w-0"]
        holds.release.set()
        shrink.join(10)
        assert not shrink.is_alive()
        assert sorted(pool.result(r, timeout=5).text for r in held) == ["echo:hold-0",
                                                                        "echo:hold-1"]
        assert [pool.result(r, timeout=5).text for r in queued] == [
            "echo:t0", "echo:t1", "echo:t2", "echo:t3"]
        assert gen_agent.whereis("w-1") is None
        assert [c.id for c in pool.supervisor.which_children()] == ["w-0"]
        assert sorted(MockBackend.history("w-0")) == ["hold-0", "t0", "t1", "t2", "t3"]
        assert [w.name for w in pool.status().workers] == ["w-0"]


def test_a_worker_that_fails_to_start_is_not_added(holds):
    starts = itertools.count()
    with make_pool(holds, size=1, routing="round_robin",
                   refuse=lambda: next(starts) >= 2) as pool:
        with pytest.raises(AgentStartError) as info:
            pool.resize(3)
        assert info.value.reason[0] == "init_agent_failed"
        assert pool.workers() == ["w-0", "w-1"]
        assert [c.id for c in pool.supervisor.which_children()] == ["w-0", "w-1"]
        assert [r.text for r in pool.map(["a", "b", "c", "d"], timeout=10)] == [
            "echo:a", "echo:b", "echo:c", "echo:d"]
        assert [len(h) for h in histories(pool).values()] == [2, 2]


# ----------------------------------------------------------------------------- stop / errors
def test_stop_fails_unfinished_tasks_and_refuses_new_ones(holds):
    pool = make_pool(holds, size=1)
    held = pool.submit("hold")
    holds.wait_held(1)
    queued = pool.submit("queued")
    pool.stop(timeout=10)
    for ref in (held, queued):
        with pytest.raises(TurnError) as info:
            pool.result(ref, timeout=5)
        assert info.value.reason == ("agent_terminated", "shutdown")
    with pytest.raises(RequestError) as exc:
        pool.submit("late")
    assert exc.value.reason == "pool_stopped"
    assert pool.wait_stopped(0) and gen_agent.list_agents() == []
    pool.stop()  # idempotent
    holds.release.set()


def test_invalid_arguments_are_usage_errors(holds):
    with pytest.raises(ValueError, match="size"):
        make_pool(holds, size=0)
    with pytest.raises(ValueError, match="routing"):
        make_pool(holds, routing="random")
    with pytest.raises(ValueError, match="max_in_flight"):
        make_pool(holds, max_in_flight=0)
    with pytest.raises(TypeError, match=r"takes no name= \(got 'workers'\).*name_prefix="):
        Pool(PoolWorker, size=2, backend=MockBackend, name="workers")
    assert gen_agent.list_agents() == []  # refused before any worker started
    with make_pool(holds, size=1) as pool:
        with pytest.raises(TypeError, match="prompt"):
            pool.submit(b"bytes")
        with pytest.raises(LookupError):
            pool.result(PoolRef(-1), timeout=0)
        with pytest.raises(ValueError, match="size"):
            pool.resize(0)
