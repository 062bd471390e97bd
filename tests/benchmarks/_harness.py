"""The comparison harness: interleaved rounds, two CPU placements, min / median / max.

A *comparison* module declares one function per figure with `@figure`, each returning the
figure's value for one round (a float, a `Measured`, or None when it cannot be measured), and
optionally names its *peer* (another figure of the module) and its *target*. The harness then:

1. enters the module's `setup(params)` context manager (if any) once: the agents, actors and
   data every round shares, yielded as a dict (`env`) that each figure function receives;
2. runs every figure `warmup_rounds` times untimed, then `rounds` times interleaved
   (A, B, C, A, B, C, ...), so load and CPU placement drift hit every variant alike;
3. does all of that twice, in two placements: `unpinned` (the process may use every CPU it
   is allowed) and `pinned` (every thread of the process on one CPU, `os.sched_setaffinity`);
4. reports per placement the min / median / max of every figure over the rounds, and of the
   ratio `figure / peer` computed round by round (the same round of the same process).

`Measured(value, extras)` carries secondary values of the same round (p99, turns/s, ...); the
table shows each extra as its own row and ratios are also taken for the extras both figures
share. Targets are strings such as `"<= 2"` or `">= 500000"`: on the ratio when the figure has
a peer, else on the value. They are printed, never asserted (tests/benchmarks/README.md).
"""

from __future__ import annotations

import contextlib
import operator
import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import msgspec

from ._common import Figure, percentile

__all__ = [
    "PLACEMENTS",
    "FigureSpec",
    "Measured",
    "Ratio",
    "Target",
    "figure",
    "figures_of",
    "is_comparison",
    "latency_us",
    "placement",
    "ratios_of",
    "run_comparison",
    "summarize_comparison",
    "time_calls_us",
]

PLACEMENTS = ("unpinned", "pinned")
"""The two CPU placements every comparison runs in, in this order."""


class Measured(msgspec.Struct, frozen=True):
    """One round's result of a figure: the headline `value` and named secondary values.

    Fields:
        value: the figure's value this round (its unit is the figure's).
        extras: `{name: value}` measured in the same round, e.g. `{"p99_us": 210.0}`; a name
            carries its unit (`_us`, `_per_s`).
    """

    value: float
    extras: dict[str, float] = {}


def time_calls_us(call: Callable[[], Any], calls: int) -> list[float]:
    """Call `call()` `calls` times and return each call's wall time in microseconds."""
    clock = time.perf_counter
    samples = []
    for _ in range(calls):
        started = clock()
        call()
        samples.append((clock() - started) * 1e6)
    return samples


def latency_us(samples_us: Sequence[float], **extras: float) -> Measured:
    """A round of latencies as a `Measured`: value = p50, extras `p99_us` plus `extras`.

    Raises:
        ValueError: `samples_us` is empty.
    """
    return Measured(statistics.median(samples_us),
                    {"p99_us": percentile(samples_us, 0.99), **extras})


_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt}


@dataclass(frozen=True)
class Target:
    """A goal such as `<= 2` (parsed from that text by `Target.parse`)."""

    op: str
    bound: float

    @classmethod
    def parse(cls, text: str) -> Target:
        """Parse `"<= 2"`, `">= 500_000"`, `"< 10"`, `"> 1"` (an `x` suffix is allowed).

        Raises:
            ValueError: not one of those forms.
        """
        for op in ("<=", ">=", "<", ">"):
            if text.strip().startswith(op):
                number = text.strip()[len(op):].strip().rstrip("x").replace("_", "")
                return cls(op, float(number.replace(",", "")))
        raise ValueError(f"target {text!r}: expected '<= N', '>= N', '< N' or '> N'")

    def met(self, value: float | None) -> bool | None:
        """Whether `value` meets the goal; None when there is no value."""
        return None if value is None else _OPS[self.op](value, self.bound)

    def __str__(self) -> str:
        return f"{self.op} {self.bound:,g}"


@dataclass(frozen=True)
class FigureSpec:
    """A figure declared with `@figure` (see there for the fields)."""

    key: str
    fn: Callable[[dict[str, Any], dict[str, Any]], Measured | float | None]
    label: str
    unit: str
    peer: str | None
    target: Target | None
    note: str


@dataclass(frozen=True)
class Ratio:
    """A ratio `subject / peer` reported round by round (declared by `figure(peer=...)` or in
    a module's `RATIOS` list), with an optional target."""

    subject: str
    peer: str
    target: Target | None = None
    label: str = ""

    @property
    def key(self) -> str:
        """`"<subject>_vs_<peer>"`, the ratio's key in benchmarks.json."""
        return f"{self.subject}_vs_{self.peer}"


_REGISTRY: dict[str, list[FigureSpec]] = {}


