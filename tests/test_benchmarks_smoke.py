"""Smoke test of the benchmark harness (tests/benchmarks, `make bench`, issue 9).

Every measurement runs at a tiny size, so the harness cannot rot while the core changes. The
figures are not compared with the targets here (timings on a shared test machine say
nothing); the measurements' own correctness checks (event counts, handle_stream_event count,
exact coverage) are exercised.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from types import ModuleType

import msgspec
import pytest
from benchmarks import runner
from benchmarks._common import Figure, percentile
from benchmarks.profiling import profile_call

_RETENTION_LIMIT = runner.params_of(runner.by_name("retention"), "smoke")["max_event_bytes"][0]
HEADLINES = {
    "turn_overhead": "agent_vs_pykka_median",
    "event_throughput": "prebuilt_events_per_s",
    "stream_parsing": "gen_agent_mb_per_s",
    "scale": "turns_per_s",
    "retention": f"coverage_retained_{_RETENTION_LIMIT}",
}


@pytest.mark.parametrize("module", runner.MEASUREMENTS, ids=lambda module: module.NAME)
def test_each_measurement_runs_at_a_tiny_size(module: ModuleType) -> None:
    params = runner.params_of(module, "smoke")

    result = module.run_once(params)
    figures = module.summarize([result], params)

    assert json.loads(msgspec.json.encode(result)) == result
    assert figures and all(type(figure) is Figure for figure in figures)
    keys = [figure.key for figure in figures]
    assert len(set(keys)) == len(keys)
    headline = {figure.key: figure for figure in figures}[HEADLINES[module.NAME]]
    assert headline.value is not None and headline.value > 0
    if module.NAME == "retention":
        assert headline.met is True  # the coverage matched the contract's rule exactly


def test_main_prints_the_table_and_writes_the_json(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "benchmarks.json"

    status = runner.main(["--size", "smoke", "--in-process", "--reps", "1",
                          "--only", "turn_overhead", "retention", "--json", str(out)])

    assert status == 0
    printed = capsys.readouterr().out
    assert "SUMMARY" in printed and "agent / pykka, median" in printed
    report = json.loads(out.read_text(encoding="utf-8"))
    assert set(report["measurements"]) == {"turn_overhead", "retention"}
    figures = report["measurements"]["turn_overhead"]["figures"]
    assert figures["agent_vs_pykka_median"]["unit"] == "x"
    assert report["machine"]["cores"] >= 1


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

    assert params == {"events": 5000}
    assert runner.params_of(runner.by_name("scale"), "smoke", ["agents=3"])["agents"] == 3


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

    figures = {f.key: f for f in module.summarize([module.run_once(params)], params)}

    assert figures["sdk_mb_per_s"].value is None
    assert "make bench" in figures["sdk_mb_per_s"].note
    assert figures["gen_agent_vs_sdk"].met is None
    assert figures["gen_agent_mb_per_s"].value is not None
