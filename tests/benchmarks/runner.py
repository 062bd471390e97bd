"""The benchmark runner behind `make bench` (entry point: tests/benchmarks/run.py).

It runs the five measurements of issue 9, prints a table and writes benchmarks.json. Usage
(from the project root, with the venv's python):

    python tests/benchmarks/run.py                      # everything, full size (< 5 min, 2 cores)
    python tests/benchmarks/run.py --only scale --reps 1
    python tests/benchmarks/run.py --size smoke --in-process
    python tests/benchmarks/run.py --profile event_throughput --param events=200000

Every repetition runs in a fresh child process (so memory figures start from a clean heap and
one measurement's threads never slow the next); comparisons are ratios of figures measured in
the same repetition, i.e. the same process; every reported figure is the median over the
repetitions. Targets are the issue's goals, printed beside each figure, never asserted. The
exit status is 1 only when a measurement broke (an exception or a failed correctness check).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec

from . import event_throughput, retention, scale, stream_parsing, turn_overhead
from ._common import Figure, load_average, machine_info
from .profiling import PROFILERS, profile_call

MEASUREMENTS: tuple[ModuleType, ...] = (
    turn_overhead, event_throughput, stream_parsing, scale, retention)
"""The measurement modules, in the issue's order; each has NAME, TITLE, FULL, SMOKE, REPS,
`run_once(params) -> dict` and `summarize(reps, params) -> list[Figure]`."""

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).resolve().with_name("run.py")
BUDGET_S = 300.0
CHILD_TIMEOUT_S = 240.0


def by_name(name: str) -> ModuleType:
    """The measurement module called `name`.

    Raises:
        SystemExit: no such measurement (the message lists the names).
    """
    for module in MEASUREMENTS:
        if name == module.NAME:
            return module
    raise SystemExit(f"unknown measurement {name!r}; one of: "
                     + ", ".join(m.NAME for m in MEASUREMENTS))


def params_of(module: ModuleType, size: str,
              overrides: list[str] | None = None) -> dict[str, Any]:
    """The parameters of `module` for `size` (`"full"` or `"smoke"`), with `overrides`.

    Args:
        module: a measurement module.
        size: `"full"` or `"smoke"`.
        overrides: `KEY=VALUE` strings (VALUE parsed as JSON, else kept as a str); only keys
            the measurement has are applied, so one list can serve several measurements.
    """
    params = dict(module.FULL if size == "full" else module.SMOKE)
    for item in overrides or ():
        key, _, raw = item.partition("=")
        if key in params:
            try:
                params[key] = json.loads(raw)
            except ValueError:
                params[key] = raw
    return params


# ---------------------------------------------------------------------- running
def run_child(module: ModuleType, size: str, overrides: list[str]) -> dict[str, Any]:
    """Run one repetition of `module` in a fresh python process and return its result.

    Raises:
        RuntimeError: the child failed or timed out (the message holds its stderr tail).
    """
    with tempfile.TemporaryDirectory(prefix="gen_agent-bench-") as tmp:
        result_file = Path(tmp) / "result.json"
        command = [sys.executable, str(SCRIPT), "--child", module.NAME,
                   "--size", size, "--result-file", str(result_file)]
        command += [f"--param={item}" for item in overrides]
        try:
            done = subprocess.run(command, capture_output=True, text=True,
                                  timeout=CHILD_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"{module.NAME}: no result within {CHILD_TIMEOUT_S:g} s") from exc
        if done.returncode != 0 or not result_file.exists():
            tail = "\n".join(done.stderr.strip().splitlines()[-15:])
            raise RuntimeError(f"{module.NAME} exited with {done.returncode}:\n{tail}")
        return json.loads(result_file.read_text(encoding="utf-8"))


def run_measurement(module: ModuleType, size: str, reps: int, in_process: bool,
                    overrides: list[str] | None = None,
                    ) -> tuple[list[dict[str, Any]], str | None]:
    """Run `reps` repetitions of `module`; return `(results, error or None)`."""
    params = params_of(module, size, overrides)
    results: list[dict[str, Any]] = []
    try:
        for _ in range(reps):
            results.append(module.run_once(params) if in_process
                           else run_child(module, size, overrides or []))
    except Exception as exc:  # reported in the table and the exit status
        return results, f"{type(exc).__name__}: {exc}"
    return results, None


# ---------------------------------------------------------------------- output
def format_value(value: float | None) -> str:
    """A figure's value for the table: thousands separators, about 3 significant digits."""
    if value is None:
        return "n/a"
    if isinstance(value, int):
        return f"{value:,}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _verdict(figure: Figure) -> str:
    return {True: "ok", False: "MISS", None: ""}[figure.met]


