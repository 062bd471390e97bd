"""The child-process layer shared by the CLI backends (Claude Code, Codex).

A `ChildProcess` runs one CLI invocation:

- spawned from an argument list (never a shell string) under the launcher (`_launcher`, a
  ~10 ms Python start): the launcher leads a new session (`start_new_session=True`), the CLI
  one of its own (and its group), the launcher is a child subreaper on Linux, passes SIGTERM to
  the CLI's group, and kills the CLI's whole tree (other groups and sessions included) once
  the pipe only we hold closes: at `cancel`, or when our process dies, even by SIGKILL,
  whichever thread spawned it; stdin from `/dev/null` (or a pipe that `write` feeds, for a
  long-lived CLI), stdout and stderr piped;
- stdout read as bytes and split on `b"\\n"` by a `LineBuffer`, each line at most
  `max_line_bytes` bytes (the newline excluded); a longer line is discarded while it is read
  and reported as one `LineTooLong(size_bytes, limit_bytes)`; decoding is the caller's job, per
  complete line, so a multi-byte UTF-8 character cut by a read boundary is never split;
- stderr drained concurrently by a daemon thread that keeps only its last `stderr_tail_bytes`
  bytes, so a chatty child can never block on a full pipe;
- `cancel()` from any thread: SIGKILL to the whole tree and an immediate wake-up of a
  blocked reader; idempotent;
- bounded closing: wait up to `exit_grace_ms` for the child to exit by itself, then SIGTERM to
  the group, wait up to `term_grace_ms`, then SIGKILL to the tree; the child is always reaped
  (no zombie). Whatever the CLI leaves running when it exits is killed with it.
  `release()` does it in the background (a reaper thread) unless the child already exited, so
  the reader never waits for the exit.

Failures to start are translated to `BackendError` in one place, `spawn_error`.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import select
import selectors
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Final

import msgspec
from loguru import logger

from gen_agent._reap import (
    LAUNCHER,
    OWNER_ENV,
    descendants,
    owned_env,
    owner_marker,
    reap_marked,
    set_child_marker,
    start_ticks,
)
from gen_agent.backend import BackendError

__all__ = [
    "DEFAULT_EXIT_GRACE_MS",
    "DEFAULT_MAX_LINE_BYTES",
    "DEFAULT_STDERR_TAIL_BYTES",
    "DEFAULT_TERM_GRACE_MS",
    "OWNER_ENV",
    "ChildProcess",
    "LineBuffer",
    "LineTooLong",
    "end_other_holders",
    "live_children",
    "owner_marker",
    "reap_marked",
    "set_child_marker",
    "spawn_error",
    "wait_all_reaped",
]

DEFAULT_MAX_LINE_BYTES: Final = 8 * 1024 * 1024
"""Default bound on one stdout line (bytes, the newline excluded)."""

DEFAULT_STDERR_TAIL_BYTES: Final = 64 * 1024
"""Default amount of stderr kept (bytes, the most recent)."""

DEFAULT_EXIT_GRACE_MS: Final = 2_000
"""Default time a child gets to exit by itself before SIGTERM (milliseconds)."""

DEFAULT_TERM_GRACE_MS: Final = 2_000
"""Default time between SIGTERM and SIGKILL (milliseconds)."""

_READ_CHUNK_BYTES: Final = 64 * 1024
# Whether CLIs start under the launcher (tests and benchmarks may switch it off to compare).
use_launcher = bool(sys.executable) and os.name == "posix"
_STATUS_WAIT_S: Final = 30.0  # how long a launcher may take to report the CLI's start
_TREE_KILL_WAIT_S: Final = 12.0  # how long the launcher may take to end a tree (its budget + 2 s)

_live: weakref.WeakSet[ChildProcess] = weakref.WeakSet()
_live_cond = threading.Condition()


class LineTooLong(msgspec.Struct, frozen=True):
    """A stdout line longer than the limit; its bytes were discarded.

    Fields:
        size_bytes: the real length of the line (bytes, newline excluded).
        limit_bytes: the configured `max_line_bytes` (bytes).
    """

    size_bytes: int
    limit_bytes: int


class LineBuffer:
    """Splits a byte stream into lines of at most `max_line_bytes` bytes. Pure; no I/O.

    Args:
        max_line_bytes: the largest line accepted (bytes, newline excluded; >= 1).

    `feed(chunk)` returns the complete items the chunk finished: `bytes` lines without their
    `b"\\n"`, or `LineTooLong` for a line over the limit (its bytes are dropped as they
    arrive, so memory stays bounded by the limit). `finish()` returns the unterminated rest.

    Not thread-safe: one reader owns it.
    """

    __slots__ = ("_discarded", "_discarding", "_limit", "_parts", "_size")

    def __init__(self, max_line_bytes: int) -> None:
        if max_line_bytes < 1:
            raise ValueError(f"max_line_bytes must be >= 1, got {max_line_bytes}")
        self._limit = max_line_bytes
        self._parts: list[bytes] = []
        self._size = 0
        self._discarding = False
        self._discarded = 0

    def feed(self, chunk: bytes) -> list[bytes | LineTooLong]:
        """Add `chunk`; return the lines (or `LineTooLong` records) it completed, in order."""
        items: list[bytes | LineTooLong] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                self._hold(chunk[start:])
                return items
            items.append(self._complete(chunk[start:end]))
            start = end + 1

    def finish(self) -> bytes | LineTooLong | None:
        """End of stream: the unterminated last line (or its `LineTooLong`), or None."""
        if not self._discarding and self._size == 0:
            self._parts.clear()
            return None
        return self._complete(b"")

    def _hold(self, piece: bytes) -> None:
        if not piece:
            return
        if self._discarding:
            self._discarded += len(piece)
        elif self._size + len(piece) > self._limit:
            self._discarding, self._discarded = True, self._size + len(piece)
            self._parts, self._size = [], 0
        else:
            self._parts.append(piece)
            self._size += len(piece)

    def _complete(self, piece: bytes) -> bytes | LineTooLong:
        if self._discarding:
            item: bytes | LineTooLong = LineTooLong(self._discarded + len(piece), self._limit)
        elif self._size + len(piece) > self._limit:
            item = LineTooLong(self._size + len(piece), self._limit)
        else:
            item = b"".join([*self._parts, piece]) if self._parts else piece
        self._parts, self._size = [], 0
        self._discarding, self._discarded = False, 0
        return item


class _StderrTail:
    """The most recent `limit_bytes` bytes of a stream. Thread-safe."""

    def __init__(self, limit_bytes: int) -> None:
        self._limit = limit_bytes
        self._chunks: collections.deque[bytes] = collections.deque()
        self._size = 0
        self._total = 0
        self._lock = threading.Lock()

    def add(self, chunk: bytes) -> None:
        with self._lock:
            self._total += len(chunk)
            self._chunks.append(chunk)
            self._size += len(chunk)
            while self._chunks and self._size - len(self._chunks[0]) >= self._limit:
                self._size -= len(self._chunks.popleft())

    def value(self) -> bytes:
        with self._lock:
            data = b"".join(self._chunks)
        return data[-self._limit :] if self._limit else b""

    @property
    def total_bytes(self) -> int:
        with self._lock:
            return self._total


def spawn_error(
    exc: OSError,
    *,
    provider: str,
    executable: str,
    cwd: str | None,
    install_hint: str | None = None,
) -> BackendError:
    """Translate a failure to start a CLI into a `BackendError` (the one boundary).

    Args:
        exc: the `OSError` raised by `subprocess.Popen`.
        provider: the provider name for the error (`"claude"`, `"codex"`).
        executable: the program that was started (for the message).
        cwd: the working directory asked for, or None.
        install_hint: what to install when the program is missing, for the message.

    Returns:
        A `BackendError`, not retryable, `raw` the exception, with kind
        `"cli_not_found"` (no such program), `"cwd_not_found"` (no such working directory),
        `"cli_not_executable"` (permission denied), `"argument_list_too_long"` (E2BIG: the
        prompt is too large for a command-line argument) or `"spawn_failed"` (anything else).
    """
    if isinstance(exc, FileNotFoundError):
        if cwd is not None and exc.filename == cwd:
            kind, message = "cwd_not_found", f"working directory {cwd!r} does not exist"
        else:
            kind, message = "cli_not_found", f"executable {executable!r} not found"
            if install_hint:
                message += f"; {install_hint}"
    elif isinstance(exc, PermissionError):
        kind, message = "cli_not_executable", f"executable {executable!r} is not executable"
    elif exc.errno == errno.E2BIG:
        kind = "argument_list_too_long"
        message = "the command line (the prompt is one argument) exceeds the OS limit"
    else:
        kind, message = "spawn_failed", f"could not start {executable!r}: {type(exc).__name__}"
    return BackendError.new(provider, kind, exc, message=message)


class ChildProcess:
    """One running CLI child with bounded stdout line reading and a stderr tail.

    Build it with `ChildProcess.spawn`. The owner (the thread that reads) calls `read_lines`
    and then `release()` or `close()`; `cancel`, `stderr_tail`, `returncode`, `pid` and
    `wait_reaped` may be used from any thread.

    Whenever the CLI is found gone, every process left in its tree (tools it started, in any
    group or session) is killed by the launcher before it exits, and what is left in the
    launcher's group before the launcher is reaped, so no id can have been reused.
    """

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        *,
        max_line_bytes: int,
        stderr_tail_bytes: int,
        exit_grace_ms: int,
        term_grace_ms: int,
        cli_pid: int | None = None,
        lifeline: int | None = None,
    ) -> None:
        self._popen = popen
        self._cli_pid = popen.pid if cli_pid is None else cli_pid
        self._lifeline = lifeline  # our end of the launcher's lifeline pipe, until closed
        # The conversation this CLI runs (resumed, or reported by its stream) and who owns
        # it: a later spawn resuming the same id for another owner ends this one first.
        self.session_id: str | None = None
        self.owner: object | None = None
        self._max_line_bytes = max_line_bytes
        self._exit_grace_ms = exit_grace_ms
        self._term_grace_ms = term_grace_ms
        self._lock = threading.Lock()
        self._reap_lock = threading.Lock()
        self._cancelled = False
        self._reaper: threading.Thread | None = None  # started by cancel()
        self._closer: threading.Thread | None = None  # started by release()
        self._write_lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        self._pidfd = _pidfd_open(popen.pid)
        self._tail = _StderrTail(stderr_tail_bytes)
        assert popen.stdout is not None and popen.stderr is not None
        os.set_blocking(popen.stdout.fileno(), False)
        os.set_blocking(popen.stderr.fileno(), False)
        self._stderr_thread = threading.Thread(
            target=self._drain_stderr, name=f"gen_agent-stderr-{popen.pid}", daemon=True
        )
        with _live_cond:
            _live.add(self)
        self._stderr_thread.start()

    @classmethod
    def spawn(
        cls,
        argv: Sequence[str],
        *,
        provider: str,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        stderr_tail_bytes: int = DEFAULT_STDERR_TAIL_BYTES,
        exit_grace_ms: int = DEFAULT_EXIT_GRACE_MS,
        term_grace_ms: int = DEFAULT_TERM_GRACE_MS,
        install_hint: str | None = None,
        stdin_pipe: bool = False,
        session_id: str | None = None,
        owner: object | None = None,
    ) -> ChildProcess:
        """Start `argv` under the launcher, in a new process group and session.

        Args:
            argv: the program and its arguments (a sequence of `str`; no shell).
            provider: the provider name used in errors.
            env: the complete environment of the child; None inherits ours.
            cwd: the working directory; None keeps ours.
            max_line_bytes: the bound on one stdout line (bytes, newline excluded).
            stderr_tail_bytes: how much of stderr to keep (bytes, the most recent).
            exit_grace_ms: how long the child may take to exit by itself when closed (ms).
            term_grace_ms: how long between SIGTERM and SIGKILL (ms).
            install_hint: appended to the "not found" message (what to install).
            stdin_pipe: give the child a stdin pipe that `write` feeds (default: /dev/null).
            session_id: the conversation the CLI resumes, or None. A CLI of this process
                still running it for another `owner` (an earlier incarnation of the agent,
                say) is killed, tree and all, and reaped first: one conversation never has
                two live CLIs (bounded by `exit_grace_ms + term_grace_ms` + 1 s).
            owner: who runs the conversation (the session's runner or slot, shared by its
                copies).

        Returns:
            The running `ChildProcess`.

        Raises:
            BackendError: the child could not be started (see `spawn_error`).
        """
        if session_id is not None:
            end_other_holders(session_id, owner,
                              timeout=(exit_grace_ms + term_grace_ms) / 1000 + 1.0)
        env = owned_env(env)
        if not use_launcher:
            try:
                popen = subprocess.Popen(
                    list(argv),
                    stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=env,
                    cwd=cwd,
                    start_new_session=True,
                    close_fds=True,
                )
            except OSError as exc:
                raise spawn_error(
                    exc, provider=provider, executable=argv[0], cwd=cwd,
                    install_hint=install_hint) from exc
            cli_pid, lifeline = None, None
        else:
            try:
                popen, cli_pid, lifeline = _launch(argv, env=env, cwd=cwd, stdin_pipe=stdin_pipe)
            except OSError as exc:
                raise spawn_error(
                    exc, provider=provider, executable=argv[0], cwd=cwd,
                    install_hint=install_hint) from exc
        child = cls(
            popen,
            max_line_bytes=max_line_bytes,
            stderr_tail_bytes=stderr_tail_bytes,
            exit_grace_ms=exit_grace_ms,
            term_grace_ms=term_grace_ms,
            cli_pid=cli_pid,
            lifeline=lifeline,
        )
        child.session_id, child.owner = session_id, owner
        return child

    # -- introspection -------------------------------------------------------------------

    @property
    def pid(self) -> int:
        """The CLI's process id (also its process group id)."""
        return self._cli_pid

    @property
    def launcher_pid(self) -> int | None:
        """The launcher's process id (the CLI's session id), or None without a launcher."""
        return None if self._cli_pid == self._popen.pid else self._popen.pid

    @property
    def returncode(self) -> int | None:
        """The exit status once reaped (negative: killed by that signal), else None."""
        return self._popen.returncode

    @property
    def cancelled(self) -> bool:
        """True once `cancel()` was called."""
        return self._cancelled

    def stderr_tail(self) -> bytes:
        """The last `stderr_tail_bytes` bytes the child wrote to stderr so far."""
        return self._tail.value()

    @property
    def stderr_bytes(self) -> int:
        """How many bytes the child wrote to stderr in total (bytes)."""
        return self._tail.total_bytes

    # -- reading ---------------------------------------------------------------------------

    def read_lines(self) -> Iterator[bytes | LineTooLong]:
        """Yield stdout lines (bytes without `b"\\n"`) or `LineTooLong` until EOF or cancel.

        Blocks between lines; `cancel()` from another thread ends it at once. An unterminated
        last line is yielded at EOF (not after a cancel).
        """
        stdout = self._popen.stdout
        assert stdout is not None
        buffer = LineBuffer(self._max_line_bytes)
        with selectors.DefaultSelector() as selector:
            selector.register(stdout.fileno(), selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while not self._cancelled:
                chunk = self._read_ready(selector, stdout.fileno())
                if chunk is None:
                    continue
                if not chunk:
                    break
                yield from buffer.feed(chunk)
        if self._cancelled:
            return
        rest = buffer.finish()
        if rest is not None:
            yield rest

    def _read_ready(self, selector: selectors.BaseSelector, fd: int) -> bytes | None:
        """One read: None when nothing was readable after all, b"" at EOF or on a wake-up."""
        for key, _ in selector.select():
            if key.fd == self._wake_r:
                return b""
        try:
            return os.read(fd, _READ_CHUNK_BYTES)
        except BlockingIOError:
            return None
        except OSError as exc:
            # A broken pipe ends the stream like EOF does: the caller then reports the exit.
            logger.debug("gen_agent child pipe read failed with {}", type(exc).__name__)
            return b""

    def _drain_stderr(self) -> None:
        stderr = self._popen.stderr
        assert stderr is not None
        fd = stderr.fileno()
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(fd, selectors.EVENT_READ)
                selector.register(self._wake_r, selectors.EVENT_READ)
                while True:
                    chunk = self._read_ready(selector, fd)
                    if chunk is None:
                        continue
                    if not chunk:
                        return
                    self._tail.add(chunk)
        except OSError as exc:
            logger.debug("gen_agent stderr drain ended with {}", type(exc).__name__)

    # -- writing (stdin_pipe children) --------------------------------------------------

    def write(self, data: bytes) -> None:
        """Write all of `data` to the child's stdin (blocks while the pipe is full).

        Any thread; writes never interleave. Raises `BrokenPipeError` once the child closed
        its stdin or exited (or `close_stdin` was called), `ValueError` for a child spawned
        without `stdin_pipe`.
        """
        stdin = self._popen.stdin
        if stdin is None:
            raise ValueError("this child was spawned without a stdin pipe")
        with self._write_lock:
            if stdin.closed:
                raise BrokenPipeError("stdin is closed")
            view = memoryview(data)
            fd = stdin.fileno()
            while view:
                written = os.write(fd, view)
                view = view[written:]

    def close_stdin(self) -> None:
        """Close our end of the child's stdin (the child sees EOF). Idempotent; any thread.

        Waits up to a second for a write in progress (a blocked write ends once the child is
        killed); if it does not end, the pipe stays open until the child is reaped."""
        stdin = self._popen.stdin
        if stdin is None or stdin.closed or not self._write_lock.acquire(timeout=1.0):
            return
        try:
            with contextlib.suppress(OSError):
                stdin.close()
        finally:
            self._write_lock.release()

    # -- ending ----------------------------------------------------------------------------

    def cancel(self) -> None:
        """Kill the child's whole tree now (SIGKILL) and wake any blocked reader.

        Safe from any thread, idempotent, never blocks on the child; a reaper thread reaps it.
        """
        with self._lock:
            if self._cancelled:
                return
            self._cancelled = True
        self._kill_tree()
        self._wake()
        self._start_reaper(self._reap_killed)

    def wait_exit(self, timeout: float) -> int | None:
        """Wait up to `timeout` seconds for the child to exit, then reap it.

        Returns:
            The exit status, or None if it is still running after `timeout` seconds.
        """
        if not self._wait_exited(timeout):
            return None
        return self._reap()

    def close(self) -> int:
        """Owner only: end the child, waiting for the whole bounded escalation.

        Waits up to `exit_grace_ms` for a natural exit (no wait after `cancel`), then
        SIGTERM to the CLI's group and up to `term_grace_ms`, then SIGKILL to the tree; kills
        what is left, reaps the child, ends the stderr thread and closes the pipes.

        Returns:
            The exit status (negative: the signal that killed it).
        """
        if self._cancelled:
            return self._reap_killed()  # the tree is being killed: no SIGTERM, no grace
        if not self._wait_exited(self._exit_grace_ms / 1000):
            self._signal_group(signal.SIGTERM)
            if not self._wait_exited(self._term_grace_ms / 1000):
                self._kill_tree()
                return self._reap_killed()
        code = self._reap()
        self._close_pipes()
        return code

    def release(self) -> None:
        """Owner only: done reading; end the child without making the caller wait.

        A child that already exited is reaped here at once; otherwise a reaper thread runs
        `close()` (the bounded escalation) in the background, so a turn's reply never waits
        for its CLI to exit.
        """
        if self._exited_now():
            self._reap()
            self._close_pipes()
            return
        with self._lock:
            if self._closer is not None:
                return
            closer = threading.Thread(
                target=self.close, name=f"gen_agent-closer-{self.pid}", daemon=True
            )
            closer.start()  # started before it is published: wait_reaped may join it at once
            self._closer = closer

    @property
    def reaped(self) -> bool:
        """True once the child was reaped and its stderr drain ended."""
        return self._popen.returncode is not None and not self._stderr_thread.is_alive()

    def wait_reaped(self, timeout: float) -> bool:
        """Block until the child is reaped and its helper threads ended; False on timeout."""
        deadline = time.monotonic() + timeout
        for helper in (self._reaper, self._closer):
            if helper is not None:
                helper.join(max(0.0, deadline - time.monotonic()))
        if not self._wait_exited(max(0.0, deadline - time.monotonic())):
            return False
        self._stderr_thread.join(max(0.0, deadline - time.monotonic()))
        return self._popen.returncode is not None and not self._stderr_thread.is_alive()

    def _wait_exited(self, timeout: float | None) -> bool:
        """Wait for the child to exit WITHOUT reaping it (its pid stays reserved).

        `timeout` is in seconds; None waits until it exits.
        """
        if self._popen.returncode is not None:
            return True
        if self._pidfd is not None:
            # poll, not select: a pidfd may be numbered above FD_SETSIZE in a busy process.
            poller = select.poll()
            poller.register(self._pidfd, select.POLLIN)
            wait_ms = None if timeout is None else max(0, int(timeout * 1000))
            return bool(poller.poll(wait_ms)) or self._exited_now()
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        delay = 0.001
        while not self._exited_now():
            remaining = 0.05 if deadline is None else deadline - time.monotonic()
            if remaining <= 0:
                return False
            # No pidfd on this kernel: poll like `subprocess.Popen.wait` does.
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 0.05)
        return True

    def _exited_now(self) -> bool:
        try:
            info = os.waitid(os.P_PID, self._popen.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True  # already reaped
        return info is not None

    def _reap_killed(self) -> int:
        """`_reap` after `_kill_tree`: a launcher that has not ended the tree within
        `_TREE_KILL_WAIT_S` gets its group SIGKILLed instead."""
        if not self._wait_exited(_TREE_KILL_WAIT_S):
            logger.warning("gen_agent child launcher did not end its tree in time; killing")
            self._signal_group(signal.SIGKILL)
        code = self._reap()
        self._close_pipes()
        return code

    def _reap(self) -> int:
        """Kill what is left of the group while the exited leader still holds its pid, reap
        it, and end the stderr drain. Blocks until the child has exited."""
        self._wait_exited(None)
        with self._reap_lock:
            self._signal_group_locked(signal.SIGKILL)
            code = self._popen.wait()
        self._end_stderr_thread()
        with _live_cond:
            _live.discard(self)
            _live_cond.notify_all()
        return code

    def _end_stderr_thread(self) -> None:
        # EOF ends the drain once the group is gone; a stray process that kept stderr open
        # (it escaped the group) is cut off by the wake-up. Bounded either way.
        self._stderr_thread.join(1.0)
        if self._stderr_thread.is_alive():
            self._wake()
            self._stderr_thread.join(1.0)

    def _close_pipes(self) -> None:
        self.close_stdin()
        with self._lock:
            for pipe in (self._popen.stdout, self._popen.stderr):
                if pipe is not None and not self._stderr_thread.is_alive():
                    with contextlib.suppress(OSError):
                        pipe.close()

    def _start_reaper(self, target: Callable[[], object]) -> None:
        with self._lock:
            if self._reaper is not None:
                return
            reaper = threading.Thread(
                target=target, name=f"gen_agent-reaper-{self.pid}", daemon=True
            )
            reaper.start()  # started before it is published: wait_reaped may join it at once
            self._reaper = reaper

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    def kill_started_since(self, age_s: float) -> int:
        """SIGKILL the CLI's descendants (and the orphans its launcher adopted) that started
        at most `age_s` seconds ago, sparing the CLI: what one interrupted turn started.
        Linux (`/proc`); elsewhere a no-op. Any thread. Returns how many were killed."""
        root = self._popen.pid
        clk_tck = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        try:
            with open("/proc/uptime", "rb") as file:
                uptime_s = float(file.read().split()[0])
        except (OSError, ValueError, IndexError):
            return 0
        since = (uptime_s - age_s) * clk_tck - 2  # (2 ticks of slack: the clocks differ)
        killed = 0
        with self._reap_lock:  # unreaped: the launcher's pid (the tree's root) is ours
            if self._popen.returncode is not None:
                return 0
            for pid in descendants(root):
                if pid == self._cli_pid or start_ticks(pid) < since:
                    continue
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
        return killed

    def _kill_tree(self) -> None:
        """SIGKILL the whole tree: close the lifeline (the launcher kills every descendant,
        then exits), or, without a launcher, SIGKILL the group. Never blocks."""
        with self._reap_lock:
            lifeline, self._lifeline = self._lifeline, None
            if lifeline is None:
                self._signal_group_locked(signal.SIGKILL)
                return
        with contextlib.suppress(OSError):
            os.close(lifeline)

    def _signal_group(self, signum: int) -> None:
        with self._reap_lock:
            self._signal_group_locked(signum)

    def _signal_group_locked(self, signum: int) -> None:
        # Our child (the launcher, or the CLI itself) leads its own group (start_new_session),
        # so its pid is the group id. Only sent while the child is unreaped (under the reap
        # lock), so the id cannot have been reused by an unrelated process. The launcher
        # passes SIGTERM on to the CLI's group; SIGKILL reaches the launcher's own group only
        # (sent when it did not end the tree itself, or to what is left once it exited).
        if self._popen.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if signum == signal.SIGTERM and self._cli_pid != self._popen.pid:
                os.kill(self._popen.pid, signum)
            else:
                os.killpg(self._popen.pid, signum)

    def __del__(self) -> None:
        # A dropped child takes its tree with it: closing the lifeline ends it.
        for fd in (self._wake_r, self._wake_w, self._pidfd, self._lifeline):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def __repr__(self) -> str:
        return f"ChildProcess(pid={self.pid}, returncode={self.returncode})"


def _launch(argv: Sequence[str], *, env: dict[str, str], cwd: str | None,
            stdin_pipe: bool) -> tuple[subprocess.Popen[bytes], int, int]:
    """Start `argv` under the launcher; returns `(popen of the launcher, the CLI's pid, our
    end of the lifeline)`. Raises OSError as `Popen` would for the CLI itself (the errno the
    launcher reports, with `filename` the program)."""
    life_r, life_w = os.pipe()
    status_r, status_w = os.pipe()
    try:
        popen = subprocess.Popen(
            [sys.executable, "-I", "-S", LAUNCHER, str(life_r), str(status_w), *argv],
            stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            start_new_session=True,
            pass_fds=(life_r, status_w),
        )
    except BaseException:
        os.close(life_w)
        os.close(status_r)
        raise
    finally:
        os.close(life_r)  # the launcher has its copies now
        os.close(status_w)
    try:
        status = _read_status(status_r)
    finally:
        os.close(status_r)
    if status.startswith(b"P"):
        return popen, int(status[1:]), life_w
    os.close(life_w)  # the launcher exits (or is told to)
    with contextlib.suppress(subprocess.TimeoutExpired):
        popen.wait(_STATUS_WAIT_S)
    if popen.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(popen.pid, signal.SIGKILL)
        popen.wait()
    for pipe in (popen.stdin, popen.stdout, popen.stderr):
        if pipe is not None:
            pipe.close()
    if status.startswith(b"E"):
        code = int(status[1:] or 0)
        raise OSError(code, os.strerror(code), argv[0])
    raise OSError(errno.ECHILD, "the CLI launcher ended without starting the program", argv[0])


def _read_status(fd: int) -> bytes:
    """The launcher's one status line (`P<pid>` or `E<errno>`), b"" at EOF or after
    `_STATUS_WAIT_S` seconds."""
    data = b""
    deadline = time.monotonic() + _STATUS_WAIT_S
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while not data.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not poller.poll(int(remaining * 1000) + 1):
            logger.warning("gen_agent child launcher did not report within {} s",
                           _STATUS_WAIT_S)
            return b""
        chunk = os.read(fd, 64)
        if not chunk:
            return b""
        data += chunk
    return data.strip()


def _pidfd_open(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def end_other_holders(session_id: str, owner: object | None, *, timeout: float) -> int:
    """Kill (tree and all) every child of this process still running conversation
    `session_id` for an owner other than `owner`, and wait up to `timeout` seconds until
    they are reaped. Returns how many there were."""
    with _live_cond:
        others = [child for child in _live if child.session_id == session_id
                  and child.owner is not owner and not child.reaped]
    for child in others:
        logger.warning("gen_agent: a CLI (pid {}) still runs the session being resumed for "
                       "another owner; ending it first", child.pid)
        child.cancel()
    deadline = time.monotonic() + timeout
    for child in others:
        if not child.wait_reaped(max(0.0, deadline - time.monotonic())):
            logger.warning("gen_agent: the CLI (pid {}) of the resumed session was not reaped "
                           "in time", child.pid)
    return len(others)


def live_children() -> list[ChildProcess]:
    """The `ChildProcess`es not yet fully reaped (a snapshot). For tests and diagnostics."""
    with _live_cond:
        return list(_live)


def wait_all_reaped(timeout: float) -> bool:
    """Block until every `ChildProcess` was reaped; False if some remain after `timeout` s."""
    with _live_cond:
        return _live_cond.wait_for(lambda: not _live, timeout)
