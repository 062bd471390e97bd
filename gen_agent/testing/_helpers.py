"""Helpers for actor-based tests: wait for an agent state instead of sleeping, build mock
scripts, and find threads or child processes a test left behind.

The waits are event-driven: they attach a telemetry handler for the agent, wake on each of its
events and then read `status` / `runtime_snapshot` to decide; a bounded re-check every
`RECHECK_S` seconds covers changes that emit no telemetry (e.g. a `handle_info` updating the
agent state). Every wait has a timeout. The pytest fixtures built on these live in
`gen_agent.testing.pytest_plugin`; see `docs/pages/testing.md`.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final

import msgspec

from gen_agent import telemetry
from gen_agent._agent import GenAgent, NoReply
from gen_agent._event import Event
from gen_agent._status import RuntimeSnapshot, Status
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend

__all__ = [
    "RECHECK_S",
    "LeakReport",
    "MockScripts",
    "ScriptedAgent",
    "child_processes",
    "find_leaks",
    "is_quiescent",
    "wait_for_state",
    "wait_until_idle",
]

RECHECK_S: Final = 0.1
"""Seconds between re-checks while no telemetry arrives (a safety net, not the trigger)."""

_PROC: Final = Path("/proc")
_TURN_THREAD: Final = "gen_agent-turn"


# ---------------------------------------------------------------------------- waiting
def _name_of(agent: Any) -> Any:
    return agent.name if hasattr(agent, "_handle") else agent


def _status(agent: Any) -> Status:
    if hasattr(agent, "_handle"):
        return agent.status()
    from gen_agent._client import status

    return status(agent)


def _snapshot(agent: Any) -> RuntimeSnapshot:
    if hasattr(agent, "_handle"):
        return agent.runtime_snapshot()
    from gen_agent._client import runtime_snapshot

    return runtime_snapshot(agent)


def _wait(agent: Any, check: Callable[[], Any], timeout: float, what: str) -> Any:
    """Call `check()` until it returns non-None, waking on the agent's telemetry."""
    name = _name_of(agent)
    cond = threading.Condition()
    seq = [0]

    def wake(_event: Any, _measurements: Any, metadata: dict[str, Any], _config: Any) -> None:
        # Runs in the agent's threads: only wake the waiter (calling the agent would deadlock).
        if metadata.get("agent") == name:
            with cond:
                seq[0] += 1
                cond.notify_all()

    handler_id = ("gen_agent.testing.wait", uuid.uuid4().hex)
    telemetry.attach_many(handler_id, telemetry.EVENTS, wake)
    deadline = time.monotonic() + timeout
    try:
        while True:
            with cond:
                seen = seq[0]
            result = check()
            if result is not None:
                return result
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"agent did not reach {what} within {timeout} s")
            with cond:
                if seq[0] == seen:
                    cond.wait(min(remaining, RECHECK_S))
    finally:
        telemetry.detach(handler_id)


def wait_for_state(agent: Any, predicate: Callable[[Status], bool],
                   timeout: float = 5.0) -> Status:
    """Wait until `predicate(status)` holds for the agent, and return that `Status`.

    Args:
        agent: an agent name (in the current `AgentSystem`) or an `AgentRef`.
        predicate: a function of `gen_agent.Status` (e.g. `lambda s: s.halted`).
        timeout: seconds to wait at most.

    Returns:
        The first `Status` that satisfied `predicate`.

    Raises:
        TimeoutError: it did not hold within `timeout` seconds.
        gen_agent.AgentNotFound / AgentDown: the agent is gone (it will never hold).

    Example:
        wait_for_state("worker", lambda s: s.state == "idle" and s.queued == 0, timeout=5)
    """

    def check() -> Status | None:
        current = _status(agent)
        return current if predicate(current) else None

    return _wait(agent, check, timeout, "the expected state")


def is_quiescent(snapshot: RuntimeSnapshot) -> bool:
    """True when a snapshot shows nothing running or pending: idle, no queued prompt or
    notification, empty self-chain slot (the Pool recipe's quiescence, docs/pages/contract.md#s10;
    docs: the pattern recipes)."""
    return (snapshot.phase == "idle" and not snapshot.pending_prompts
            and not snapshot.pending_notifications and not snapshot.self_chain_pending)


