"""The supervisor fan-out/fan-in recipe (docs/examples/fan_out.py, contract §10)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import pytest

import gen_agent
from gen_agent import telemetry
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.testing import wait_for_state

from ._loader import load_example

fan_out = load_example("fan_out")


class Workers:
    """Worker scripts by sub-task: "FAIL" fails, "SLOW" blocks until `release`."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()

    def script(self, prompt: str) -> list:
        if prompt == "FAIL":
            return mock.error_turn("boom")
        if prompt == "SLOW":
            self.entered.set()
            self.release.wait(5)
        return mock.text_turn(f"done {prompt}")

    def options(self) -> dict:
        return {"scripts": [self.script] * 8}


@pytest.fixture
def workers() -> Iterator[Workers]:
    w = Workers()
    try:
        yield w
    finally:
        w.release.set()                     # frees a turn thread of a stopped worker


def _start(workers: Workers, *coordinator_scripts, deadline_ms: float = 60_000,
           **opts) -> queue.Queue:
    reports: queue.Queue = queue.Queue()
    fan_out.start_coordinator("c", report_to=reports, backend=MockBackend,
                              backend_opts={"scripts": list(coordinator_scripts)},
                              worker_backend_opts=workers.options(), max_subtasks=3,
                              deadline_ms=deadline_ms, **opts)
    gen_agent.notify("c", ("start", "the task"))
    return reports


def _finished_run():
    run = gen_agent.status("c").agent_state
    assert run.watcher.join(5)              # the watcher ended...
    assert all(gen_agent.whereis(w) is None for w in run.workers)   # ...and stopped them
    return run


def _collecting(worker_count: int):
    return wait_for_state("c", lambda s: s.agent_state.phase == "collecting"
                          and len(s.agent_state.workers) == worker_count).agent_state


def test_plan_fan_out_and_synthesize(workers) -> None:
    reports = _start(workers, mock.text_turn("1. alpha\n2) beta\n\n3. gamma\n4. delta"),
                     mock.text_turn("the synthesis"))

    assert reports.get(timeout=5) == ("done", "the synthesis")
    run = _finished_run()
    assert run.subtasks == ("alpha", "beta", "gamma")          # capped at max_subtasks
    assert [run.results[w] for w in run.workers] == ["done alpha", "done beta", "done gamma"]
    plan, synthesis = MockBackend.history("c")
    assert plan.startswith("Split this task into at most 3")
    assert synthesis == "Combine these partial results into one answer:\n" \
        "- done alpha\n- done beta\n- done gamma"


def test_partial_success_still_synthesizes(workers) -> None:
    reports = _start(workers, mock.text_turn("alpha\nFAIL"), mock.text_turn("partial"))
    assert reports.get(timeout=5) == ("done", "partial")
    run = _finished_run()
    assert list(run.failures.values()) == ["boom"]
    assert MockBackend.history("c")[1].endswith("- done alpha")


def test_zero_successes_fail_without_a_synthesis_turn(workers) -> None:
    reports = _start(workers, mock.text_turn("FAIL\nFAIL"))
    outcome, (kind, failures) = reports.get(timeout=5)
    assert (outcome, kind, sorted(failures.values())) == (
        "failed", "all_workers_failed", ["boom", "boom"])
    _finished_run()
    assert len(MockBackend.history("c")) == 1


def test_a_plan_without_subtasks_fails(workers) -> None:
    reports = _start(workers, mock.text_turn("   \n"))
    assert reports.get(timeout=5) == ("failed", "no_subtasks")


def test_the_deadline_counts_missing_workers_as_failed(workers) -> None:
    reports = _start(workers, mock.text_turn("alpha\nSLOW"), mock.text_turn("late but fine"))
    run = _collecting(2)
    wait_for_state("c", lambda s: run.workers[0] in s.agent_state.results)
    gen_agent.notify("c", ("deadline", run.run_id))          # what the watcher sends
    assert reports.get(timeout=5) == ("done", "late but fine")
    assert _finished_run().failures == {run.workers[1]: "deadline"}   # and it was stopped


