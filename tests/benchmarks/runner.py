"""The benchmark runner behind `make bench` (entry point: tests/benchmarks/run.py).

It discovers the measurement modules of this folder, runs them, prints a table and writes
benchmarks.json. Usage (from the project root, with the venv's python):

    python tests/benchmarks/run.py                      # everything, full size (< 10 min)
    python tests/benchmarks/run.py --only turn_overhead --rounds 30
    python tests/benchmarks/run.py --size smoke --in-process
    python tests/benchmarks/run.py --profile event_throughput --param events=200000
    python tests/benchmarks/run.py --compare old.json benchmarks.json   # ratios that moved
    python tests/benchmarks/run.py --markdown benchmarks.json           # README table

Two kinds of module (tests/benchmarks/README.md says how to add one):

- *comparison* modules declare figures with `@figure` (`_harness`): every placement
  (unpinned, then pinned to one CPU) runs in its own fresh child process, where the figures
  run in interleaved rounds; each row shows median [min-max] per placement.
- *run-once* modules (`run_once(params) -> dict`, `summarize(reps, params) -> [Figure]`) run
  `REPS` repetitions, each in a fresh child process (memory figures start from a clean heap).

Targets are the issues' goals, printed beside each figure, never asserted. The exit status is
1 only when a measurement broke (an exception or a failed correctness check).
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib
import json
import os
import pkgutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec

from ._common import Figure, load_average, machine_info
from ._harness import PLACEMENTS, can_pin, is_comparison, run_comparison, summarize_comparison
from .profiling import PROFILERS, profile_call

_NOT_MEASUREMENTS = {"run", "runner", "profiling"}


def discover() -> tuple[ModuleType, ...]:
    """Every measurement module of this package (a public module with a `NAME`), sorted by
    its `ORDER` (default 100), then by name. A new module needs no registration."""
    found = []
    for info in pkgutil.iter_modules([str(Path(__file__).resolve().parent)]):
        if info.name.startswith("_") or info.name in _NOT_MEASUREMENTS:
            continue
        module = importlib.import_module(f"{__package__}.{info.name}")
        if hasattr(module, "NAME"):
            found.append(module)
    return tuple(sorted(found, key=lambda m: (getattr(m, "ORDER", 100), m.NAME)))


MEASUREMENTS: tuple[ModuleType, ...] = discover()
"""The measurement modules; each has NAME, TITLE, FULL, SMOKE and either `@figure`s
(comparison) or REPS, `run_once(params) -> dict` and `summarize(reps, params)` (run-once)."""

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).resolve().with_name("run.py")
BUDGET_S = 600.0
CHILD_TIMEOUT_S = 300.0
MOVED = 0.15
"""`--compare` flags a ratio whose median moved more than this fraction."""


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
            the measurement has are applied, so one list can serve several measurements
            (`rounds` applies to every comparison).
    """
    params = dict(module.FULL if size == "full" else module.SMOKE)
    if is_comparison(module):
        params.setdefault("rounds", 5)
        params.setdefault("warmup_rounds", 1)
    for item in overrides or ():
        key, _, raw = item.partition("=")
        if key in params:
            try:
                params[key] = json.loads(raw)
            except ValueError:
                params[key] = raw
    return params


# ---------------------------------------------------------------------- running
def run_child(module: ModuleType, size: str, overrides: list[str],
              where: str | None = None) -> dict[str, Any]:
    """Run one repetition (or, for a comparison, one placement) of `module` in a fresh python
    process and return its result.

    Raises:
        RuntimeError: the child failed or timed out (the message holds its stderr tail).
    """
    with tempfile.TemporaryDirectory(prefix="gen_agent-bench-") as tmp:
        result_file = Path(tmp) / "result.json"
        command = [sys.executable, str(SCRIPT), "--child", module.NAME,
                   "--size", size, "--result-file", str(result_file)]
        if where is not None:
            command += ["--placement", where]
        command += [f"--param={item}" for item in overrides]
        limit_s = getattr(module, "CHILD_TIMEOUT_S", CHILD_TIMEOUT_S)  # a module may need more
        try:
            done = subprocess.run(command, capture_output=True, text=True,
                                  timeout=limit_s, check=False)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"{module.NAME}: no result within {limit_s:g} s") from exc
        if done.returncode != 0 or not result_file.exists():
            tail = "\n".join(done.stderr.strip().splitlines()[-15:])
            raise RuntimeError(f"{module.NAME} exited with {done.returncode}:\n{tail}")
        return json.loads(result_file.read_text(encoding="utf-8"))


