"""Warm CLI processes started before a turn needs them: pre-warm, replacement, spares.

The machinery is shared by the warm Claude backend (`claude_fleet`: a `claude` process that
answered its `initialize` control request) and the Codex app-server (`codex_app`: a `codex
app-server` that answered `initialize` and started or resumed its thread); a backend gives
a `Prewarmer` subclass (how to start one process) and slot classes built on `PrewarmSlot` and
`SpareSlot`.

- **Pre-warm** (`prewarm=True`): the agent's process starts in a background thread when the
  agent has started (after `pre_run`, so `start_agent` and a supervisor restart take no
  longer), and again after `reset_session`. A turn that arrives while it starts waits for
  it (the slot's `acquire`); a start that failed leaves no process, so the first turn starts
  one itself and reports the failure exactly as without pre-warm (a `DispatchError`).
- **Replacement**: a pre-warmed session's process that ends between turns (not closed by
  us, the idle timeout or the live-process cap) is replaced at once, resuming the session,
  at most `REPLACE_MAX` times within `REPLACE_WINDOW_S` (the supervisor's default restart
  intensity); past that the next turn starts one, as without pre-warm. The agent gets the
  `WarmExited` record first.
- **Spares** (`WarmFleet`): started, idle processes shared by agents (a `Pool`'s, a host's),
  keyed by the whole spawn-time configuration (`spawn_key`: argv, cwd, the complete
  environment, the line, tail, grace and idle bounds, and what the backend adds: Claude's
  Python tools, the app-server's thread parameters). A pre-warm of a new session (no id to
  resume) takes a spare of an identical key, and the fleet starts its replacement in the
  background. Spares are ordinary warm processes: they count against the live-process cap,
  get the idle timeout, and run under the launcher (a host SIGKILL leaves none).

- **Warm-up** (`Prewarmer.warm`): a backend may do more with a process started ahead of a
  new session's first turn (a pre-warm with no id to resume, a spare) before it is installed
  or offered; a turn that arrives meanwhile waits for it, as it waits for the start (Claude's
  `prewarm_context`: `claude_fleet.warm_up`).

Never two live CLIs on one session: a pre-warm starts only while no turn owns the slot and
installs its process only while the slot has none and is not stopping; `stop`/`close` wait
for a start in flight first.

Mirrors: no Elixir original (GenAgent runs one CLI per turn).
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, ClassVar, Final

import msgspec
from loguru import logger

from gen_agent._timers import TIMERS
from gen_agent.backend import BackendError
from gen_agent.backends.warm import LinesT, ProcessT, Slot

__all__ = ["REPLACE_MAX", "REPLACE_WINDOW_S", "PrewarmSlot", "Prewarmer", "SpareSlot",
           "WarmFleet", "spawn_key", "wait_ready"]

REPLACE_MAX: Final = 3
"""Replacements of a dead process allowed within `REPLACE_WINDOW_S` (count)."""

REPLACE_WINDOW_S: Final = 5.0
"""The window of `REPLACE_MAX` (seconds)."""

_HEAD_START_S: Final = 0.002
"""How long a pre-warm waits before its thread starts (seconds): `start_agent` has just
answered its caller, and the thread's start and the spawn's Python work would hold the GIL
while that caller resumes (measured: +0.6 ms on `start_agent`)."""

START_WAIT_S: Final = 60.0  # the bound on waiting for a start in flight (spawn is bounded)


class Prewarmer:
    """How one session starts its process without a turn. Held by its `PrewarmSlot`
    (`slot.prewarm`); a backend subclasses it (`claude_fleet.ClaudePrewarmer`,
    `codex_app.AppPrewarmer`) with the hooks `new_process`, `spare_slot`, `key` and
    `resume_of` (and `adopt`, to hand more of a spare over).

    Args:
        info: the agent's `handle_info` sink.
        idle_timeout_ms: the processes' idle timeout (ms), or None.
        tail_bytes: the bound of a turn's kept diagnostics (bytes).
        fleet: a `WarmFleet` to take a spare from (new sessions only), or None.
    """

    provider: ClassVar[str] = "cli"

    def __init__(self, info: Any, *, idle_timeout_ms: int | None, tail_bytes: int,
                 fleet: WarmFleet | None = None) -> None:
        self.info = info
        self.idle_timeout_ms = idle_timeout_ms
        self.tail_bytes = tail_bytes
        self.fleet = fleet
        self.closed = False  # set under the slot's lock by stop/close: start nothing more
        self._replaced: collections.deque[float] = collections.deque()

    # -- the backend's hooks (background threads) ------------------------------------------
    def new_process(self, slot: Any, session_id: str | None, info: Any) -> Any:
        """Start a process for `slot` resuming `session_id` (None: a new session), telling
        `info` (None: nobody) what it prints between turns; return it once it is ready.

        Raises:
            BackendError: it could not start (no process is left)."""
        raise NotImplementedError

    def spare_slot(self) -> SpareSlot[Any, Any]:
        """A new placeholder slot for a spare."""
        raise NotImplementedError

    def key(self) -> bytes:
        """The whole spawn-time configuration of a new session (`spawn_key`)."""
        raise NotImplementedError

    def resume_of(self, dead: Any) -> str | None:
        """The session a replacement of `dead` resumes (None: a new one)."""
        raise NotImplementedError

    def warm(self, process: Any) -> None:
        """Do more with `process`, started ahead of a new session's first turn (a pre-warm
        without an id to resume, a spare), before it is installed or offered; by default
        nothing. Must not raise for a CLI that is gone (the process is used as it is)."""

    def adopt(self, process: Any, slot: Any) -> None:
        """Make spare `process` the session's: its slot, `handle_info` sink, launcher owner."""
        process.slot = slot
        process.info = self.info
        process.live.child.owner = slot

    # -- the machinery ---------------------------------------------------------------------
    def start(self, slot: PrewarmSlot[Any, Any], session_id: str | None) -> bool:
        """Start the slot's process in the background (any thread; never blocks). False when
        the slot is stopping, a turn owns it, or a start is in flight already."""
        with slot._cond:
            if self.closed or slot.starting is not None or slot._turn is not None:
                return False
            done = slot.starting = threading.Event()
        thread = threading.Thread(target=self._run, args=(slot, session_id, done),
                                  daemon=True, name="gen_agent-prewarm")
        TIMERS.schedule(_HEAD_START_S, thread.start)  # a turn that comes first waits (`done`)
        return True

    def replace(self, slot: PrewarmSlot[Any, Any], dead: Any) -> None:
        """`dead` ended between turns by itself: start its replacement, resuming the latest
        session it ran, within the restart intensity (reader thread)."""
        now = time.monotonic()
        while self._replaced and now - self._replaced[0] > REPLACE_WINDOW_S:
            self._replaced.popleft()
        if len(self._replaced) >= REPLACE_MAX:
            logger.warning("gen_agent {}: the warm process ended {} times within {} s; "
                           "the next turn starts one", self.provider, REPLACE_MAX + 1,
                           REPLACE_WINDOW_S)
            return
        self._replaced.append(now)
        self.start(slot, self.resume_of(dead))

    def _run(self, slot: PrewarmSlot[Any, Any], session_id: str | None,
             done: threading.Event) -> None:
        process: Any = None
        try:
            if session_id is None and self.fleet is not None:
                process = self.fleet.take(self, slot)
            if process is None:
                process = self.new_process(slot, session_id, self.info)
                if session_id is None:
                    self.warm(process)
        except BackendError as exc:
            # The first turn starts its own process and reports the same failure then.
            logger.debug("gen_agent {}: pre-warm failed ({})", self.provider, exc.kind)
        except Exception as exc:  # noqa: BLE001 - a pre-warm never takes the agent down
            logger.error("gen_agent {}: pre-warm crashed: {}", self.provider,
                         type(exc).__name__)
        finally:
            installed = process is not None and _install(slot, self, process)
            if process is not None and not installed:
                process.live.kill()
                process.live.wait_exited(5.0)
            with slot._cond:
                slot.starting = None
                slot._cond.notify_all()
            done.set()


