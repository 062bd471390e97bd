"""Warm sessions: one long-lived CLI process per agent session, kept across turns.

The Claude Code CLI (`--input-format stream-json`) and Codex (`codex app-server`) can keep one
process per conversation and take turn after turn on its stdin. This module holds what both
share:

- the records a warm process hands to the agent's `handle_info` (`WarmOutput`, `WarmExited`,
  `UnrequestedTurn`), for output that belongs to no turn the agent asked for (arriving
  between turns, or a turn the CLI ran by itself); never part of a turn;
- `Slot`: the acquire/release bookkeeping of a session's one live process (which turn owns
  it, waiting for the previous turn to settle, closing);
- `LiveProcess`: one CLI child with a stdin pipe and a reader thread that routes every stdout
  line (the protocol layer decides where a line goes), and whose end is bounded (stdin EOF,
  then SIGTERM, then SIGKILL of the process tree);
- the live-process policy: an idle timeout per process (`idle_timeout_ms`) and a cap on the
  live warm processes of this Python process (`set_max_live_processes`), which closes the least
  recently used idle one first. A closed process costs nothing but a slower next turn: that
  turn starts a new process resuming the conversation.

Orphans: the CLI runs under the launcher (`_process`), which kills its whole tree when our
process dies (tested by SIGKILLing a Python process whose agent's CLI runs a tool); the CLI also
reads EOF on its stdin then.

Mirrors: no Elixir original (GenAgent runs one CLI per turn); the wire protocols are Claude
Code's stream-json control protocol (as claude-agent-sdk's `ClaudeSDKClient` drives it) and
Codex app-server's JSON-RPC.
"""

from __future__ import annotations

import collections
import contextlib
import json
import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar, Final, Generic, Protocol, TypeVar

import msgspec
from loguru import logger

from gen_agent.backends._subprocess.process import ChildProcess, LineTooLong

__all__ = [
    "DEFAULT_IDLE_TIMEOUT_MS",
    "DEFAULT_INTERRUPT_GRACE_MS",
    "DEFAULT_MAX_LIVE_PROCESSES",
    "STOP_GRACE_MS",
    "LiveProcess",
    "Slot",
    "SlotProcess",
    "TurnQueue",
    "UnrequestedLines",
    "UnrequestedTurn",
    "WarmExited",
    "WarmOutput",
    "drain_abandoned_turn",
    "encode_json_line",
    "live_processes",
    "max_live_processes",
    "set_max_live_processes",
    "stop_grace_s",
    "with_process",
]

DEFAULT_IDLE_TIMEOUT_MS: Final = 15 * 60 * 1000
"""Default time a warm process may sit idle before it is closed (milliseconds; 15 min)."""

DEFAULT_INTERRUPT_GRACE_MS: Final = 5_000
"""Default time an interrupted turn gets to settle before its process is killed (ms)."""

DEFAULT_MAX_LIVE_PROCESSES: Final = 32
"""Default cap on live warm CLI processes in this Python process."""

STOP_GRACE_MS: Final = 2_000
"""The most a stopping agent's running turn gets to settle after its interrupt (ms): with the
CLI's exit (~0.1 s measured) it fits the default 5 s shutdown window. Shorter when
`interrupt_grace_ms` is."""


def stop_grace_s(interrupt_grace_ms: int) -> float:
    """The settle time of a stopping agent's turn: `min(interrupt_grace_ms, STOP_GRACE_MS)`
    in seconds."""
    return min(interrupt_grace_ms, STOP_GRACE_MS) / 1000