def figure(*, unit: str, label: str = "", peer: str | None = None, target: str | None = None,
           key: str | None = None, note: str = "",
           ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare a function `fn(env, params) -> Measured | float | None` as one figure.

    Args:
        unit: the value's unit (`"us"`, `"events/s"`, `"MB/s"`, ...).
        label: the table's text (default: the key).
        peer: the key of the figure it is compared with (`value / peer's value` per round).
        target: the goal, e.g. `"<= 2"`: on the ratio when `peer` is given, else on the value.
        key: the figure's key (default: the function's name); set it when one function
            template is registered several times (e.g. once per concurrency level).
        note: what exactly is timed (printed under the table).

    Returns:
        The decorator; it returns `fn` unchanged and registers the figure with `fn`'s module,
        in declaration order (the order of the rounds).
    """
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        spec = FigureSpec(key=key or fn.__name__, fn=fn, label=label or key or fn.__name__,
                          unit=unit, peer=peer, target=None if target is None else
                          Target.parse(target), note=note)
        specs = _REGISTRY.setdefault(fn.__module__, [])
        if any(existing.key == spec.key for existing in specs):
            raise ValueError(f"figure {spec.key!r} declared twice in {fn.__module__}")
        specs.append(spec)
        return fn
    return register


def figures_of(module: ModuleType) -> list[FigureSpec]:
    """The figures `module` declared with `@figure`, in declaration order."""
    return list(_REGISTRY.get(module.__name__, ()))


def is_comparison(module: ModuleType) -> bool:
    """Whether `module` is a comparison module (declares figures) rather than a run-once one."""
    return bool(figures_of(module))


def ratios_of(module: ModuleType) -> list[Ratio]:
    """The figures' peer ratios, then the module's extra `RATIOS`."""
    ratios = [Ratio(spec.key, spec.peer, spec.target) for spec in figures_of(module)
              if spec.peer is not None]
    return ratios + list(getattr(module, "RATIOS", ()))


# ---------------------------------------------------------------------- placement
def _set_affinity_of_every_thread(cpus: set[int]) -> None:
    # sched_setaffinity(tid) affects one thread; new threads inherit their creator's mask.
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):  # the thread ended meanwhile
            os.sched_setaffinity(int(tid), cpus)


def can_pin() -> bool:
    """Whether this platform lets a process pin its threads (Linux)."""
    return hasattr(os, "sched_setaffinity") and os.path.isdir("/proc/self/task")


@contextmanager
def placement(name: str) -> Iterator[list[int]]:
    """Run the block `unpinned` (as inherited) or `pinned` (every thread on one CPU, the
    highest-numbered one this process may use; restored afterwards). Yields the CPU list.

    Raises:
        ValueError: an unknown placement name.
        RuntimeError: `pinned` where the platform cannot pin (see `can_pin`).
    """
    if name not in PLACEMENTS:
        raise ValueError(f"placement {name!r}: one of {PLACEMENTS}")
    allowed = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set()
    if name == "unpinned":
        yield sorted(allowed)
        return
    if not can_pin():
        raise RuntimeError("pinning needs os.sched_setaffinity and /proc (Linux)")
    cpu = max(allowed)
    _set_affinity_of_every_thread({cpu})
    try:
        yield [cpu]
    finally:
        _set_affinity_of_every_thread(allowed)


# ---------------------------------------------------------------------- running
def _as_measured(result: Measured | float | None) -> Measured | None:
    if result is None or isinstance(result, Measured):
        return result
    return Measured(float(result))


def run_comparison(module: ModuleType, params: dict[str, Any], where: str) -> dict[str, Any]:
    """Run every figure of `module`: `warmup_rounds` untimed, then `rounds` interleaved.

    Args:
        module: a comparison module (`figures_of(module)` not empty), optionally with
            `setup(params)`, a context manager yielding the shared `env` dict. A figure
            function may put a text into `env["notes"][key]` (e.g. why it returns None).
        params: the module's parameters; `rounds` (default 5) and `warmup_rounds` (default 1)
            are read here.
        where: the placement, `"unpinned"` or `"pinned"`.

    Returns:
        `{"placement", "cpus", "seconds", "rounds": {key: [{"value", "extras"} | None, ...]},
        "notes": {key: text}}`, JSON-ready.
    """
    specs = figures_of(module)
    rounds, warmup = int(params.get("rounds", 5)), int(params.get("warmup_rounds", 1))
    values: dict[str, list[Any]] = {spec.key: [] for spec in specs}
    setup = getattr(module, "setup", None)
    started = time.perf_counter()
    with placement(where) as cpus:
        context: AbstractContextManager[dict[str, Any]] = (
            setup(params) if setup is not None else nullcontext({}))
        with context as env:
            env.setdefault("notes", {})
            for _ in range(warmup):
                for spec in specs:
                    spec.fn(env, params)
            for _ in range(rounds):
                for spec in specs:
                    measured = _as_measured(spec.fn(env, params))
                    values[spec.key].append(
                        None if measured is None else msgspec.to_builtins(measured))
            notes = dict(env["notes"])
    return {"placement": where, "cpus": cpus, "seconds": time.perf_counter() - started,
            "rounds": values, "notes": notes}


def _spread(values: Sequence[float | None]) -> tuple[float | None, float | None, float | None]:
    present = [v for v in values if v is not None]
    if not present:
        return None, None, None
    return min(present), statistics.median(present), max(present)


def _series(result: dict[str, Any], key: str, extra: str | None) -> list[float | None]:
    out: list[float | None] = []
    for item in result["rounds"].get(key, []):
        if item is None:
            out.append(None)
        else:
            out.append(item["value"] if extra is None else item["extras"].get(extra))
    return out


def _ratio_series(result: dict[str, Any], ratio: Ratio, extra: str | None,
                  ) -> list[float | None]:
    subject = _series(result, ratio.subject, extra)
    peer = _series(result, ratio.peer, extra)
    return [None if a is None or b is None or b == 0 else a / b
            for a, b in zip(subject, peer, strict=False)]


def _row(key: str, label: str, unit: str, by_place: dict[str, list[float | None]],
         target: Target | None, note: str) -> Figure:
    unpinned = _spread(by_place.get("unpinned", []))
    pinned = _spread(by_place.get("pinned", []))
    medians = [m for m in (unpinned[1], pinned[1]) if m is not None]
    met = None
    if target is not None and medians:
        met = all(target.met(m) for m in medians)
    rounds = max((len(series) for series in by_place.values()), default=0)
    return Figure(key=key, label=label, unit=unit, value=unpinned[1], low=unpinned[0],
                  high=unpinned[2], pinned=pinned[1], pinned_low=pinned[0],
                  pinned_high=pinned[2], rounds=rounds,
                  target="" if target is None else str(target), met=met, note=note)


def _pretty(extra: str) -> str:
    # "p99_us" -> "p99", "turns_per_s" -> "turns/s"
    if extra.endswith("_us"):
        return extra[:-3]
    if extra.endswith("_per_s"):
        return extra[:-6] + "/s"
    return extra


def _extras_of(results: dict[str, dict[str, Any]], key: str) -> list[str]:
    names: list[str] = []
    for result in results.values():
        for item in result["rounds"].get(key, []):
            for name in (item or {}).get("extras", {}):
                if name not in names:
                    names.append(name)
    return names


def summarize_comparison(module: ModuleType, results: dict[str, dict[str, Any]],
                         ) -> list[Figure]:
    """The table rows of a comparison: per figure (and per extra), then per ratio.

    Args:
        module: the comparison module.
        results: `{placement: run_comparison(...) result}` (either placement may be missing).

    Returns:
        `Figure`s whose `value/low/high` are the unpinned median/min/max over the rounds and
        `pinned/pinned_low/pinned_high` the pinned ones; `met` is True when every placement's
        median meets the target.
    """
    notes: dict[str, str] = {}
    for result in results.values():
        notes.update(result.get("notes", {}))
    rows: list[Figure] = []
    specs = {spec.key: spec for spec in figures_of(module)}
    for spec in specs.values():
        by_place = {where: _series(result, spec.key, None) for where, result in results.items()}
        rows.append(_row(spec.key, spec.label, spec.unit, by_place,
                         spec.target if spec.peer is None else None,
                         notes.get(spec.key, spec.note)))
        for extra in _extras_of(results, spec.key):
            by_place = {where: _series(result, spec.key, extra)
                        for where, result in results.items()}
            unit = "us" if extra.endswith("_us") else "/s" if extra.endswith("_per_s") else ""
            rows.append(_row(f"{spec.key}_{extra}", f"{spec.label}: {_pretty(extra)}", unit,
                             by_place, None, ""))
    for ratio in ratios_of(module):
        subject, peer = specs[ratio.subject], specs[ratio.peer]
        label = ratio.label or f"{subject.key} / {peer.key}"
        by_place = {where: _ratio_series(result, ratio, None)
                    for where, result in results.items()}
        rows.append(_row(ratio.key, label, "x", by_place, ratio.target, ""))
        shared = [name for name in _extras_of(results, ratio.subject)
                  if name in _extras_of(results, ratio.peer)]
        for extra in shared:
            by_place = {where: _ratio_series(result, ratio, extra)
                        for where, result in results.items()}
            rows.append(_row(f"{ratio.key}_{extra}", f"{label}: {_pretty(extra)}", "x",
                             by_place, None, ""))
    return rows