def _install(slot: PrewarmSlot[Any, Any], prewarm: Prewarmer, process: Any) -> bool:
    """Make `process` the slot's idle live process, unless the slot is stopping, owned by a
    turn, or has one (never two live CLIs on one session)."""
    with slot._cond:
        if (prewarm.closed or slot.prewarm is not prewarm or not process.live.alive
                or slot._turn is not None):
            return False
        current = slot.process
        if current is not None and current.live.alive:
            return False
        slot.process = process
    process.live.mark_busy(False)  # idle from now: the idle timeout applies
    return True


def wait_ready(slot: Slot[Any, Any], timeout: float) -> bool:
    """Wait up to `timeout` seconds until the slot has an idle live process that is ready
    (its `ready` event: the CLI answered its start requests). True when it has."""
    deadline = time.monotonic() + timeout
    with slot._cond:
        while True:
            process = slot.process
            if (process is not None and process.live.alive
                    and getattr(slot, "starting", None) is None):
                break
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            slot._cond.wait(min(left, 0.05))
    return bool(process.ready.wait(max(0.0, deadline - time.monotonic())))


class PrewarmSlot(Slot[ProcessT, LinesT]):
    """A `Slot` that can be pre-warmed: with `prewarm` (a `Prewarmer`, or None) it replaces
    a process that died between turns and ends a start in flight when it stops. `starting`
    is the event of a start in flight (None: none); a turn's `acquire` waits for it."""

    def __init__(self) -> None:
        super().__init__()
        self.prewarm: Prewarmer | None = None
        self.starting: threading.Event | None = None

    def _process_gone(self, process: ProcessT) -> None:
        super()._process_gone(process)
        prewarm = self.prewarm
        if prewarm is not None and process.turn is None and not process.live.close_requested:
            prewarm.replace(self, process)  # died between turns: replaced at once

    def end_starts(self, wait_s: float | None) -> None:
        """No pre-warm starts a process from now on; wait (bounded, seconds) until a start
        in flight has ended."""
        with self._cond:
            prewarm, starting = self.prewarm, self.starting
            if prewarm is not None:
                prewarm.closed = True
        if starting is not None:
            starting.wait(START_WAIT_S if wait_s is None else wait_s)

    def stop(self, *, grace_s: float, wait_s: float) -> None:
        """As `Slot.stop`, after ending pre-warm."""
        self.end_starts(wait_s)
        super().stop(grace_s=grace_s, wait_s=wait_s)

    def close(self, *, kill: bool = False, wait_s: float | None = None) -> None:
        """As `Slot.close`, after ending pre-warm."""
        self.end_starts(wait_s)
        super().close(kill=kill, wait_s=wait_s)