def run_measurement(module: ModuleType, size: str, reps: int, in_process: bool,
                    overrides: list[str] | None = None,
                    placements: tuple[str, ...] = PLACEMENTS,
                    ) -> tuple[Any, str | None]:
    """Run `module`; return `(results, error or None)`.

    A comparison's results are `{placement: run_comparison result}` (one fresh child per
    placement); a run-once module's are the list of its `reps` repetitions' results.
    """
    params = params_of(module, size, overrides)
    if is_comparison(module):
        by_place: dict[str, Any] = {}
        try:
            for where in placements:
                if where == "pinned" and not can_pin():
                    continue
                by_place[where] = (run_comparison(module, params, where) if in_process
                                   else run_child(module, size, overrides or [], where))
        except Exception as exc:  # reported in the table and the exit status
            return by_place, f"{type(exc).__name__}: {exc}"
        return by_place, None
    results: list[dict[str, Any]] = []
    try:
        for _ in range(reps):
            results.append(module.run_once(params) if in_process
                           else run_child(module, size, overrides or []))
    except Exception as exc:  # reported in the table and the exit status
        return results, f"{type(exc).__name__}: {exc}"
    return results, None


def summarize(module: ModuleType, results: Any, params: dict[str, Any]) -> list[Figure]:
    """The table rows of `module` from `run_measurement`'s results."""
    if not results:
        return []
    if is_comparison(module):
        return summarize_comparison(module, results)
    return list(module.summarize(results, params))


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


def _spread(median: float | None, low: float | None, high: float | None) -> str:
    if median is None:
        return "n/a"
    if low is None or high is None or low == high:
        return format_value(median)
    return f"{format_value(median)} [{format_value(low)}-{format_value(high)}]"


def render_row(figure: Figure) -> str:
    """One table row: label, unpinned median [min-max], pinned median [min-max], unit,
    target and verdict."""
    pinned = "" if figure.pinned is None else _spread(figure.pinned, figure.pinned_low,
                                                      figure.pinned_high)
    return (f"  {figure.label:<46} {_spread(figure.value, figure.low, figure.high):>26} "
            f"{pinned:>26} {figure.unit:<9} {figure.target:<14} {_verdict(figure)}").rstrip()


def render_section(title: str, figures: list[Figure], error: str | None,
                   seconds: float, runs: str) -> str:
    """The table section of one measurement: a row per figure, notes underneath."""
    lines = [f"{title}   [{runs}, {seconds:.1f} s]"]
    if any(figure.pinned is not None for figure in figures):
        lines.append(f"  {'':<46} {'unpinned median [min-max]':>26} "
                     f"{'pinned median [min-max]':>26}")
    lines += [render_row(figure) for figure in figures]
    notes = list(dict.fromkeys(f"{figure.label.strip()}: {figure.note}"
                               for figure in figures if figure.note))
    lines += [f"    - {note}" for note in notes]
    if error:
        lines.append(f"  ERROR: {error}")
    return "\n".join(lines)


def write_json(path: Path, report: dict[str, Any]) -> None:
    """Write `report` as indented JSON (Figures become objects)."""
    path.write_bytes(msgspec.json.format(msgspec.json.encode(report), indent=2) + b"\n")


def _readme_keys(module: ModuleType, figures: list[Figure]) -> list[Figure]:
    patterns = getattr(module, "README", None)
    if patterns is None:
        return [f for f in figures if f.target or f.unit == "x"]

    def wanted(key: str) -> bool:
        return any(fnmatch.fnmatchcase(key, pattern) for pattern in patterns)

    return [f for f in figures if wanted(f.key)]


TIMES, EN_DASH = "\u00d7", "\u2013"