def test_the_watcher_enforces_the_deadline(workers) -> None:
    reports = _start(workers, mock.text_turn("SLOW\nSLOW"), deadline_ms=50)
    outcome, (kind, failures) = reports.get(timeout=5)
    assert (outcome, kind, sorted(failures.values())) == (
        "failed", "all_workers_failed", ["deadline", "deadline"])
    _finished_run()


def test_a_worker_that_dies_is_a_failure(workers) -> None:
    reports = _start(workers, mock.text_turn("alpha\nSLOW"), mock.text_turn("without it"))
    run = _collecting(2)
    assert workers.entered.wait(5)
    gen_agent.stop(run.workers[1])
    assert reports.get(timeout=5) == ("done", "without it")
    assert _finished_run().failures == {run.workers[1]: "shutdown"}


def test_stale_unknown_and_duplicate_reports_are_ignored(workers) -> None:
    reports = _start(workers, mock.text_turn("SLOW\nalpha"), mock.text_turn("synthesis"))
    run = _collecting(2)
    slow, fast = run.workers
    wait_for_state("c", lambda s: fast in s.agent_state.results)
    for event in (("worker_result", "old-run", slow, "stale"),
                  ("worker_result", run.run_id, "stranger", "unknown"),
                  ("worker_result", run.run_id, fast, "duplicate"),
                  ("worker_failed", run.run_id, fast, "duplicate")):
        gen_agent.notify_ack("c", event)
    state = gen_agent.status("c").agent_state
    assert (state.phase, state.results, state.failures) == (
        "collecting", {fast: "done alpha"}, {})

    workers.release.set()
    assert reports.get(timeout=5) == ("done", "synthesis")
    assert _finished_run().results == {slow: "done SLOW", fast: "done alpha"}


def test_only_its_own_synthesis_turn_finishes_the_workflow(workers, telemetry_recorder) -> None:
    unrelated = mock.gate(mock.text_turn("unrelated 1"))
    reports = _start(workers, mock.text_turn("SLOW"), unrelated, mock.text_turn("unrelated 2"),
                     mock.text_turn("the synthesis"))
    _collecting(1)
    gen_agent.tell("c", "U1")
    unrelated.wait_blocked(5)
    gen_agent.tell("c", "U2")                                   # queued
    workers.release.set()                                       # the report is buffered
    telemetry_recorder.wait_for(lambda r: r.event_name == telemetry.EVENT_RECEIVED
                                and r.metadata["agent"] == "c"
                                and r.metadata["event"][0] == "worker_result")
    unrelated.release()

    assert reports.get(timeout=5) == ("done", "the synthesis")
    prompts = MockBackend.history("c")
    assert prompts[1:3] == ["U1", "U2"] and prompts[3].startswith("Combine")


def test_a_full_queue_rejecting_the_synthesis_fails_with_the_overload(
        workers, telemetry_recorder) -> None:
    unrelated = mock.gate(mock.text_turn("unrelated"))
    reports = _start(workers, mock.text_turn("SLOW"), unrelated, max_pending_prompts=0)
    _collecting(1)
    gen_agent.tell("c", "U1")
    unrelated.wait_blocked(5)
    workers.release.set()
    telemetry_recorder.wait_for(lambda r: r.event_name == telemetry.EVENT_RECEIVED
                                and r.metadata["agent"] == "c"
                                and r.metadata["event"][0] == "worker_result")
    unrelated.release()

    outcome, reason = reports.get(timeout=5)
    assert outcome == "failed" and reason[0] == "overloaded"
    _finished_run()


def test_stopping_the_coordinator_stops_its_workers(workers) -> None:
    _start(workers, mock.text_turn("SLOW"))
    run = _collecting(1)
    assert workers.entered.wait(5)
    gen_agent.stop("c")
    assert run.watcher.join(5)
    assert gen_agent.whereis(run.workers[0]) is None


def test_main_runs_on_the_mock_backend(capsys) -> None:
    fan_out.main([])
    assert capsys.readouterr().out.strip() == (
        "done Combined: done (survey the options); done (estimate the costs);"
        " done (list the risks)")