def wait_until_idle(agent: Any, timeout: float = 5.0) -> RuntimeSnapshot:
    """Wait until the agent is quiescent (see `is_quiescent`) and return the snapshot.

    A halted agent counts as idle once nothing runs (its queue may still hold prompts:
    check `snapshot.pending_prompts` yourself if that matters).

    Raises:
        TimeoutError: not quiescent within `timeout` seconds.
        gen_agent.AgentNotFound / AgentDown: the agent is gone.
    """

    def check() -> RuntimeSnapshot | None:
        snap = _snapshot(agent)
        if is_quiescent(snap) or (snap.halted and snap.phase == "idle"):
            return snap
        return None

    return _wait(agent, check, timeout, "quiescence")


# ---------------------------------------------------------------------------- mock scripts
class ScriptedAgent(GenAgent):
    """A ready-made agent for tests: hands its `MockBackend` options through and keeps the
    text of every response in its state (a list of str). Never halts.

    Start options read by `init_agent`: `scripts`, `session_id`, `start_error`,
    `reset_error` (see `MockBackend`).
    """

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        """Forward the mock options; the state is an empty list."""
        return {key: opts[key] for key in mock.OPTIONS if key in opts}, []

    def handle_response(self, ref: Any, response: Any, state: Any) -> NoReply:
        """Append `response.text` to the state."""
        return NoReply([*state, response.text])


class MockScripts:
    """What the `mock_backend` fixture gives: shortcuts to build `MockBackend` scripts.

    Attributes:
        backend: `MockBackend` (pass it as the agent's backend).

    Example:
        def test_it(mock_backend):
            ref = gen_agent.start_agent(ScriptedAgent, name="a", backend=mock_backend.backend,
                                        scripts=[mock_backend.text("hi")])
            assert ref.ask("x", timeout=5).text == "hi"
    """

    backend = MockBackend

    def text(self, text: str | list[str], **fields: Any) -> list[Event]:
        """A successful turn (see `mock.text_turn`)."""
        return mock.text_turn(text, **fields)

    def error_turn(self, reason: Any) -> list[Event]:
        """A turn ending in a terminal error event with `reason`."""
        return mock.error_turn(reason)

    def error(self, reason: Any) -> mock.ErrorScript:
        """A synchronous dispatch error with `reason`."""
        return mock.error(reason)

    def raising(self, exc_or_reason: Any) -> mock.RaisingScript:
        """A stream that raises when pulled (a task crash)."""
        return mock.raising(exc_or_reason)

    def gate(self, events: Iterable[Event] | None = None, timeout: float = 5.0) -> mock.Gate:
        """A turn held until `gate.release()` (default events: an empty successful turn)."""
        return mock.gate(mock.text_turn("") if events is None else events, timeout)

    def echo(self, prefix: str = "") -> Callable[[str], list[Event]]:
        """A callable script answering a prompt with `prefix + prompt`.

        Like every script, one entry in `scripts` serves one turn; the same callable may be
        listed many times, or given once as the `fallback` to answer every turn:
        `options(fallback=mock_backend.echo("you said: "))`.
        """

        def script(prompt: str) -> list[Event]:
            return mock.text_turn(prefix + prompt)

        return script

    def options(self, *scripts: Any, session_id: str | None = None,
                fallback: Any = None) -> dict[str, Any]:
        """Backend options for `init_agent`: `{"scripts": [...], "session_id": ...,
        "fallback": ...}` (the last two only when given)."""
        opts: dict[str, Any] = {"scripts": list(scripts)}
        if session_id is not None:
            opts["session_id"] = session_id
        if fallback is not None:
            opts["fallback"] = fallback
        return opts

    def history(self, agent: Any) -> list[str]:
        """The prompts dispatched to the agent `agent` (a name), in order."""
        return MockBackend.history(_name_of(agent))


# ---------------------------------------------------------------------------- leaks
class LeakReport(msgspec.Struct, frozen=True, kw_only=True):
    """What a test left running.

    Fields:
        threads: names of threads started during the test and still alive.
        processes: pids of child processes started during the test and still running
            (empty where `/proc` is absent: not checked there).
    """

    threads: tuple[str, ...] = ()
    processes: tuple[int, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.threads or self.processes)

    def describe(self) -> str:
        """One line for a test failure."""
        parts = []
        if self.threads:
            parts.append(f"threads left behind: {list(self.threads)}")
        if self.processes:
            parts.append(f"child processes left behind: {list(self.processes)}")
        return "; ".join(parts)