def markdown_table(report: dict[str, Any]) -> str:
    """The README's performance table from a benchmarks.json report: the machine line, then
    one row per headline figure (a module's `README` keys, else its targets and ratios) with
    both placements' median [min-max]."""
    machine = report["machine"]
    lines = [f"{machine['cpu']}, {machine['cores']} cores, Python {machine['python']}, pykka "
             f"{machine['packages']['pykka']}, msgspec {machine['packages']['msgspec']}, "
             f"{machine['date_utc'][:10]}; load average {machine['load_average_at_start']} at "
             f"the start, {report.get('load_average_at_end')} at the end; "
             f"{report.get('total_seconds', 0):.0f} s in all.", "",
             f"| benchmark | figure | unpinned: median [min{EN_DASH}max] | pinned to 1 CPU "
             "| goal |",
             "|---|---|---|---|---|"]
    for name, measured in report["measurements"].items():
        try:
            module = by_name(name)
        except SystemExit:
            continue
        figures = [msgspec.convert(f, Figure) for f in measured["figures"].values()]
        for figure in _readme_keys(module, figures):
            unit = TIMES if figure.unit == "x" else f" {figure.unit}"
            value = _spread(figure.value, figure.low, figure.high) + unit
            pinned = "" if figure.pinned is None else _spread(
                figure.pinned, figure.pinned_low, figure.pinned_high) + unit
            goal = figure.target + ("" if figure.met is None else
                                    " (met)" if figure.met else " (missed)")
            lines.append(f"| {name} | {figure.label.strip()} | {value} | {pinned} | {goal} |")
    return "\n".join(lines)


def compare_reports(old: dict[str, Any], new: dict[str, Any], moved: float = MOVED,
                    ) -> tuple[list[str], list[str]]:
    """Ratios (unit `x`) of two reports side by side; returns `(lines, moved_keys)` where a
    key moved when either placement's median changed by more than `moved` (a fraction)."""
    lines, flagged = [], []
    for name, measured in new["measurements"].items():
        before = old["measurements"].get(name, {}).get("figures", {})
        for key, figure in measured["figures"].items():
            if figure["unit"] != "x" or key not in before:
                continue
            cells = []
            changed = False
            for field in ("value", "pinned"):
                a, b = before[key].get(field), figure.get(field)
                if a is None or b is None or a == 0:
                    continue
                change = b / a - 1
                changed = changed or abs(change) > moved
                cells.append(f"{field if field == 'pinned' else 'unpinned'} "
                             f"{format_value(a)} -> {format_value(b)} ({change:+.0%})")
            if not cells:
                continue
            mark = "MOVED" if changed else "ok"
            if changed:
                flagged.append(f"{name}.{key}")
            lines.append(f"  {mark:<5} {name}.{key}: " + "; ".join(cells))
    return lines, flagged


# ---------------------------------------------------------------------- entry points
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="run.py", description="Run the gen_agent benchmarks: a table on stdout, results "
        "in benchmarks.json. tests/benchmarks/README.md says how to add one.")
    names = [m.NAME for m in MEASUREMENTS]
    parser.add_argument("--only", nargs="+", choices=names, metavar="NAME",
                        help=f"run only these measurements ({', '.join(names)})")
    parser.add_argument("--size", choices=("full", "smoke"), default="full",
                        help="full (the issues' sizes, default) or smoke (tiny, seconds)")
    parser.add_argument("--reps", type=int, default=None,
                        help="repetitions of a run-once measurement (default: its own REPS)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="interleaved rounds of a comparison (default: its own)")
    parser.add_argument("--placement", choices=PLACEMENTS, action="append", default=None,
                        help="run comparisons only in this placement (repeatable; default "
                             "both: unpinned, then pinned to one CPU)")
    parser.add_argument("--in-process", action="store_true",
                        help="run everything in this process instead of fresh children")
    parser.add_argument("--param", action="extend", nargs="+", default=[], metavar="KEY=VALUE",
                        help="override sizes, e.g. --param events=100000 levels=[1,10] (JSON "
                             "values); each applies to the measurements that have KEY")
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks.json",
                        help="where to write the results (default: benchmarks.json at the root)")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("OLD", "NEW"),
                        help="print the ratios of two benchmarks.json files and those that "
                             f"moved more than {MOVED:.0%}%; run nothing")
    parser.add_argument("--markdown", type=Path, metavar="JSON",
                        help="print the README performance table of a benchmarks.json; run "
                             "nothing")
    parser.add_argument("--profile", metavar="NAME", choices=names,
                        help="run NAME once in this process under a profiler (a comparison: "
                             "its rounds, unpinned)")
    parser.add_argument("--profiler", choices=PROFILERS, default="cprofile",
                        help="cprofile: every thread, CPU time (default); pyinstrument: the "
                             "calling thread only")
    parser.add_argument("--profile-out", default=None,
                        help="also save the raw profile (.pstats / .html) there")
    parser.add_argument("--top", type=int, default=30, help="functions listed by --profile")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    return parser


