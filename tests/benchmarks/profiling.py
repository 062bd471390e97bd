"""`--profile NAME`: where a measurement's time goes.

An agent's work happens in its actor thread and its turn-task threads, not in the thread that
calls `ask`, so a profiler that sees one thread (pyinstrument, plain cProfile) shows the caller
waiting. The default profiler here, `cprofile`, runs one `cProfile.Profile` per thread, timed
with `time.thread_time` (CPU seconds of that thread, so waiting costs nothing), installed in
every thread started during the run through `threading.setprofile`; the per-thread statistics
are merged (calls still running when the run ends, such as a parked worker's wait, are left
out). Deterministic profiling adds a fixed cost per Python call (here a CPU-clock system call per
profiler event, often 10x slower overall), which inflates code that makes many small calls:
read the split between functions and threads, not the absolute seconds, and profile at a
reduced size (`--param events=100000`).
`pyinstrument` (if installed) profiles the calling thread only, with wall-clock time.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

__all__ = ["PROFILERS", "profile_call"]

PROFILERS = ("cprofile", "pyinstrument")


def _group(thread_name: str) -> str:
    # Pooled and numbered threads ("gen_agent-turn", "AgentActor-12 (...)") group by prefix.
    return re.sub(r"[-_ ]?\d+.*$", "", thread_name) or thread_name


class _Snapshot:
    """The statistics of a profiler still installed in another thread, for `pstats.Stats`.

    `Profile.create_stats()` would flush the calls still running there (a parked worker's
    wait, the timer thread's loop) timed with THIS thread's CPU clock, which is meaningless;
    `snapshot_stats()` reads the finished calls only.
    """

    def __init__(self, profile: cProfile.Profile) -> None:
        profile.snapshot_stats()
        self.stats = profile.stats  # type: ignore[attr-defined]

    def create_stats(self) -> None:
        """Already taken (pstats calls this)."""


def _cprofile(fn: Callable[[], Any], top: int, out_path: str | None) -> str:
    profiles: list[tuple[str, cProfile.Profile]] = []
    lock = threading.Lock()

    def bootstrap(frame: Any, event: str, arg: Any) -> None:
        # Runs once, as the first profile event of a new thread: replace itself by a profiler.
        profile = cProfile.Profile(time.thread_time)
        with lock:
            profiles.append((threading.current_thread().name, profile))
        profile.enable()

    main = cProfile.Profile(time.thread_time)
    threading.setprofile(bootstrap)
    main.enable()
    try:
        fn()
    finally:
        main.disable()
        threading.setprofile(None)  # type: ignore[arg-type]
    buffer = io.StringIO()
    stats = pstats.Stats(main, stream=buffer)
    per_group: dict[str, float] = defaultdict(float)
    per_group["MainThread"] = stats.total_tt
    with lock:
        taken = list(profiles)
    for name, profile in taken:
        single = pstats.Stats(_Snapshot(profile))
        per_group[_group(name)] += single.total_tt
        stats.add(single)
    if out_path:
        stats.dump_stats(out_path)
    total = sum(per_group.values()) or 1.0
    buffer.write("CPU seconds per thread group (time.thread_time, profiler overhead "
                 "included):\n")
    for name, seconds in sorted(per_group.items(), key=lambda item: -item[1]):
        buffer.write(f"  {name:<28} {seconds:8.3f} s  {100 * seconds / total:5.1f} %\n")
    buffer.write(f"\nTop {top} functions by own CPU time, all {len(taken) + 1} threads:\n")
    stats.strip_dirs().sort_stats("tottime").print_stats(top)
    buffer.write(f"Top {top} by cumulative CPU time:\n")
    stats.sort_stats("cumulative").print_stats(top)
    return buffer.getvalue()


def _pyinstrument(fn: Callable[[], Any], out_path: str | None) -> str:
    from pyinstrument import Profiler

    profiler = Profiler()
    profiler.start()
    try:
        fn()
    finally:
        profiler.stop()
    if out_path:
        with open(out_path, "w", encoding="utf-8") as out:
            out.write(profiler.output_html())
    header = "pyinstrument sees the calling thread only (the agent works in other threads)\n"
    return header + profiler.output_text(unicode=False, color=False)


def profile_call(fn: Callable[[], Any], profiler: str = "cprofile", *, top: int = 30,
                 out_path: str | None = None) -> str:
    """Run `fn()` under `profiler` and return the report text.

    Args:
        fn: the work to profile (no arguments).
        profiler: `"cprofile"` (all threads, CPU time) or `"pyinstrument"` (calling thread).
        top: how many functions to list (cprofile).
        out_path: also write the raw profile there (`.pstats` for cprofile, HTML for
            pyinstrument), or None.

    Returns:
        The report, ready to print.

    Raises:
        ValueError: unknown `profiler`. ImportError: pyinstrument asked for but missing.
    """
    if profiler == "cprofile":
        return _cprofile(fn, top, out_path)
    if profiler == "pyinstrument":
        return _pyinstrument(fn, out_path)
    raise ValueError(f"profiler must be one of {PROFILERS}, got {profiler!r}")
