"""Pools of independent tasks (issue #15): a fresh session per task unless the pool shares
conversations; `map(return_exceptions=True)`, `as_completed`, cancelling a queued task, a
per-pool `RetryPolicy` honouring `retry_after`, and a worker that ends under a task giving
`("worker_down", reason)`."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest
from _agents import PassThrough

import gen_agent
import gen_agent._pool_dispatch as pool_module  # the dispatcher schedules the retries
from gen_agent import GenAgent, NoReply, TurnError
from gen_agent._pool import Pool, RetryPolicy
from gen_agent.backend import BackendError
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend

T = 5.0  # seconds: the bound of every wait in this file


class Worker(GenAgent):
    """Answers "echo:<prompt>"; "fail" is a turn error; "limited" a 429 (retry_after 3 s)
    the first time; "crash" makes handle_response raise; "hold" blocks until released."""

    release = threading.Event()
    held = threading.Event()
    limited_seen: set[str] = set()
    seen: list[str] = []

    def init_agent(self, opts: dict[str, Any]) -> Any:
        return {"scripts": [self.script] * 300}, None

    @classmethod
    def script(cls, prompt: str) -> list[gen_agent.Event]:
        cls.seen.append(prompt)
        if prompt == "hold":
            cls.held.set()
            assert cls.release.wait(10), "the test never released the held turn"
        if prompt == "fail":
            return mock.error_turn("boom")
        if prompt.startswith("limited") and prompt not in cls.limited_seen:
            cls.limited_seen.add(prompt)
            raise_error = BackendError("anthropic", "rate_limited", True, 429, "3")
            return [gen_agent.Event.new("error", {"reason": raise_error})]
        return mock.text_turn(prompt if prompt == "crash" else f"echo:{prompt}")

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        if response.text == "crash":
            raise ValueError("the marked prompt")
        return NoReply(state)


@pytest.fixture(autouse=True)
def _fresh_worker_class() -> None:
    Worker.release = threading.Event()
    Worker.held = threading.Event()
    Worker.limited_seen = set()
    Worker.seen = []


def test_tasks_are_independent_by_default() -> None:
    with Pool(Worker, size=1, backend=MockBackend, name_prefix="ind") as pool:
        assert [r.text for r in pool.map([f"t{i}" for i in range(5)], timeout=T)] == [
            f"echo:t{i}" for i in range(5)]
        session = gen_agent.backend_session("ind-0", timeout=T)
        assert session.resets == 4  # every task after the first got a fresh session


def test_shared_conversation_keeps_one_session() -> None:
    with Pool(Worker, size=1, backend=MockBackend, name_prefix="shr",
              shared_conversation=True) as pool:
        pool.map(["a", "b", "c"], timeout=T)
        assert gen_agent.backend_session("shr-0", timeout=T).resets == 0


def test_map_with_return_exceptions_keeps_every_result() -> None:
    with Pool(Worker, size=2, backend=MockBackend) as pool:
        results = pool.map(["a", "fail", "b"], timeout=T, return_exceptions=True)
    assert results[0].text == "echo:a" and results[2].text == "echo:b"
    assert isinstance(results[1], TurnError) and results[1].reason == "boom"


def test_as_completed_yields_in_completion_order() -> None:
    with Pool(Worker, size=2, backend=MockBackend) as pool:
        held = pool.submit("hold")
        assert Worker.held.wait(T)
        quick = pool.submit("quick")
        order = []
        for ref in pool.as_completed([held, quick], timeout=T):
            order.append(ref)
            if ref == quick:
                Worker.release.set()
        assert order == [quick, held]
        assert pool.result(quick).text == "echo:quick"
        assert pool.result(held).text == "echo:hold"


def test_a_queued_task_can_be_cancelled_through_its_ref() -> None:
    with Pool(Worker, size=1, backend=MockBackend) as pool:
        running = pool.submit("hold")
        assert Worker.held.wait(T)
        queued = pool.submit("never")
        assert pool.cancel(queued) == "cancelled"
        assert pool.cancel(running) == "current"
        Worker.release.set()
        assert pool.result(running, T).text == "echo:hold"
        with pytest.raises(TurnError) as info:
            pool.result(queued, T)
        assert info.value.reason == "cancelled"
        assert pool.cancel(queued) == "not_found"


# -- map and imap: bad items, endless iterables, nothing left behind ---------------------------
# `pool._tasks` holds every outcome not yet collected: empty means no task was leaked.


def test_map_checks_every_prompt_before_submitting_any() -> None:
    def prompts() -> Any:
        yield from ("a", "b", 3, "c")

    with Pool(Worker, size=2, backend=MockBackend) as pool:
        with pytest.raises(TypeError, match=r"prompts\[2\] must be a str, got int; no task"):
            pool.map(prompts(), timeout=T)
        assert [r.text for r in pool.map(["after"], timeout=T)] == ["echo:after"]
        assert Worker.seen == ["after"]  # "a" and "b" never ran
        assert not pool._tasks


def test_imap_streams_an_endless_iterable_taking_prompts_only_as_room_frees() -> None:
    taken: list[int] = []

    def endless() -> Any:
        for i in itertools.count():
            taken.append(i)
            yield f"t{i}"

    with Pool(Worker, size=2, backend=MockBackend) as pool:
        stream = pool.imap(endless(), timeout=T, window=3)
        assert [next(stream).text for _ in range(5)] == [f"echo:t{i}" for i in range(5)]
        assert len(taken) == 5 + 3 - 1  # the yielded ones and the window, no more
        stream.close()
        pool.wait_idle(timeout=T)
        assert set(Worker.seen) <= {f"t{i}" for i in range(7)}
        assert not pool._tasks
        assert [r.text for r in pool.imap(["after"], timeout=T)] == ["echo:after"]


def test_imap_a_bad_item_fails_only_itself() -> None:
    with Pool(Worker, size=2, backend=MockBackend) as pool:
        results = list(pool.imap(["a", 7, "fail", "b"], timeout=T, return_exceptions=True))
        assert not pool._tasks
    assert (results[0].text, results[3].text) == ("echo:a", "echo:b")
    assert isinstance(results[1], TypeError)
    assert str(results[1]) == "imap: prompt 1 must be a str, got int"
    assert isinstance(results[2], TurnError) and results[2].reason == "boom"


def test_imap_raises_the_first_failure_in_order_and_leaves_nothing_behind() -> None:
    with Pool(Worker, size=1, backend=MockBackend) as pool:
        stream = pool.imap(["a", 7, "b", "c"], timeout=T)
        assert next(stream).text == "echo:a"
        with pytest.raises(TypeError, match="prompt 1 must be a str, got int"):
            next(stream)
        with pytest.raises(StopIteration):
            next(stream)
        pool.wait_idle(timeout=T)
        assert not pool._tasks
        assert pool.map(["after"], timeout=T)[0].text == "echo:after"


def test_leaving_imap_early_cancels_the_tasks_taken_ahead() -> None:
    with Pool(Worker, size=1, backend=MockBackend) as pool:
        stream = pool.imap(["a", "hold", "x", "y"], timeout=T, window=4)
        assert next(stream).text == "echo:a"
        assert Worker.held.wait(T)  # "hold" runs; "x" and "y" wait in the pool
        stream.close()
        Worker.release.set()
        pool.wait_idle(timeout=T)
        assert Worker.seen == ["a", "hold"]  # "x" and "y" were cancelled, never ran
        assert not pool._tasks


def test_imap_refuses_bad_arguments_at_the_call() -> None:
    with Pool(Worker, size=1, backend=MockBackend) as pool:
        with pytest.raises(TypeError, match="a single str"):
            pool.imap("abc")
        with pytest.raises(ValueError, match="window must be an int >= 1"):
            pool.imap(["a"], window=0)
        with pytest.raises(TypeError):
            pool.imap(5)  # type: ignore[arg-type]
        assert not pool._tasks

class ManualTimers:
    def __init__(self) -> None:
        self.scheduled: list[tuple[float, Any]] = []
        self.added = threading.Condition()

    def schedule(self, delay_s: float, fn: Any) -> Any:
        with self.added:
            self.scheduled.append((delay_s, fn))
            self.added.notify_all()
        return self

    def cancel(self) -> None:
        pass

    def wait_scheduled(self, count: int) -> list[float]:
        with self.added:
            assert self.added.wait_for(lambda: len(self.scheduled) >= count, T)
            return [d for d, _ in self.scheduled]

    def fire_all(self) -> None:
        with self.added:
            due, self.scheduled = self.scheduled, []
        for _, fn in due:
            fn()


def test_a_retry_policy_honours_retry_after(monkeypatch: pytest.MonkeyPatch) -> None:
    timers = ManualTimers()
    monkeypatch.setattr(pool_module, "TIMERS", timers)
    policy = RetryPolicy(attempts=2, base_delay_ms=100)
    with Pool(Worker, size=1, backend=MockBackend, retry=policy) as pool:
        ref = pool.submit("limited-1")
        failed = pool.submit("fail")  # not retryable: fails at once
        assert timers.wait_scheduled(1) == [3.0]  # retry_after 3 s beats the 100 ms backoff
        with pytest.raises(TurnError) as info:
            pool.result(failed, T)
        assert info.value.reason == "boom"
        timers.fire_all()
        assert pool.result(ref, T).text == "echo:limited-1"


def test_retry_policy_gives_up_after_its_attempts() -> None:
    policy = RetryPolicy(attempts=1)
    with Pool(Worker, size=1, backend=MockBackend, retry=policy) as pool, \
            pytest.raises(TurnError) as info:
        pool.map(["limited-2"], timeout=T)
    assert isinstance(info.value.reason, BackendError)
    assert policy.delay_ms(info.value.reason, 1) == 3000
    assert not policy.should_retry(("worker_down", "x"), 0)


def test_a_task_on_a_crashing_worker_is_worker_down() -> None:
    with Pool(Worker, size=1, backend=MockBackend) as pool:
        with pytest.raises(TurnError) as info:
            pool.map(["crash"], timeout=T)
        assert info.value.reason == ("worker_down", ("callback_failed", "error", "ValueError"))
        assert pool.map(["after"], timeout=T)[0].text == "echo:after"


def test_pool_tasks_on_an_api_backend_each_send_one_message(scripted_model_server: Any) -> None:
    # Before: the k-th task on a worker carried 2k-1 messages (its whole conversation).
    from gen_agent.backends.anthropic import AnthropicAPI
    from gen_agent.testing._model_server import Reply

    scripted_model_server.default = Reply.text("ok")
    opts = {"api_key": "k", "base_url": scripted_model_server.url, "model": "claude-test"}
    with Pool(PassThrough, size=2, backend=AnthropicAPI, backend_opts=opts) as pool:
        assert len(pool.map([f"task {i}" for i in range(10)], timeout=30)) == 10
    sent = [r.body["messages"] for r in scripted_model_server.model_requests()]
    assert len(sent) == 10
    assert all(len(messages) == 1 and messages[0]["role"] == "user" for messages in sent)