def _overrides(args: argparse.Namespace) -> list[str]:
    return list(args.param) + ([f"rounds={args.rounds}"] if args.rounds else [])


def _child(args: argparse.Namespace) -> int:
    module = by_name(args.child)
    params = params_of(module, args.size, _overrides(args))
    if is_comparison(module):
        result = run_comparison(module, params, (args.placement or ["unpinned"])[0])
    else:
        result = module.run_once(params)
    Path(args.result_file).write_bytes(msgspec.json.encode(result))
    return 0


def _profile(args: argparse.Namespace) -> int:
    module = by_name(args.profile)
    params = params_of(module, args.size, _overrides(args))
    holder: dict[str, Any] = {}
    print(f"profiling {module.TITLE} ({args.size} size) with {args.profiler}", flush=True)
    if is_comparison(module):
        def work() -> None:
            holder.update(result={"unpinned": run_comparison(module, params, "unpinned")})
    else:
        def work() -> None:
            holder.update(result=[module.run_once(params)])
    report = profile_call(work, args.profiler, top=args.top, out_path=args.profile_out)
    print(report)
    figures = summarize(module, holder["result"], params)
    print(render_section(module.TITLE + " (under the profiler: slower)", figures, None, 0.0,
                         "1 run"))
    return 0


def _compare(args: argparse.Namespace) -> int:
    old, new = (json.loads(path.read_text(encoding="utf-8")) for path in args.compare)
    lines, flagged = compare_reports(old, new)
    print(f"ratios of {args.compare[0]} -> {args.compare[1]} (MOVED: more than "
          f"{MOVED:.0%} in either placement)")
    print("\n".join(lines))
    print(f"{len(flagged)} of {len(lines)} ratios moved more than {MOVED:.0%}"
          + (": " + ", ".join(flagged) if flagged else ""))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks; return the process exit status (1 if a measurement broke)."""
    args = _parser().parse_args(argv)
    if args.child:
        return _child(args)
    if args.profile:
        return _profile(args)
    if args.compare:
        return _compare(args)
    if args.markdown:
        print(markdown_table(json.loads(args.markdown.read_text(encoding="utf-8"))))
        return 0
    overrides = _overrides(args)
    placements = tuple(args.placement or PLACEMENTS)
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
        reps = args.reps or getattr(module, "REPS", 1)
        began = time.perf_counter()
        results, error = run_measurement(module, args.size, reps, args.in_process, overrides,
                                         placements)
        seconds = time.perf_counter() - began
        params = params_of(module, args.size, overrides)
        figures = summarize(module, results, params)
        broken = broken or error is not None
        if is_comparison(module):
            runs = (f"{params['rounds']} interleaved rounds x "
                    + " + ".join(f"{where} (CPUs {','.join(map(str, r['cpus']))})"
                                 for where, r in results.items()))
        else:
            runs = f"{len(results)} rep(s)"
        section = render_section(module.TITLE, figures, error, seconds, runs)
        sections.append(section)
        print("\n" + section, flush=True)
        report["measurements"][module.NAME] = {
            "title": module.TITLE, "kind": "comparison" if is_comparison(module) else "once",
            "params": params, "results": results, "seconds": seconds, "error": error,
            "figures": {figure.key: figure for figure in figures}}
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