class TurnQueue:
    """The items a live process's reader routes to the turn that reads them (lines, control
    requests, EXIT, CANCEL): a small blocking FIFO. Thread-safe; shared by the warm Claude
    and the Codex app-server runners."""

    __slots__ = ("_interrupted", "cond", "interrupter", "items", "started")

    def __init__(self) -> None:
        self.items: collections.deque[Any] = collections.deque()
        self.cond = threading.Condition(threading.Lock())
        # When the CLI began this turn (reset once it took the prompt): what an interrupted
        # turn started ends with it (`drain_abandoned_turn`).
        self.started = time.monotonic()
        # Sends the CLI's interrupt for this turn (set by the turn once it can be interrupted:
        # its prompt was sent); `interrupt_once` calls it at most once.
        self.interrupter: Callable[[], None] | None = None
        self._interrupted = False

    def interrupt_once(self) -> bool:
        """Send the turn's interrupt unless it was sent already (any thread).

        Returns:
            False when it could not be sent (no interrupter yet, or the CLI is gone).
        """
        with self.cond:
            interrupter, sent = self.interrupter, self._interrupted
            self._interrupted = self._interrupted or interrupter is not None
        if sent:
            return True
        if interrupter is None:
            return False
        try:
            interrupter()
        except OSError:
            return False
        return True

    def put(self, item: Any) -> None:
        """Append `item` and wake the reader."""
        with self.cond:
            self.items.append(item)
            self.cond.notify()

    def get(self, timeout: float | None = None) -> Any:
        """The next item; None when `timeout` seconds passed first."""
        with self.cond:
            if not self.cond.wait_for(lambda: self.items, timeout):
                return None
            return self.items.popleft()


class SlotProcess(Protocol):
    """What `Slot` needs of a runner's process: its `LiveProcess` and the turn it routes to."""

    live: LiveProcess
    turn: Any


ProcessT = TypeVar("ProcessT", bound=SlotProcess)
LinesT = TypeVar("LinesT", bound=TurnQueue)


class Slot(Generic[ProcessT, LinesT]):
    """The acquire/release bookkeeping of a warm session's one live process, shared by the
    warm Claude runner (`_claude_warm.WarmSlot`) and the Codex app-server runner
    (`_codex_app.AppSlot`). Thread-safe; the mutable part of a session, shared by its copies.

    Holds the live process (or None) and the turn (`LinesT`, the `TurnQueue` its lines go to)
    that owns it. A subclass's `acquire` calls `_settle_previous`, starts a process when
    none is live, and hands it to the new turn (`_own_locked`); the turn calls `release`
    when it settled. `provider` names the CLI in log messages.
    """

    provider: ClassVar[str] = "cli"

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self.process: ProcessT | None = None
        self._turn: LinesT | None = None

    @property
    def pid(self) -> int | None:
        """The live process's id, or None."""
        process = self.process
        return None if process is None else process.live.pid

    def _process_gone(self, process: ProcessT) -> None:
        """The reader saw `process` end (reader thread): forget it, wake waiters."""
        with self._cond:
            if self.process is process:
                self.process = None
            self._cond.notify_all()

    def _settle_previous(self, settle_s: float) -> ProcessT | None:
        """Wait up to `settle_s` seconds for the previous turn to release the process; kill a
        process whose turn did not settle by then. Returns the process that is still alive,
        or None. Turn task thread."""
        deadline = time.monotonic() + settle_s
        with self._cond:
            while self._turn is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            stuck, process = self._turn is not None, self.process
        if stuck and process is not None:
            logger.warning("gen_agent {}: the previous turn did not settle; killing it",
                           self.provider)
            process.live.kill()
            process.live.wait_exited(settle_s)
        with self._cond:
            process = self.process
            return process if process is not None and process.live.alive else None

    def _own_locked(self, process: ProcessT, lines: LinesT) -> None:
        """Make `process` the slot's live process, owned by the turn reading `lines`; the
        caller holds `self._cond` (so a concurrent `close` sees the new process)."""
        self.process = process
        self._turn = lines
        process.turn = lines
        process.live.mark_busy(True)

    def release(self, process: ProcessT, lines: LinesT) -> None:
        """The turn `lines` settled: the process is free for the next one."""
        with self._cond:
            if process.turn is lines:
                process.turn = None
            if self._turn is lines:
                self._turn = None
            self._cond.notify_all()
        process.live.mark_busy(False)

    def stop(self, *, grace_s: float, wait_s: float) -> None:
        """End the live process for an agent that stops: a turn still running is interrupted
        first (the CLI's own interrupt, which ends the tools it runs) and given `grace_s`
        seconds to settle; then stdin EOF (SIGKILL to the tree past the exit grace), or
        SIGKILL to the tree at once when the turn did not settle. Waits up to `wait_s`
        seconds until it was reaped. Any thread; idempotent."""
        with self._cond:
            process, lines = self.process, self._turn
        if process is None:
            return
        if lines is not None:
            if lines.interrupt_once():
                deadline = time.monotonic() + grace_s
                with self._cond:
                    while self._turn is lines and (left := deadline - time.monotonic()) > 0:
                        self._cond.wait(left)
            with self._cond:
                busy = self._turn is lines
        else:
            busy = False
        if busy:
            process.live.kill()
        else:
            process.live.close()
        process.live.wait_exited(wait_s)

    def close(self, *, kill: bool = False, wait_s: float | None = None) -> None:
        """End the live process: stdin EOF (SIGKILL past its exit grace), or SIGKILL now when
        `kill` or a turn still runs. With `wait_s`, wait that long (seconds) until it was
        reaped. Idempotent."""
        with self._cond:
            process, busy = self.process, self._turn is not None
        if process is None:
            return
        if kill or busy:
            process.live.kill()
        else:
            process.live.close()
        if wait_s is not None:
            process.live.wait_exited(wait_s)