def _stat_fields(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of `pid` from /proc/<pid>/stat, or None if it is gone."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may itself contain spaces and parentheses.
    rest = text[text.rfind(")") + 2:].split()
    return (rest[0], int(rest[1])) if len(rest) >= 2 else None


def _running(pid: int) -> bool:
    fields = _stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def child_processes(pid: int | None = None) -> set[int] | None:
    """The running (non-zombie) child processes of `pid` (default: this process).

    Reads `/proc/<pid>/task/*/children`, or scans `/proc/*/stat` where that file is missing.
    Returns None where `/proc` is absent (not Linux): the check is then skipped.
    """
    pid = os.getpid() if pid is None else pid
    if not (_PROC / "self").is_dir():
        return None
    found: set[int] = set()
    have_children_files = False
    with contextlib.suppress(OSError):
        for task in (_PROC / str(pid) / "task").iterdir():
            try:
                text = (task / "children").read_text()
            except OSError:
                continue  # the thread ended, or the kernel lacks CONFIG_PROC_CHILDREN
            have_children_files = True
            found.update(int(part) for part in text.split())
    if not have_children_files:
        for entry in _PROC.iterdir():
            if entry.name.isdigit():
                fields = _stat_fields(int(entry.name))
                if fields is not None and fields[1] == pid:
                    found.add(int(entry.name))
    return {child for child in found if _running(child)}


def _wait_pids_gone(pids: set[int], deadline: float) -> set[int]:
    """Wait until `pids` exited (pidfd where available, else a bounded poll); return the rest."""
    left = {pid for pid in pids if _running(pid)}
    for pid in list(left):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            fd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            fd = None
        if fd is not None:
            try:
                select.select([fd], [], [], remaining)
            finally:
                os.close(fd)
        else:
            while _running(pid) and time.monotonic() < deadline:
                time.sleep(0.05)  # no exit notification for a foreign pid without pidfd
        if not _running(pid):
            left.discard(pid)
    return {pid for pid in left if _running(pid)}


def _join_started(thread: threading.Thread, deadline: float) -> None:
    """`thread.join` until `deadline` (monotonic seconds), also for a thread caught between
    `start()` and its first instruction: `threading.enumerate()` lists it (threading's
    "limbo"), but `join` raises RuntimeError until it runs."""
    while True:
        try:
            thread.join(max(0.0, deadline - time.monotonic()))
            return
        except RuntimeError:
            if time.monotonic() >= deadline:
                return
            time.sleep(0.001)  # it is about to run: the OS thread exists already


_DRAIN_THREAD = "gen_agent-drain"


def find_leaks(threads_before: Iterable[threading.Thread], children_before: set[int] | None,
               timeout: float = 10.0) -> LeakReport:
    """Wait (at most `timeout` seconds in total) for the threads and child processes started
    since the snapshots to end, and report those still running. Pooled turn threads
    ("gen_agent-turn") count as ended once parked between turns, the HTTP backends' drain
    thread ("gen_agent-drain") once it has no response left to drain; the process-wide timer
    thread ("gen_agent-timers") is a service, not a leak.

    Args:
        threads_before: `threading.enumerate()` taken before the test.
        children_before: `child_processes()` taken before the test (None = skip processes).
        timeout: seconds, shared by every join and process wait.
    """
    from gen_agent._runtime import WORKERS
    from gen_agent._timers import THREAD_NAME as TIMER_THREAD

    deadline = time.monotonic() + timeout
    before = set(threads_before)
    left = []
    for thread in [t for t in threading.enumerate() if t not in before]:
        remaining = max(0.0, deadline - time.monotonic())
        if thread.name == _TURN_THREAD:
            # Turn threads are pooled: one parked between turns is not a leak.
            if not WORKERS.wait_parked(thread, remaining):
                left.append(thread.name)
            continue
        if thread.name == TIMER_THREAD:
            continue  # the process-wide timer service, idle between deadlines
        if thread.name == _DRAIN_THREAD:
            from gen_agent.backends._http.transport import DRAINER

            # The process-wide drain service: idle once every parked body was read.
            if not DRAINER.wait_idle(remaining):
                left.append(thread.name)
            continue
        _join_started(thread, deadline)
        if thread.is_alive():
            left.append(thread.name)
    threads = tuple(left)
    processes: tuple[int, ...] = ()
    if children_before is not None:
        now = child_processes()
        if now is not None:
            processes = tuple(sorted(_wait_pids_gone(now - children_before, deadline)))
    return LeakReport(threads=threads, processes=processes)
