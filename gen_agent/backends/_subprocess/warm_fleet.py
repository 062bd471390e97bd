"""Warm Claude processes started before a turn needs them: pre-warm, replacement, spares.

- **Pre-warm** (`prewarm=True`): the agent's `claude` process starts in a background thread
  when the agent has started (after `pre_run`, so `start_agent` and a supervisor restart take
  no longer), and again after `reset_session`. A turn that arrives while it starts waits for
  it (`WarmSlot.acquire`); a start that failed leaves no process, so the first turn starts
  one itself and reports the failure exactly as without pre-warm (a `DispatchError`).
- **Replacement**: a pre-warmed session's process that ends between turns (not closed by
  us, the idle timeout or the live-process cap) is replaced at once, resuming the session,
  at most `REPLACE_MAX` times within `REPLACE_WINDOW_S` (the supervisor's default restart
  intensity); past that the next turn starts one, as without pre-warm. The agent gets the
  `WarmExited` record first.
- **Spares** (`WarmFleet`): started, idle processes shared by agents (a `Pool`'s, a host's),
  keyed by the whole spawn-time configuration (argv, which holds the system prompt, MCP
  config, allowed tools, schema and permission flags; cwd; the complete environment; the
  Python tools' listing; the line, tail, grace and idle bounds). A pre-warm of a new session
  (no id to resume) takes a spare of an identical key, and the fleet starts its replacement
  in the background. Spares are ordinary warm processes: they count against the live-process
  cap, get the idle timeout, and run under the launcher (a host SIGKILL leaves none).

- **Context warm-up** (`prewarm_context=True`): a process started ahead of a new session's
  first turn (a pre-warm with no id to resume, a spare) is asked `get_context_usage` once it
  answered `initialize`, before it is installed or offered (`warm_up`). That makes the CLI
  build and cache its tool schemas (measured on 2.1.197 with `CLAUDE_CODE_PROFILE_QUERY=1`:
  the first turn's "Tool schemas" phase, its largest one-time cost, drops to the ~1 ms of
  a later turn; its model request, tools and system prompt byte-identical, nothing in the
  transcript); the CLI sends `count_tokens` requests for it. A turn that arrives meanwhile
  waits for it (bounded by `WARM_UP_S`), as it waits for the start.

Never two live CLIs on one session: a pre-warm installs its process only while the slot has
none and is not stopping; `stop`/`close` wait for a start in flight first.

Mirrors: no Elixir original (GenAgent runs one CLI per turn).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Any, Final

import msgspec
from loguru import logger

from gen_agent.backend import BackendError
from gen_agent.backends._subprocess.claude_mcp import McpServer
from gen_agent.backends._subprocess.claude_warm import WarmSlot, _ClaudeProcess
from gen_agent.backends._subprocess.process import ChildProcess

__all__ = ["REPLACE_MAX", "REPLACE_WINDOW_S", "WARM_UP_S", "FleetSlot", "Prewarmer", "WarmFleet",
           "wait_ready", "warm_up"]

REPLACE_MAX: Final = 3
"""Replacements of a dead process allowed within `REPLACE_WINDOW_S` (count)."""

REPLACE_WINDOW_S: Final = 5.0
"""The window of `REPLACE_MAX` (seconds)."""

WARM_UP_S: Final = 15.0
"""The bound on each wait of `warm_up` (`initialize`, then `get_context_usage`; seconds)."""

_START_WAIT_S: Final = 60.0  # the bound on waiting for a start in flight (spawn is bounded)


class Prewarmer:
    """How one session starts its process without a turn. Held by its `WarmSlot`
    (`slot.prewarm`); built by `ClaudeCLI.prewarm_session`.

    Args:
        spec: `spec(session_id)` -> the `ChildProcess.spawn` keyword arguments of a process
            resuming `session_id` (None: a new conversation), `owner` excluded.
        mcp: `mcp()` -> a new `McpServer` for the agent's Python tools, or None.
        info: the agent's `handle_info` sink.
        idle_timeout_ms, tail_bytes, json_schema: as `WarmSlot.acquire` takes them.
        fleet: a `WarmFleet` to take a spare from (new sessions only), or None.
        permission_prompt: whether `spec` passes `--permission-prompt-tool stdio`.
        context: run `warm_up` on a process started for a new session (the
            `prewarm_context` option).
    """

    def __init__(self, spec: Callable[[str | None], dict[str, Any]],
                 mcp: Callable[[], McpServer | None], info: Callable[[Any], None] | None, *,
                 idle_timeout_ms: int | None, tail_bytes: int, json_schema: str | None,
                 fleet: WarmFleet | None = None, permission_prompt: bool = False,
                 context: bool = False) -> None:
        self.spec = spec
        self.mcp = mcp
        self.info = info
        self.idle_timeout_ms = idle_timeout_ms
        self.tail_bytes = tail_bytes
        self.json_schema = json_schema
        self.fleet = fleet
        self.permission_prompt = permission_prompt  # (in `spec`'s argv; kept for a reset)
        self.context = context
        self.closed = False  # set under the slot's lock by stop/close: start nothing more
        self._replaced: collections.deque[float] = collections.deque()

    def start(self, slot: FleetSlot, session_id: str | None) -> bool:
        """Start the slot's process in the background (any thread; never blocks). False when
        the slot is stopping or a start is in flight already."""
        with slot._cond:
            if self.closed or slot.starting is not None:
                return False
            done = slot.starting = threading.Event()
        threading.Thread(target=self._run, args=(slot, session_id, done), daemon=True,
                         name="gen_agent-prewarm").start()
        return True

    def replace(self, slot: FleetSlot, dead: _ClaudeProcess) -> None:
        """`dead` ended between turns by itself: start its replacement, resuming the latest
        session it ran, within the restart intensity (reader thread)."""
        now = time.monotonic()
        while self._replaced and now - self._replaced[0] > REPLACE_WINDOW_S:
            self._replaced.popleft()
        if len(self._replaced) >= REPLACE_MAX:
            logger.warning("gen_agent claude: the warm process ended {} times within {} s; "
                           "the next turn starts one", REPLACE_MAX + 1, REPLACE_WINDOW_S)
            return
        self._replaced.append(now)
        session_id = dead.live.child.session_id or dead.session_id or dead.resumed
        self.start(slot, session_id)

    def _run(self, slot: FleetSlot, session_id: str | None, done: threading.Event) -> None:
        process: _ClaudeProcess | None = None
        try:
            if session_id is None and self.fleet is not None:
                process = self.fleet.take(self, slot)
            if process is None:
                mcp = self.mcp()
                child = ChildProcess.spawn(**self.spec(session_id), owner=slot)
                process = _ClaudeProcess(slot, child, self.idle_timeout_ms, self.info, mcp,
                                         self.json_schema, resumed=session_id,
                                         tail_bytes=self.tail_bytes)
                with slot._cond:
                    slot.processes_started += 1
                if self.context and session_id is None:
                    warm_up(process)
        except BackendError as exc:
            # The first turn starts its own process and reports the same failure then.
            logger.debug("gen_agent claude: pre-warm failed ({})", exc.kind)
        except Exception as exc:  # noqa: BLE001 - a pre-warm never takes the agent down
            logger.error("gen_agent claude: pre-warm crashed: {}", type(exc).__name__)
        finally:
            installed = process is not None and _install(slot, self, process)
            if process is not None and not installed:
                process.live.kill()
                process.live.wait_exited(5.0)
            with slot._cond:
                slot.starting = None
                slot._cond.notify_all()
            done.set()


def _install(slot: FleetSlot, prewarm: Prewarmer, process: _ClaudeProcess) -> bool:
    """Make `process` the slot's idle live process, unless the slot is stopping or has one
    (never two live CLIs on one session)."""
    with slot._cond:
        if prewarm.closed or slot.prewarm is not prewarm or not process.live.alive:
            return False
        current = slot.process
        if current is not None and current.live.alive:
            return False
        slot.process = process
    process.live.mark_busy(False)  # idle from now: the idle timeout applies
    return True


def warm_up(process: _ClaudeProcess, wait_s: float = WARM_UP_S) -> bool:
    """Once `process` answered `initialize` (waited for up to `wait_s` seconds), send it the
    `get_context_usage` control request and wait up to `wait_s` seconds for the answer,
    which is dropped. True when it answered; False on a timeout or when the CLI is gone (the
    process is used as it is then). Any thread but the process's reader."""
    if not process.ready.wait(wait_s):
        return False
    try:
        answer = process.send_control({"subtype": "get_context_usage"}, wait_s=wait_s)
    except OSError:
        return False
    return answer is not None