class WarmOutput(msgspec.Struct, frozen=True, kw_only=True):
    """`handle_info` record: a warm CLI printed a line while no turn of the agent was running.

    Fields:
        backend: the provider (`"claude"`, `"codex"`).
        pid: the CLI's process id.
        line: the decoded JSON line (usually a dict), or None if it was not JSON.
        size_bytes: the line's size (bytes).
    """

    backend: str
    pid: int
    line: Any
    size_bytes: int


class WarmExited(msgspec.Struct, frozen=True, kw_only=True):
    """`handle_info` record: a warm CLI process ended while no turn was running.

    The next turn starts a new process that resumes the conversation; nothing is lost but
    the process start. (A process that ends during a turn fails that turn instead.)

    Fields:
        backend: the provider (`"claude"`, `"codex"`).
        pid: the process id it had.
        exit_code: its exit status (negative: the signal that killed it), or None.
        stderr_tail: the end of its stderr (text; may hold what the CLI printed).
    """

    backend: str
    pid: int
    exit_code: int | None
    stderr_tail: str


class UnrequestedTurn(msgspec.Struct, frozen=True, kw_only=True):
    """`handle_info` record: a whole turn the CLI ran that no ask of the agent asked for.

    The Claude Code CLI runs a turn of its own when a background task (a `Bash` command run
    in the background, a background agent) finishes: the model is told, and answers. Such a
    turn, and any other turn whose prompt the agent did not write (matched by the prompt's
    uuid, see `docs/pages/backends/claude.md`), never becomes a caller's answer: its lines
    become this one record, sent when its `result` arrives (or, unfinished, when the process
    ends). Codex app-server: the notifications of a turn id other than the running turn's.
    Buffered while the agent runs a turn, like any info message; dropped (debug log) when
    the agent defines no `handle_info`.

    Fields:
        backend: the provider (`"claude"`, `"codex"`).
        pid: the CLI's process id.
        session_id: the session (thread) it ran in, or None when its lines named none.
        turn_id: the provider's id of that turn (Codex), or None.
        text: its assistant text (the result's text when it has one), at most
            `stderr_tail_bytes` bytes of UTF-8 (the beginning kept).
        truncated: whether `text` was cut to that bound.
        is_error: whether it ended in a failure (a `result` with `is_error`, a failed turn).
        cost_usd: what it cost (US dollars; the CLI's running total grew by this much), or
            None when unknown; also added to the session's totals.
        usage: its token counts, or None.
        complete: False when it had not ended when the process ended.
        lines: how many stdout lines it had (count).
        size_bytes: their total size (bytes).
    """

    backend: str
    pid: int
    session_id: str | None = None
    turn_id: str | None = None
    text: str = ""
    truncated: bool = False
    is_error: bool = False
    cost_usd: float | None = None
    usage: dict[str, Any] | None = None
    complete: bool = True
    lines: int = 0
    size_bytes: int = 0