class SpareSlot(Slot[ProcessT, LinesT]):
    """The placeholder slot of a spare until a session takes it (mixed into the backend's
    slot class); tells its `fleet` when the spare ended."""

    fleet: WarmFleet | None = None

    def _process_gone(self, process: ProcessT) -> None:
        super()._process_gone(process)
        if self.fleet is not None:
            self.fleet._forget(process)


class WarmFleet:
    """A reserve of started, idle CLI processes for new sessions (warm `claude`, `codex
    app-server`), shared by the agents given it as their `fleet` option (a `Pool`'s, an
    `AgentHost`'s). Thread-safe.

    A pre-warming agent with no session to resume takes a spare whose spawn-time
    configuration is identical to its own, compared as a whole (see the module docstring),
    and the fleet starts a replacement in the background, keeping up to `spares` idle
    processes per configuration. The first agent of a configuration starts its own process
    (and the fleet's spares). Spares count against `set_max_live_processes`, are closed by
    their `idle_timeout_ms` (not replaced then), and run under the launcher like every CLI.

    Args:
        spares: idle processes kept per configuration (an int >= 1).
        max_configs: configurations kept at once (an int >= 1; the least recently used
            one's spares are closed when another one comes).

    Members:
        started: spares started so far (count); used: spares taken by sessions (count).
        idle(): the live spares (count). wait_spares(n, timeout): wait until `n` spares are
        live. close(wait_s): end every spare, start no more (idempotent).

    Raises:
        ValueError: `spares` or `max_configs` is not an int >= 1.
    """

    def __init__(self, spares: int = 1, *, max_configs: int = 4) -> None:
        for name, value in (("spares", spares), ("max_configs", max_configs)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.spares = spares
        self.max_configs = max_configs
        self.started = 0
        self.used = 0
        self._cond = threading.Condition(threading.Lock())
        self._idle: collections.OrderedDict[bytes, list[Any]] = collections.OrderedDict()
        self._filling: dict[bytes, int] = {}
        self._closed = False

    def __repr__(self) -> str:
        return f"WarmFleet(spares={self.spares}, idle={self.idle()})"

    def idle(self) -> int:
        """The live spares (count)."""
        with self._cond:
            return sum(1 for group in self._idle.values() for p in group if p.live.alive)

    def wait_spares(self, count: int, timeout: float) -> bool:
        """Wait up to `timeout` seconds until `count` spares are live and ready. True when
        they are."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                ready = [p for group in self._idle.values() for p in group
                         if p.live.alive and p.ready.is_set()]
                if len(ready) >= count:
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))

    def take(self, prewarm: Prewarmer, slot: Any) -> Any:
        """A spare for a new session of `prewarm`'s configuration, handed to `slot` (or None:
        none is idle); tops the configuration's spares up in the background."""
        key = prewarm.key()
        process = None
        with self._cond:
            if self._closed:
                return None
            group = self._idle.get(key)
            while group:
                candidate = group.pop(0)
                if candidate.live.alive:
                    process = candidate
                    self.used += 1
                    break
            if key in self._idle:
                self._idle.move_to_end(key)
            self._cond.notify_all()
        if process is not None:
            prewarm.adopt(process, slot)  # now the session's
        self._fill(key, prewarm)
        return process

    def close(self, wait_s: float = 5.0) -> None:
        """End every spare (stdin EOF, SIGKILL past its exit grace) and start no more; wait
        up to `wait_s` seconds until they were reaped. Idempotent."""
        with self._cond:
            self._closed = True
            spares = [p for group in self._idle.values() for p in group]
            self._idle.clear()
            filling = bool(self._filling)
        for process in spares:
            process.live.close()
        deadline = time.monotonic() + wait_s
        if filling:
            with self._cond:
                while self._filling and (left := deadline - time.monotonic()) > 0:
                    self._cond.wait(left)
        for process in spares:
            process.live.wait_exited(max(0.0, deadline - time.monotonic()))

    def _fill(self, key: bytes, prewarm: Prewarmer) -> None:
        with self._cond:
            if self._closed:
                return
            have = len(self._idle.get(key, ())) + self._filling.get(key, 0)
            missing = self.spares - have
            if missing <= 0:
                return
            self._filling[key] = self._filling.get(key, 0) + missing
            evicted = self._evict_locked(key)
        for process in evicted:
            process.live.close()
        for _ in range(missing):
            threading.Thread(target=self._start_spare, args=(key, prewarm), daemon=True,
                             name="gen_agent-spare").start()

    def _evict_locked(self, key: bytes) -> list[Any]:
        self._idle.setdefault(key, [])
        self._idle.move_to_end(key)
        evicted: list[Any] = []
        while len(self._idle) > self.max_configs:
            _, group = self._idle.popitem(last=False)
            evicted += group
        return evicted

    def _start_spare(self, key: bytes, prewarm: Prewarmer) -> None:
        process = None
        try:
            holder = prewarm.spare_slot()
            holder.fleet = self
            process = prewarm.new_process(holder, None, None)
            holder.process = process
            process.live.mark_busy(False)
            prewarm.warm(process)
        except BackendError as exc:
            logger.debug("gen_agent {}: a spare failed to start ({})", prewarm.provider,
                         exc.kind)
        except Exception as exc:  # noqa: BLE001 - a spare never takes anything down
            logger.error("gen_agent {}: a spare crashed at start: {}", prewarm.provider,
                         type(exc).__name__)
        with self._cond:
            keep = process is not None and not self._closed and key in self._idle
            if keep:
                self._idle[key].append(process)
                self.started += 1
                self._filled_locked(key)
        if keep:
            return
        if process is not None:  # ended before `close` stops waiting for the fill
            process.live.close()
            process.live.wait_exited(5.0)
        with self._cond:
            self._filled_locked(key)

    def _filled_locked(self, key: bytes) -> None:
        self._filling[key] -= 1
        if not self._filling[key]:
            del self._filling[key]
        self._cond.notify_all()

    def _forget(self, process: Any) -> None:
        with self._cond:
            for group in self._idle.values():
                if process in group:
                    group.remove(process)
            self._cond.notify_all()


def spawn_key(spec: dict[str, Any], prewarm: Prewarmer, **extra: Any) -> bytes:
    """The whole spawn-time configuration of a new session, as one comparable value:
    `spec` (the `ChildProcess.spawn` keyword arguments), the prewarmer's bounds, and what
    the backend adds (`extra`, JSON-encodable)."""
    env = spec.get("env") or {}
    whole = {
        "argv": list(spec["argv"]), "cwd": spec.get("cwd"),
        "env": sorted(env.items()),
        "bounds": [spec.get(k) for k in ("max_line_bytes", "stderr_tail_bytes",
                                         "exit_grace_ms", "term_grace_ms")],
        "idle_timeout_ms": prewarm.idle_timeout_ms, "tail_bytes": prewarm.tail_bytes,
        **extra,
    }
    return msgspec.json.encode(whole)