def wait_ready(slot: WarmSlot, timeout: float) -> bool:
    """Wait up to `timeout` seconds until the slot has an idle live process that answered
    its `initialize` control request (the CLI is loaded). True when it has."""
    deadline = time.monotonic() + timeout
    with slot._cond:
        while True:
            process = slot.process
            if process is not None and process.live.alive and slot.starting is None:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            slot._cond.wait(min(left, 0.05))
    return process.ready.wait(max(0.0, deadline - time.monotonic()))


class FleetSlot(WarmSlot):
    """The `WarmSlot` of a `ClaudeSession`: with `prewarm` (a `Prewarmer`, or None) it
    replaces a process that died between turns and ends a start in flight when it stops."""

    def __init__(self) -> None:
        super().__init__()
        self.prewarm: Prewarmer | None = None

    def _process_gone(self, process: _ClaudeProcess) -> None:
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
            starting.wait(_START_WAIT_S if wait_s is None else wait_s)

    def stop(self, *, grace_s: float, wait_s: float) -> None:
        """As `Slot.stop`, after ending pre-warm."""
        self.end_starts(wait_s)
        super().stop(grace_s=grace_s, wait_s=wait_s)

    def close(self, *, kill: bool = False, wait_s: float | None = None) -> None:
        """As `Slot.close`, after ending pre-warm."""
        self.end_starts(wait_s)
        super().close(kill=kill, wait_s=wait_s)