class UnrequestedLines:
    """Collects the lines of one turn nobody asked for into an `UnrequestedTurn`: a count, a
    size and its text up to `text_limit_bytes` (bounded memory, whatever the turn's size).
    Reader thread only."""

    __slots__ = ("_limit", "_parts", "_size_text", "lines", "session_id", "size_bytes",
                 "truncated", "turn_id")

    def __init__(self, text_limit_bytes: int, turn_id: str | None = None) -> None:
        self._limit = text_limit_bytes
        self._parts: list[str] = []
        self._size_text = 0
        self.truncated = False
        self.lines = 0
        self.size_bytes = 0
        self.session_id: str | None = None
        self.turn_id = turn_id

    def add(self, size_bytes: int, *, session_id: Any = None, text: Any = None) -> None:
        """Count one line of `size_bytes` bytes; keep its session id and text, if any."""
        self.lines += 1
        self.size_bytes += size_bytes
        if isinstance(session_id, str) and session_id:
            self.session_id = session_id
        if isinstance(text, str) and text:
            self.add_text(text)

    def add_text(self, text: str) -> None:
        """Keep `text`, as much of it as the byte limit leaves room for (else `truncated`)."""
        room = self._limit - self._size_text
        if room <= 0:
            self.truncated = True
            return
        encoded = text.encode("utf-8", errors="replace")
        if len(encoded) > room:
            text = encoded[:room].decode("utf-8", errors="ignore")
            self.truncated = True
        self._parts.append(text)
        self._size_text += len(text.encode("utf-8", errors="replace"))

    @property
    def text(self) -> str:
        """The text kept so far (at most the byte limit)."""
        return "".join(self._parts)

    def record(self, backend: str, pid: int, *, final_text: Any = None, is_error: bool = False,
               cost_usd: float | None = None, usage: dict[str, Any] | None = None,
               complete: bool = True) -> UnrequestedTurn:
        """The record of the lines seen so far; `final_text` (the result's text, when it has
        one) replaces the collected text."""
        text, truncated = self.text, self.truncated
        if isinstance(final_text, str) and final_text:
            self._parts, self._size_text, self.truncated = [], 0, False
            self.add_text(final_text)
            text, truncated = self.text, self.truncated
        return UnrequestedTurn(
            backend=backend, pid=pid, session_id=self.session_id, turn_id=self.turn_id,
            text=text, truncated=truncated, is_error=is_error, cost_usd=cost_usd,
            usage=usage or None, complete=complete, lines=self.lines,
            size_bytes=self.size_bytes)


_EXIT = object()
"""The item a reader routes when stdout ended (the process is gone or going)."""


def encode_json_line(encoder: msgspec.json.Encoder, value: Any) -> bytes:
    """`value` as one JSON line (with its newline): msgspec's encoding, or, for a value
    holding a lone surrogate (which has no UTF-8 form), the standard library's with every
    non-ASCII character escaped (`\\ud800`), which the CLIs read as the same string."""
    try:
        return encoder.encode(value) + b"\n"
    except UnicodeEncodeError:
        return json.dumps(value, ensure_ascii=True, separators=(",", ":")).encode() + b"\n"


