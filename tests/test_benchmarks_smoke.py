"""Smoke test of the benchmark harness (tests/benchmarks, `make bench`).

Every measurement runs at a tiny size, so the harness cannot rot while the core changes. The
figures are not compared with the targets here (timings on a shared test machine say
nothing); the measurements' own correctness checks (event counts, handle_stream_event count,
exact coverage) are exercised.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import msgspec
import pytest
from benchmarks import runner
from benchmarks._common import Figure, percentile
from benchmarks._harness import (
    Measured,
    figure,
    is_comparison,
    run_comparison,
    summarize_comparison,
)
from benchmarks.profiling import profile_call

_RETENTION_LIMIT = runner.params_of(runner.by_name("retention"), "smoke")["max_event_bytes"][0]
HEADLINES = {
    "turn_overhead": "mock_ask_vs_pykka_ask",
    "event_throughput": "built",
    "stream_parsing": "gen_agent",
    "concurrency": "agents_10_turns_per_s",
    "aio_ask": "aio_ask",
    "growth": "most_agents",
    "retention": f"coverage_retained_{_RETENTION_LIMIT}",
    "otel_overhead": "mock_traced",
    "persistence": "mock_normal_vs_mock_none",
    "ray_cluster": "remote_ask",
    "warm_cli": "warm_turn",
    "warm_fleet": "first_turn_prewarmed",
    "sse_decoding": "large_event",
    "host": "host_ask",
    "server": "server_stream",
    "server_fanout": "completed",
    "crash_journal": "hits_reply",
    "ray_host": "two_nodes",
    "http_agents": "start_http",
}
# Figures besides the headline that must be measured at the smoke size too (a value, maybe
# not > 0: a memory growth of a few agents may round to nothing).
ALSO_MEASURED = {
    "http_agents": ("start_http_openai", "kib_idle_http", "kib_hibernated_http",
                    "kib_idle_http_openai", "kib_hibernated_http_openai"),
}


def test_every_measurement_module_is_discovered_and_has_a_headline() -> None:
    assert {module.NAME for module in runner.MEASUREMENTS} == set(HEADLINES)


@pytest.fixture(autouse=True)
def _frozen_heap() -> Iterator[None]:
    """Freeze the objects the test session made so far out of the cyclic collector.

    The measurements run `gc.collect()` before each figure, a clean start in the fresh child
    of `make bench`; here the heap holds the whole session's objects, and every one of those
    collections (dozens per measurement) would walk it all again. Frozen, they walk only what
    the measurement itself made."""
    gc.freeze()
    yield
    gc.unfreeze()


# The measurements on a local Ray: they keep a Ray already running in this process, so they
# share one start (a few seconds each on 2 cores) instead of one per module and placement.
RAY_MEASUREMENTS = ("ray_cluster", "ray_host")


@pytest.fixture(scope="module")
def shared_ray() -> Iterator[None]:
    """One local Ray (127.0.0.1) for every Ray measurement of this module; a Ray this process
    already runs (the distributed tests' session one) is used and left running. Module-scoped,
    so it starts before each test's leak-checked `agent_system` takes its baseline."""
    pytest.importorskip("ray")
    import ray

    import gen_agent.ray as cluster

    started = not ray.is_initialized()
    cluster.init_local(num_cpus=2)
    yield
    if started:
        cluster.shutdown_local()


@pytest.mark.parametrize("module", [m for m in runner.MEASUREMENTS
                                    if m.NAME not in RAY_MEASUREMENTS],
                         ids=lambda module: module.NAME)
def test_each_measurement_runs_at_a_tiny_size(module: ModuleType) -> None:
    _runs_at_a_tiny_size(module)


@pytest.mark.parametrize("module", [m for m in runner.MEASUREMENTS
                                    if m.NAME in RAY_MEASUREMENTS],
                         ids=lambda module: module.NAME)
def test_each_ray_measurement_runs_at_a_tiny_size(module: ModuleType, shared_ray: None) -> None:
    _runs_at_a_tiny_size(module)


def test_the_ray_measurements_are_the_ones_named() -> None:
    assert {m.NAME for m in runner.MEASUREMENTS} >= set(RAY_MEASUREMENTS)


def _runs_at_a_tiny_size(module: ModuleType) -> None:
    if (reason := getattr(module, "missing", lambda: None)()) is not None:
        pytest.skip(reason)  # a measurement of a real CLI, which this machine lacks
    params = runner.params_of(module, "smoke")

    results, error = runner.run_measurement(module, "smoke", 1, in_process=True)
    figures = runner.summarize(module, results, params)

    assert error is None
    assert json.loads(msgspec.json.encode(results)) == results
    assert figures and all(type(figure) is Figure for figure in figures)
    keys = [figure.key for figure in figures]
    assert len(set(keys)) == len(keys)
    by_key = {figure.key: figure for figure in figures}
    headline = by_key[HEADLINES[module.NAME]]
    assert headline.value is not None and headline.value > 0
    for key in ALSO_MEASURED.get(module.NAME, ()):
        value = by_key[key].value
        assert value is not None and by_key[key].pinned is not None, key
        assert value > 0 or key.startswith("kib_"), key
    if is_comparison(module):  # both placements measured, with a spread over the rounds
        assert headline.pinned is not None and headline.pinned > 0
        assert headline.low is not None and headline.high is not None
        assert headline.low <= headline.value <= headline.high
        assert headline.rounds == params["rounds"]
    if module.NAME == "retention":
        assert headline.met is True  # the coverage matched the contract's rule exactly


def test_main_prints_the_table_and_writes_the_json(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "benchmarks.json"

    status = runner.main(["--size", "smoke", "--in-process", "--reps", "1",
                          "--only", "turn_overhead", "retention", "--json", str(out)])

    assert status == 0
    printed = capsys.readouterr().out
    assert "SUMMARY" in printed and "mock_ask / pykka_ask" in printed
    assert "pinned median [min-max]" in printed
    report = json.loads(out.read_text(encoding="utf-8"))
    assert set(report["measurements"]) == {"turn_overhead", "retention"}
    figures = report["measurements"]["turn_overhead"]["figures"]
    ratio = figures["mock_ask_vs_pykka_ask"]
    assert ratio["unit"] == "x" and ratio["target"] == "<= 2"
    assert ratio["value"] > 0 and ratio["pinned"] > 0
    results = report["measurements"]["turn_overhead"]["results"]
    assert set(results) == {"unpinned", "pinned"}
    assert len(results["pinned"]["cpus"]) == 1
    assert report["machine"]["cores"] >= 1

    table = runner.markdown_table(report)
    assert "| turn_overhead | mock_ask / pykka_ask |" in table
    moved_report = json.loads(json.dumps(report))
    moved_report["measurements"]["turn_overhead"]["figures"]["mock_ask_vs_pykka_ask"][
        "value"] = ratio["value"] * 1.5
    lines, moved = runner.compare_reports(report, moved_report)
    assert moved == ["turn_overhead.mock_ask_vs_pykka_ask"]
    assert any(line.startswith("  ok") for line in lines)


def test_rounds_interleave_the_figures_and_pinning_is_undone() -> None:
    calls: list[str] = []
    module = ModuleType("bench_fake")
    module.NAME = "fake"

    def first(env: dict[str, object], params: dict[str, object]) -> float:
        calls.append("a")
        return 2.0

    def second(env: dict[str, object], params: dict[str, object]) -> Measured:
        calls.append("b")
        return Measured(1.0, {"p99_us": 4.0})

    first.__module__ = second.__module__ = "bench_fake"
    figure(unit="us")(first)
    figure(unit="us", peer="first", target="<= 0.75")(second)
    allowed = os.sched_getaffinity(0)

    pinned = run_comparison(module, {"rounds": 3, "warmup_rounds": 1}, "pinned")

    assert calls == ["a", "b"] * 4
    assert len(pinned["cpus"]) == 1 and os.sched_getaffinity(0) == allowed
    rows = {row.key: row for row in summarize_comparison(module, {"pinned": pinned})}
    assert rows["second_vs_first"].pinned == 0.5 and rows["second_vs_first"].met is True
    assert rows["second_p99_us"].pinned == 4.0 and rows["second_p99_us"].value is None


def test_growth_stops_cleanly_at_the_first_failure_and_says_where() -> None:
    module = runner.by_name("growth")
    started: list[int] = []

    def start(index: int) -> object:
        if len(started) == 25:
            raise RuntimeError("can't start new thread")
        started.append(index)
        return module.start_idle(index)

    result = module.run_once({"sizes": [10, 40, 80], "start_budget_s": 30.0}, start=start)

    assert [step["size"] for step in result["steps"]] == [10, 40]
    assert result["stopped"] == {"size": 40, "at": 15,
                                 "why": "RuntimeError: can't start new thread"}
    figures = {f.key: f for f in module.summarize([result], {})}
    assert figures["most_agents"].value == 15
    assert "agent 15: RuntimeError: can't start new thread" in figures["most_agents"].note


def test_the_profiler_sees_work_done_in_other_threads() -> None:
    def busy_in_a_thread() -> None:
        def spin() -> int:
            return sum(i * i for i in range(200_000))

        worker = threading.Thread(target=spin, name="bench-smoke-worker")
        worker.start()
        worker.join(timeout=30)

    report = profile_call(busy_in_a_thread, "cprofile", top=10)

    assert "bench-smoke-worker" in report
    assert "spin" in report


def test_param_overrides_apply_to_the_measurements_that_have_the_key() -> None:
    module = runner.by_name("event_throughput")

    params = runner.params_of(module, "full", ["events=5000", "agents=3", "note=plain"])

    assert params == {"events": 5000, "rounds": 5, "warmup_rounds": 1}
    assert runner.params_of(runner.by_name("growth"), "smoke", ["sizes=[3]"])["sizes"] == [3]
    assert runner.params_of(runner.by_name("turn_overhead"), "full", ["rounds=4"])["rounds"] == 4


def test_percentile_is_nearest_rank_and_values_format_for_the_table() -> None:
    values = [float(v) for v in range(1, 101)]

    assert percentile(values, 0.99) == 99.0
    assert percentile(values, 0.5) == 50.0
    assert runner.format_value(1_234_567.0) == "1,234,567"
    assert runner.format_value(12) == "12"
    assert runner.format_value(3.14159) == "3.14"
    assert runner.format_value(None) == "n/a"


def test_stream_parsing_without_the_sdk_reports_it_missing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "claude_agent_sdk", None)  # import now fails
    module = runner.by_name("stream_parsing")
    params = runner.params_of(module, "smoke")

    results, _ = runner.run_measurement(module, "smoke", 1, True, placements=("unpinned",))
    figures = {f.key: f for f in runner.summarize(module, results, params)}

    assert figures["sdk"].value is None
    assert "make bench" in figures["sdk"].note
    assert figures["gen_agent_vs_sdk"].met is None
    assert figures["gen_agent"].value is not None