class _SpareSlot(WarmSlot):
    """The placeholder slot of a spare until a session takes it."""

    def __init__(self, fleet: WarmFleet) -> None:
        super().__init__()
        self.fleet = fleet

    def _process_gone(self, process: _ClaudeProcess) -> None:
        super()._process_gone(process)
        self.fleet._forget(process)


class WarmFleet:
    """A reserve of started, idle `claude` processes for new sessions, shared by the agents
    given it as their `fleet` option (a `Pool`'s, an `AgentHost`'s). Thread-safe.

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
        self._idle: collections.OrderedDict[bytes, list[_ClaudeProcess]] = (
            collections.OrderedDict())
        self._filling: dict[bytes, int] = {}
        self._closed = False

    def __repr__(self) -> str:
        return f"WarmFleet(spares={self.spares}, idle={self.idle()})"

    def idle(self) -> int:
        """The live spares (count)."""
        with self._cond:
            return sum(1 for group in self._idle.values() for p in group if p.live.alive)

    def wait_spares(self, count: int, timeout: float) -> bool:
        """Wait up to `timeout` seconds until `count` spares are live and have answered
        `initialize`. True when they are."""
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

    def take(self, prewarm: Prewarmer, slot: FleetSlot) -> _ClaudeProcess | None:
        """A spare for a new session of `prewarm`'s configuration, handed to `slot` (or None:
        none is idle); tops the configuration's spares up in the background."""
        spec = prewarm.spec(None)
        mcp = prewarm.mcp()
        key = _key(spec, mcp, prewarm)
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
            # Now the session's: its slot, handle_info sink, tools, and launcher owner.
            process.slot = slot
            process.info = prewarm.info
            process.mcp = mcp
            process.live.child.owner = slot
        self._fill(key, spec, prewarm)
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

    def _fill(self, key: bytes, spec: dict[str, Any], prewarm: Prewarmer) -> None:
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
            threading.Thread(target=self._start_spare, args=(key, spec, prewarm), daemon=True,
                             name="gen_agent-spare").start()

    def _evict_locked(self, key: bytes) -> list[_ClaudeProcess]:
        self._idle.setdefault(key, [])
        self._idle.move_to_end(key)
        evicted: list[_ClaudeProcess] = []
        while len(self._idle) > self.max_configs:
            _, group = self._idle.popitem(last=False)
            evicted += group
        return evicted

    def _start_spare(self, key: bytes, spec: dict[str, Any], prewarm: Prewarmer) -> None:
        process = None
        try:
            holder = _SpareSlot(self)
            child = ChildProcess.spawn(**spec, owner=holder)
            process = _ClaudeProcess(holder, child, prewarm.idle_timeout_ms, None,
                                     prewarm.mcp(), prewarm.json_schema,
                                     tail_bytes=prewarm.tail_bytes)
            holder.process = process
            process.live.mark_busy(False)
            if prewarm.context:
                warm_up(process)
        except BackendError as exc:
            logger.debug("gen_agent claude: a spare failed to start ({})", exc.kind)
        except Exception as exc:  # noqa: BLE001 - a spare never takes anything down
            logger.error("gen_agent claude: a spare crashed at start: {}", type(exc).__name__)
        with self._cond:
            keep = process is not None and not self._closed and key in self._idle
            if keep:
                assert process is not None
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

    def _forget(self, process: _ClaudeProcess) -> None:
        with self._cond:
            for group in self._idle.values():
                if process in group:
                    group.remove(process)
            self._cond.notify_all()


def _key(spec: dict[str, Any], mcp: McpServer | None, prewarm: Prewarmer) -> bytes:
    """The whole spawn-time configuration of a new session, as one comparable value."""
    env = spec.get("env") or {}
    whole = {
        "argv": list(spec["argv"]), "cwd": spec.get("cwd"),
        "env": sorted(env.items()),
        "bounds": [spec.get(k) for k in ("max_line_bytes", "stderr_tail_bytes",
                                         "exit_grace_ms", "term_grace_ms")],
        "idle_timeout_ms": prewarm.idle_timeout_ms, "tail_bytes": prewarm.tail_bytes,
        "tools": None if mcp is None else mcp._listing,
        "context": prewarm.context,
    }
    return msgspec.json.encode(whole)