class LiveProcess:
    """One long-lived CLI child and the thread that reads its stdout.

    The reader thread (`gen_agent-cli-reader-PID`) passes each stdout item (a `bytes` line or
    a `LineTooLong`) to `route(item)` and, at the end, reaps the child (bounded) and calls
    `on_exit(self)`. `write_json` may be called from any thread.

    Args:
        child: a `ChildProcess` spawned with `stdin_pipe=True`.
        provider: the provider name (for records and logs).
        route: called in the reader thread with each stdout item; must not block long.
        on_exit: called in the reader thread once, after the child was reaped.
        idle_timeout_ms: close the process after this long without a turn (ms), or None.
    """

    def __init__(
        self,
        child: ChildProcess,
        *,
        provider: str,
        route: Callable[[bytes | LineTooLong], None],
        on_exit: Callable[[LiveProcess], None],
        idle_timeout_ms: int | None,
    ) -> None:
        self.child = child
        self.provider = provider
        self._route = route
        self._on_exit = on_exit
        self._idle_timeout_ms = idle_timeout_ms
        self._idle_timer: Any = None
        self._lock = threading.Lock()
        self.close_requested = False
        self.exited = threading.Event()
        self.busy = False
        self.last_used = time.monotonic()
        self._encoder = msgspec.json.Encoder()
        self._reader = threading.Thread(
            target=self._read, name=f"gen_agent-cli-reader-{child.pid}", daemon=True
        )
        self._reader.start()
        _register(self)

    @property
    def pid(self) -> int:
        """The CLI's process id."""
        return self.child.pid

    @property
    def closing(self) -> bool:
        """True once we asked it to end (`close`, `kill`) or its stdout ended."""
        return self.close_requested or self.exited.is_set()

    @property
    def alive(self) -> bool:
        """True until the process is closing or its stdout ended."""
        return not self.closing

    def write_json(self, value: Any) -> None:
        """Write `value` as one JSON line to the CLI's stdin.

        Any `str` is carried: one holding a lone surrogate is sent escaped (see
        `encode_json_line`).

        Raises:
            BrokenPipeError / OSError: the CLI is gone (or its stdin was closed).
        """
        self.child.write(encode_json_line(self._encoder, value))

    def mark_busy(self, busy: bool) -> None:
        """A turn starts (True) or ends (False); idle processes get the idle timeout."""
        with self._lock:
            self.busy = busy
            self.last_used = time.monotonic()
            timer, self._idle_timer = self._idle_timer, None
        if timer is not None:
            timer.cancel()
        if not busy and self._idle_timeout_ms is not None and self.alive:
            from gen_agent._timers import TIMERS

            handle = TIMERS.schedule(self._idle_timeout_ms / 1000, self._idle_expired)
            with self._lock:
                self._idle_timer = handle
        if busy:
            _touch(self)

    def _idle_expired(self) -> None:
        with self._lock:
            if self.busy or self._idle_timer is None:
                return
            self._idle_timer = None
        logger.debug("gen_agent {} warm process idle timeout", self.provider)
        self.close()

    def kill(self) -> None:
        """SIGKILL the process tree now (any thread; idempotent; never blocks)."""
        self.close_requested = True
        self.child.cancel()

    def close(self, grace_ms: int | None = None) -> None:
        """End the process gracefully: EOF on its stdin, then, if it is still running after
        `grace_ms` (default the child's `exit_grace_ms`), SIGKILL to its tree; any thread;
        never blocks."""
        with self._lock:
            if self.closing:
                return
            self.close_requested = True
            timer, self._idle_timer = self._idle_timer, None
        if timer is not None:
            timer.cancel()
        self.child.close_stdin()
        wait_s = (self.child._exit_grace_ms if grace_ms is None else grace_ms) / 1000
        threading.Thread(
            target=self._close_bounded, args=(wait_s,), name=f"gen_agent-closer-{self.pid}",
            daemon=True,
        ).start()

    def _close_bounded(self, wait_s: float) -> None:
        if not self.exited.wait(wait_s):
            self.child.cancel()

    def wait_exited(self, timeout: float) -> bool:
        """Block until the reader saw the end and reaped the child; False on timeout (s)."""
        return self.exited.wait(timeout)

    def end(self, wait_s: float) -> None:
        """End the process before another takes its session: `close` (stdin EOF), and if it
        has not exited within `wait_s` seconds, SIGKILL to its tree and wait `wait_s` more.
        Blocks (a turn task's thread)."""
        self.close()
        if not self.wait_exited(wait_s):
            self.kill()
            self.wait_exited(wait_s)

    def _read(self) -> None:
        try:
            for item in self.child.read_lines():
                try:
                    self._route(item)
                except Exception as exc:  # noqa: BLE001 - a routing bug must not leak the child
                    logger.error("gen_agent {} warm routing failed: {}", self.provider,
                                 type(exc).__name__)
        finally:
            with contextlib.suppress(Exception):
                self.child.close()
            _unregister(self)
            self.exited.set()
            try:
                self._on_exit(self)
            except Exception as exc:  # noqa: BLE001 - logged; the process is gone anyway
                logger.error("gen_agent {} warm exit hook failed: {}", self.provider,
                             type(exc).__name__)

    def __repr__(self) -> str:
        return f"LiveProcess(provider={self.provider!r}, pid={self.pid}, alive={self.alive})"


