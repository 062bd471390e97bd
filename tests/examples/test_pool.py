"""The Pool recipe (docs/examples/pool.py, contract §10)."""

from __future__ import annotations

import collections
import threading

import gen_agent
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend

from ._loader import load_example

pool = load_example("pool")


def _echo(prompt: str) -> list:
    return mock.text_turn(f"{prompt}: done")


def _start(names_and_scripts: dict[str, list], **opts) -> list[str]:
    for name, scripts in names_and_scripts.items():
        gen_agent.start_agent(pool.PoolWorker, name=name, backend=MockBackend,
                              backend_opts={"scripts": scripts}, **opts)
    return list(names_and_scripts)


def test_400_concurrent_submissions_on_4_held_workers_give_each_exactly_100() -> None:
    gates = [mock.gate(mock.text_turn("first")) for _ in range(4)]
    names = _start({f"w-{i}": [gates[i]] + [_echo] * 99 for i in range(4)})
    dispatcher = pool.Dispatcher(names)
    outcomes: list = []
    lock = threading.Lock()

    def submit_100(offset: int) -> None:
        for k in range(100):
            outcome = dispatcher.submit(f"task {offset + k}")
            with lock:
                outcomes.append(outcome)

    threads = [threading.Thread(target=submit_100, args=(100 * t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert collections.Counter(worker for worker, status, _ in outcomes
                               if status == "ok") == {name: 100 for name in names}

    for gate in gates:
        gate.release()
    pool.wait_quiescent(names, timeout=10)
    for name in names:
        done = pool.results(name)
        assert len(done) == 100 and {r.status for r in done} == {"ok"}
        assert all(r.value == f"{r.task}: done" for r in done[1:])
    assert sorted(r.task for n in names for r in pool.results(n)) == sorted(
        f"task {i}" for i in range(400))


def test_overload_is_surfaced_per_task_and_errors_are_recorded_as_results() -> None:
    gate = mock.gate(mock.text_turn("one"))
    names = _start({"w": [gate, mock.error_turn("bad input")]}, max_pending_prompts=1)
    dispatcher = pool.Dispatcher(names)

    first, second, third = (dispatcher.submit(f"t{i}") for i in (1, 2, 3))

    assert first[1] == second[1] == "ok"
    assert third[:2] == ("w", "error") and third[2][0] == "overloaded"
    gate.release()
    pool.wait_quiescent(names, timeout=5)
    assert [(r.task, r.ref, r.status, r.value) for r in pool.results("w")] == [
        ("t1", first[2], "ok", "one"), ("t2", second[2], "error", "bad input")]
    assert not gen_agent.status("w").halted                     # workers never halt


def test_removed_workers_finish_their_queue_before_they_stop() -> None:
    gate = mock.gate(mock.text_turn("a"))
    names = _start({"w-0": [_echo] * 4, "w-1": [gate, _echo]})
    dispatcher = pool.Dispatcher(names)
    dispatcher.submit("t0")                                     # w-0
    dispatcher.submit("t1")                                     # w-1, held by the gate
    dispatcher.submit("t2")                                     # w-0
    dispatcher.submit("t3")                                     # w-1, queued
    gate.wait_blocked(5)
    session = gen_agent.backend_session("w-1")

    remover = threading.Thread(target=dispatcher.remove_workers, args=(["w-1"], 5))
    remover.start()
    assert gen_agent.whereis("w-1") is not None                # still working
    gate.release()
    remover.join(5)

    assert not remover.is_alive() and gen_agent.whereis("w-1") is None
    assert MockBackend.history(session) == ["t1", "t3"]         # its queue was served
    assert dispatcher.workers == ["w-0"]
    assert dispatcher.submit("t4")[0] == "w-0"


def test_the_packaged_pool_returns_results_in_task_order() -> None:
    texts = pool.packaged_pool([f"t{i}" for i in range(6)], backend=MockBackend,
                               backend_opts={"scripts": [_echo] * 6}, size=3)
    assert texts == [f"t{i}: done" for i in range(6)]


def test_main_runs_on_the_mock_backend(capsys) -> None:
    pool.main([])
    out = capsys.readouterr().out
    assert "worker-0 ['task 0 -> ok', 'task 3 -> ok', 'task 6 -> ok']" in out
    assert "gen_agent.Pool: ['task 0: done', 'task 1: done', 'task 2: done', 'task 3: done']" \
        in out
