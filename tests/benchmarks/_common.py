"""Shared pieces of the benchmarks: figures, statistics, memory readings, bench agents.

Everything here uses gen_agent's public API only, so the harness survives changes to the core.
Units: durations in seconds unless the name says `_us`/`_ms`, sizes in bytes unless `_kib`/
`_mib` (KiB = 1024 bytes, MiB = 1024 KiB; "MB/s" in the parsing figures is 10^6 bytes/s).
"""

from __future__ import annotations

import ctypes
import gc
import math
import os
import platform
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from importlib import metadata
from typing import Any

import msgspec

import gen_agent
from gen_agent import Event

__all__ = [
    "KIB",
    "MIB",
    "BenchAgent",
    "CountingAgent",
    "Figure",
    "PeakRss",
    "StreamBackend",
    "load_average",
    "machine_info",
    "median",
    "percentile",
    "release_free_memory",
    "rss_bytes",
]

KIB = 1 << 10
MIB = 1 << 20


class Figure(msgspec.Struct, frozen=True, kw_only=True):
    """One row of the results table.

    Fields:
        key: stable identifier in benchmarks.json (`str`).
        label: the table's text (`str`).
        value: the figure (the median over the rounds or repetitions; a comparison's
            unpinned median), or None when it could not be measured (see `note`).
        unit: the unit of `value` (`"us"`, `"events/s"`, `"MB/s"`, `"KiB"`, `"s"`, `"x"`...).
        low / high: the minimum / maximum behind `value` (None when not repeated).
        pinned / pinned_low / pinned_high: median / min / max with every thread pinned to one
            CPU (comparisons only; None otherwise).
        rounds: how many rounds (or repetitions) the spread is over.
        target: the issue's goal for this figure as text, `""` when it has none.
        met: whether `value` (and `pinned`, when measured) meets `target`; None when there is
            no target or no value.
        note: what exactly was timed, or why the value is missing.
    """

    key: str
    label: str
    value: float | None
    unit: str
    low: float | None = None
    high: float | None = None
    pinned: float | None = None
    pinned_low: float | None = None
    pinned_high: float | None = None
    rounds: int = 0
    target: str = ""
    met: bool | None = None
    note: str = ""


def median(values: Iterable[float | None]) -> float | None:
    """The median of the non-None `values`, or None when there are none."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of `values` (`fraction` in (0, 1], e.g. 0.99).

    Raises:
        ValueError: `values` is empty.
    """
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _load_malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim  # glibc only
    except (OSError, AttributeError):
        return None


_malloc_trim = _load_malloc_trim()


def release_free_memory() -> None:
    """`gc.collect()`, then hand the C heap's free pages back to the OS (glibc `malloc_trim`).

    Without it, memory a previous run freed stays resident and is reused silently, so a later
    run in the same process would look smaller than it is.
    """
    gc.collect()
    if _malloc_trim is not None:
        _malloc_trim(0)


def rss_bytes(collect: bool = True) -> int:
    """Resident set size of this process in bytes (VmRSS of /proc/self/status).

    Args:
        collect: run `release_free_memory()` first (default True) so garbage and free heap
            pages do not count.

    Returns:
        The resident size in bytes; 0 where /proc is not available.
    """
    if collect:
        release_free_memory()
    kib = _status_kib("VmRSS")
    return 0 if kib is None else kib * KIB


class PeakRss:
    """Measure the peak resident growth of a block: `with PeakRss() as peak: ...`.

    Reads VmRSS after `release_free_memory()` on entry, resets the kernel's peak (writing 5 to
    /proc/self/clear_refs) and reads VmHWM on exit, so short spikes count. Where the reset is
    not permitted, a thread samples VmRSS every 2 ms instead (spikes between samples are
    missed). `method` says which was used.

    Attributes (after the block): `baseline_bytes`, `peak_bytes`, `growth_bytes` (peak minus
    baseline, never negative), `after_bytes` (VmRSS right after the block, no gc), `method`.
    """

    def __init__(self) -> None:
        self.baseline_bytes = 0
        self.peak_bytes = 0
        self.after_bytes = 0
        self.method = ""
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None
        self._sampled = 0

    @property
    def growth_bytes(self) -> int:
        """Peak minus baseline, in bytes (>= 0)."""
        return max(0, self.peak_bytes - self.baseline_bytes)

    def __enter__(self) -> PeakRss:
        self.baseline_bytes = rss_bytes()
        try:
            with open("/proc/self/clear_refs", "w", encoding="ascii") as clear:
                clear.write("5")
            self.method = "VmHWM after a clear_refs reset"
        except OSError:
            self.method = "VmRSS sampled every 2 ms"
            self._sampled = self.baseline_bytes
            self._sampler = threading.Thread(target=self._sample, name="bench-rss", daemon=True)
            self._sampler.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.002):
            self._sampled = max(self._sampled, rss_bytes(collect=False))

    def __exit__(self, *exc: object) -> None:
        self.after_bytes = rss_bytes(collect=False)
        if self._sampler is not None:
            self._stop.set()
            self._sampler.join(timeout=5)
            self.peak_bytes = max(self._sampled, self.after_bytes)
        else:
            hwm = _status_kib("VmHWM")
            self.peak_bytes = self.after_bytes if hwm is None else hwm * KIB


class StreamBackend(gen_agent.Backend):
    """A bench backend: each turn's stream is whatever `opts["stream"]()` returns.

    `opts["stream"]` is a zero-argument callable returning an iterable of `Event`s that ends
    with a terminal event (a prebuilt tuple answers at once; a generator streams). No
    bookkeeping, so a figure measured with it is the runtime's cost, not a mock's.
    """

    @classmethod
    def start_session(cls, opts: dict[str, Any]) -> Callable[[], Iterable[Event]]:
        """Return the stream factory as the session."""
        return opts["stream"]

    @classmethod
    def prompt(cls, session: Any, prompt: str, context: Any) -> tuple[Iterable[Event], Any]:
        """Return `(session(), session)`: a fresh stream per turn."""
        return session(), session

    @classmethod
    def terminate_session(cls, session: Any) -> None:
        """Nothing to release."""


class BenchAgent(gen_agent.GenAgent):
    """A minimal agent: backend options from the `backend_opts` start option, state 0."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        """Return `(opts["backend_opts"], 0)`."""
        return dict(opts.get("backend_opts", {})), 0

    def handle_response(self, ref: Any, response: Any, state: Any) -> gen_agent.NoReply:
        """Go idle, keeping the state."""
        return gen_agent.NoReply(state)


class CountingAgent(BenchAgent):
    """A `BenchAgent` with a `handle_stream_event` that counts the events of a turn."""

    def handle_stream_event(self, event: Any, state: Any) -> Any:
        """Return `state + 1` (the count reaches the decision callback after the turn)."""
        return state + 1


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (other work on the machine skews timings)."""
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return None


def machine_info() -> dict[str, Any]:
    """Where the figures come from: CPU, cores, memory, load, Python and package versions."""
    mem_kib = None
    try:
        with open("/proc/meminfo", encoding="ascii") as info:
            mem_kib = int(info.readline().split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": None if mem_kib is None else round(mem_kib / MIB, 1),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "load_average_at_start": load_average(),
        "packages": {
            name: _version(name)
            for name in ("gen-agent", "pykka", "msgspec", "loguru", "claude-agent-sdk")
        },
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