def drain_abandoned_turn(process: LiveProcess, lines: TurnQueue, exit_marker: object,
                         interrupt_grace_ms: int, settled: Callable[[Any], bool]) -> None:
    """Drain an interrupted turn's routed items until it has settled, for the next turn to
    start clean; past `interrupt_grace_ms` (milliseconds), kill the process (the next turn
    resumes the session on a new one). Once it settled, what the turn started and the CLI
    left running (codex 0.171's app-server, interrupted right after it started a command,
    leaves it running: measured about one time in three) is killed; the CLI lives on.

    Args:
        process: the live process the turn ran on.
        lines: the turn's routed items.
        exit_marker: the item the reader routes when the process ended (the drain stops).
        interrupt_grace_ms: how long the turn may take to settle (milliseconds).
        settled: handles one item (answering a pending request, reading the final line) and
            returns True once the turn has ended, or the process cannot be answered.
    """
    deadline = time.monotonic() + interrupt_grace_ms / 1000
    while True:
        item = lines.get(max(0.0, deadline - time.monotonic()))
        if item is None:
            logger.warning("gen_agent {}: interrupted turn did not settle; killing it",
                           process.provider)
            process.kill()
            process.wait_exited(interrupt_grace_ms / 1000 + 1.0)
            return
        if item is exit_marker:
            return
        if settled(item):
            ended = process.child.kill_started_since(time.monotonic() - lines.started)
            if ended:
                logger.debug("gen_agent {}: ended {} processes the interrupted turn left",
                             process.provider, ended)
            return


# -- the live-process registry and its cap -------------------------------------------------

_registry_lock = threading.Lock()
_live: collections.OrderedDict[LiveProcess, None] = collections.OrderedDict()
_max_live = DEFAULT_MAX_LIVE_PROCESSES


def set_max_live_processes(limit: int) -> None:
    """Set the cap on live warm CLI processes in this Python process.

    When a new warm process would exceed it, the least recently used idle ones are closed
    (their agents' next turns resume on new processes). Busy processes are never closed.

    Args:
        limit: the cap (an int >= 1; default `DEFAULT_MAX_LIVE_PROCESSES`).

    Raises:
        ValueError: `limit` is not an int >= 1.
    """
    global _max_live
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ValueError(f"max live processes must be an int >= 1, got {limit!r}")
    with _registry_lock:
        _max_live = limit
    _enforce_cap(None)


def max_live_processes() -> int:
    """The current cap (see `set_max_live_processes`)."""
    return _max_live


def live_processes() -> list[LiveProcess]:
    """The live warm processes, least recently used first (a snapshot; for tests/diagnostics)."""
    with _registry_lock:
        return list(_live)


def _register(process: LiveProcess) -> None:
    with _registry_lock:
        _live[process] = None
    _enforce_cap(process)


def _touch(process: LiveProcess) -> None:
    with _registry_lock:
        if process in _live:
            _live.move_to_end(process)


def _unregister(process: LiveProcess) -> None:
    with _registry_lock:
        _live.pop(process, None)


def _enforce_cap(keep: LiveProcess | None) -> None:
    with _registry_lock:
        excess = sum(1 for p in _live if not p.closing) - _max_live
        victims = []
        for process in _live:
            if excess <= 0:
                break
            if process is keep or process.busy or process.closing:
                continue
            victims.append(process)
            excess -= 1
    for process in victims:
        logger.debug("gen_agent {} warm process closed by the live-process cap",
                     process.provider)
        process.close()


def with_process(reason: Any, child: ChildProcess, plain: Any, partial_text: str,
                 session_id: str | None) -> Any:
    """`reason` (a `BackendError`) with the diagnostics of its warm turn: the text streamed so
    far, the session or thread id (None after `"session_not_found"`), the exit status (once
    exited), the stderr tail, and the stdout lines that were not JSON (`plain`: their bounded
    tail, or None)."""
    return reason.with_diagnostics(
        partial_text=partial_text,
        session_id=None if reason.kind == "session_not_found" else session_id,
        exit_code=child.returncode,
        stderr_tail=child.stderr_tail().decode("utf-8", errors="replace"),
        stdout_tail=None if plain is None else plain.value())