def render_section(title: str, figures: list[Figure], error: str | None,
                   seconds: float, reps: int) -> str:
    """The table section of one measurement: a row per figure, notes underneath."""
    lines = [f"{title}   [{reps} rep(s), {seconds:.1f} s]"]
    for figure in figures:
        lines.append(f"  {figure.label:<48} {format_value(figure.value):>12} "
                     f"{figure.unit:<10} {figure.target:<24} {_verdict(figure)}".rstrip())
    notes = [f"{figure.label}: {figure.note}" for figure in figures if figure.note]
    lines += [f"    - {note}" for note in notes]
    if error:
        lines.append(f"  ERROR: {error}")
    return "\n".join(lines)


def write_json(path: Path, report: dict[str, Any]) -> None:
    """Write `report` as indented JSON (Figures become objects)."""
    path.write_bytes(msgspec.json.format(msgspec.json.encode(report), indent=2) + b"\n")


# ---------------------------------------------------------------------- entry points
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="run.py", description="Run the gen_agent benchmarks of issue 9: a table on stdout, "
        "results in benchmarks.json.")
    names = [m.NAME for m in MEASUREMENTS]
    parser.add_argument("--only", nargs="+", choices=names, metavar="NAME",
                        help=f"run only these measurements ({', '.join(names)})")
    parser.add_argument("--size", choices=("full", "smoke"), default="full",
                        help="full (the issue's sizes, default) or smoke (tiny, seconds)")
    parser.add_argument("--reps", type=int, default=None,
                        help="repetitions per measurement (default: each one's own)")
    parser.add_argument("--in-process", action="store_true",
                        help="run repetitions in this process instead of fresh children")
    parser.add_argument("--param", action="extend", nargs="+", default=[], metavar="KEY=VALUE",
                        help="override sizes, e.g. --param events=100000 agents=50 (JSON "
                             "values); each applies to the measurements that have KEY")
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks.json",
                        help="where to write the results (default: benchmarks.json at the root)")
    parser.add_argument("--profile", metavar="NAME", choices=names,
                        help="run one repetition of NAME in this process under a profiler")
    parser.add_argument("--profiler", choices=PROFILERS, default="cprofile",
                        help="cprofile: every thread, CPU time (default); pyinstrument: the "
                             "calling thread only")
    parser.add_argument("--profile-out", default=None,
                        help="also save the raw profile (.pstats / .html) there")
    parser.add_argument("--top", type=int, default=30, help="functions listed by --profile")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    return parser


def _child(args: argparse.Namespace) -> int:
    module = by_name(args.child)
    result = module.run_once(params_of(module, args.size, args.param))
    Path(args.result_file).write_bytes(msgspec.json.encode(result))
    return 0


def _profile(args: argparse.Namespace) -> int:
    module = by_name(args.profile)
    params = params_of(module, args.size, args.param)
    holder: dict[str, Any] = {}
    print(f"profiling {module.TITLE} ({args.size} size) with {args.profiler}", flush=True)
    report = profile_call(lambda: holder.update(result=module.run_once(params)),
                          args.profiler, top=args.top, out_path=args.profile_out)
    print(report)
    figures = module.summarize([holder["result"]], params)
    print(render_section(module.TITLE + " (under the profiler: slower)", figures, None, 0.0, 1))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks; return the process exit status (1 if a measurement broke)."""
    args = _parser().parse_args(argv)
    if args.child:
        return _child(args)
    if args.profile:
        return _profile(args)
    selected = [m for m in MEASUREMENTS if not args.only or m.NAME in args.only]
    machine = machine_info()
    print(f"gen_agent benchmarks on {machine['cpu']}, {machine['cores']} cores, "
          f"Python {machine['python']}, pykka {machine['packages']['pykka']}, "
          f"msgspec {machine['packages']['msgspec']}; load average "
          f"{machine['load_average_at_start']}", flush=True)
    started = time.perf_counter()
    report: dict[str, Any] = {"machine": machine, "size": args.size, "measurements": {}}
    broken = False
    sections = []
    for module in selected:
        reps = args.reps or module.REPS
        began = time.perf_counter()
        results, error = run_measurement(module, args.size, reps, args.in_process, args.param)
        seconds = time.perf_counter() - began
        params = params_of(module, args.size, args.param)
        figures = module.summarize(results, params) if results else []
        broken = broken or error is not None
        section = render_section(module.TITLE, figures, error, seconds, len(results))
        sections.append(section)
        print("\n" + section, flush=True)
        report["measurements"][module.NAME] = {
            "title": module.TITLE, "params": params, "reps": results, "seconds": seconds,
            "error": error, "figures": {figure.key: figure for figure in figures}}
    total = time.perf_counter() - started
    report["total_seconds"] = total
    report["load_average_at_end"] = load_average()
    write_json(args.json, report)
    print("\n" + "=" * 100 + "\nSUMMARY\n" + "\n\n".join(sections))
    over = f" (over the {BUDGET_S:g} s budget)" if total > BUDGET_S else ""
    print(f"\ntotal {total:.1f} s{over}; load average at the end {load_average()} "
          f"(above {machine['cores']} means other work shared the cores); results written "
          f"to {os.path.relpath(args.json)}")
    return 1 if broken else 0
