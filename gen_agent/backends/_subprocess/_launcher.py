"""The launcher every CLI child runs under: it ends the CLI's whole process tree when the host
goes away, whatever thread started it.

Run as a script, never imported by the host: ``python -I -S _launcher.py LIFELINE_FD
STATUS_FD PROGRAM ARG...`` (started by `_process.ChildProcess.spawn`). It uses the standard
library's C modules only, so it starts in about 10 ms. The launcher:

1. makes itself a child subreaper (Linux `prctl(PR_SET_CHILD_SUBREAPER)`): a process the CLI
   starts and then abandons, in any process group or session (the Claude Code Bash tool runs
   in a session of its own), is re-parented to the launcher instead of init, so it stays in
   the launcher's tree;
2. starts PROGRAM (`posix_spawnp`, default signal dispositions) as the leader of a session
   (and process group) of its own, as it would run without the launcher (codex 0.171's
   app-server ends a command at `turn/interrupt` only then: measured), writes ``P<pid>\\n``
   to STATUS_FD (or ``E<errno>\\n`` when PROGRAM cannot be started, then exits 127) and
   closes it; its stdin and stdout are handed to PROGRAM, its own become /dev/null;
3. waits. LIFELINE_FD is the read end of a pipe whose write end only the host holds: EOF on
   it (the host closed it, or the host process is gone, even SIGKILLed) or a SIGUSR1 kills
   every descendant with SIGKILL, PROGRAM included. When PROGRAM exits by itself, what it
   left running is killed the same way;
4. exits as PROGRAM did: the same exit code, or killed by the same signal (a core-dumping
   signal becomes exit code 128 + signal).

SIGTERM, SIGINT and SIGHUP sent to the launcher are passed on to PROGRAM's process group
(while PROGRAM is not reaped, so the group id cannot have been reused); the launcher cleans up
after PROGRAM exits.

Descendants are found in `/proc` (Linux) or with `ps` (macOS and other POSIX systems, where
there is no subreaper: a process whose parent exited before the kill is re-parented to init
and is out of reach).
"""

from __future__ import annotations

import _signal
import os
import select
import sys
import time

_FORWARDED = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP)
_SIGNALS = (_signal.SIGCHLD, _signal.SIGUSR1, *_FORWARDED)
# Dispositions PROGRAM gets back: ours (caught above) and the ones Python ignores at start.
_DEFAULTS = (*_SIGNALS, _signal.SIGPIPE, _signal.SIGXFSZ)
_CORE = frozenset(getattr(_signal, name) for name in (
    "SIGQUIT", "SIGILL", "SIGTRAP", "SIGABRT", "SIGBUS", "SIGFPE", "SIGSEGV", "SIGSYS",
    "SIGXCPU", "SIGXFSZ") if hasattr(_signal, name))
_KILL_BUDGET_S = 10.0  # how long the launcher keeps killing and reaping before it gives up


def _noop(signum: int, frame: object) -> None:
    """The C-level handler has already written `signum` to the wake-up pipe."""


def _set_subreaper() -> bool:
    """`prctl(PR_SET_CHILD_SUBREAPER, 1)`; False where it is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        # `_ctypes` directly: importing `ctypes` would cost ~4 ms of the start.
        import _ctypes

        class _Int(_ctypes._SimpleCData):  # type: ignore[name-defined, misc]
            _type_ = "i"

        class _Fn(_ctypes.CFuncPtr):  # type: ignore[name-defined, misc]
            _flags_ = _ctypes.FUNCFLAG_CDECL
            _restype_ = _Int

        class _Lib:
            _handle = _ctypes.dlopen(None)  # type: ignore[arg-type]

        prctl = _Fn(("prctl", _Lib()))  # type: ignore[arg-type]
        return int(prctl(36, 1)) == 0  # PR_SET_CHILD_SUBREAPER
    except Exception:  # noqa: BLE001 - without it, orphans escape; everything else works
        return False


def _children_map() -> dict[int, list[int]]:
    """Parent pid -> live (non-zombie) child pids, for every process we can see."""
    children: dict[int, list[int]] = {}
    if os.path.isdir("/proc/self"):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as file:
                    stat = file.read()
            except OSError:
                continue
            fields = stat[stat.rindex(b")") + 2:].split(b" ", 2)
            if fields[0] not in (b"Z", b"X"):
                children.setdefault(int(fields[1]), []).append(int(entry))
        return children
    import subprocess

    try:
        out = subprocess.run(["ps", "-A", "-o", "pid=", "-o", "ppid=", "-o", "stat="],
                             capture_output=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return children
    for row in out.split(b"\n"):
        parts = row.split()
        if len(parts) >= 3 and not parts[2].startswith(b"Z"):
            children.setdefault(int(parts[1]), []).append(int(parts[0]))
    return children


def _descendants(root: int) -> list[int]:
    children = _children_map()
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


class _Launcher:
    def __init__(self, lifeline: int, program: int, wake: int) -> None:
        self.lifeline: int | None = lifeline
        self.program = program
        self.status: int | None = None  # PROGRAM's wait status once reaped
        self.wake = wake

    def reap(self) -> None:
        """Reap every exited child (PROGRAM and adopted orphans) without blocking."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.program:
                self.status = status

    def drain_wake(self) -> bytes:
        data = b""
        while True:
            try:
                chunk = os.read(self.wake, 512)
            except (BlockingIOError, InterruptedError):
                return data
            if not chunk:
                return data
            data += chunk

    def kill_tree(self) -> None:
        """SIGKILL every descendant until none is left (orphans come back to us as
        subreaper), reaping as they go; bounded by `_KILL_BUDGET_S`."""
        deadline = time.monotonic() + _KILL_BUDGET_S
        me = os.getpid()
        poller = select.poll()
        poller.register(self.wake, select.POLLIN)
        while True:
            victims = _descendants(me)
            if self.status is None and self.program not in victims:
                victims.append(self.program)  # not listed (no /proc, no ps): still ours
            for pid in victims:
                try:  # noqa: SIM105 - contextlib would cost ~2 ms of the launcher's start
                    os.kill(pid, _signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            self.reap()
            if (not victims and self.status is not None) or time.monotonic() >= deadline:
                return
            poller.poll(10)
            self.drain_wake()

    def run(self) -> int:
        """Wait for the lifeline's EOF, a SIGUSR1 or PROGRAM's exit; end the tree; return
        PROGRAM's wait status (or a synthetic SIGKILL one if it could not be reaped)."""
        poller = select.poll()
        assert self.lifeline is not None
        poller.register(self.lifeline, select.POLLIN)
        poller.register(self.wake, select.POLLIN)
        while True:
            kill = False
            for fd, _ in poller.poll():
                if fd == self.wake:
                    signals = self.drain_wake()
                    kill = kill or _signal.SIGUSR1 in signals
                    self.reap()
                    for signum in _FORWARDED:
                        if signum in signals and self.status is None:
                            try:  # noqa: SIM105 - see kill_tree
                                os.killpg(self.program, signum)
                            except (ProcessLookupError, PermissionError):
                                pass
                elif fd == self.lifeline:
                    try:
                        data = os.read(fd, 64)
                    except OSError:
                        data = b""
                    if not data:  # the host is gone or asked for the end
                        poller.unregister(fd)
                        kill = True
            self.reap()
            if kill or self.status is not None:
                self.kill_tree()
                return _signal.SIGKILL if self.status is None else self.status


def _exit_like(status: int) -> None:
    if os.WIFEXITED(status):
        os._exit(os.WEXITSTATUS(status))
    signum = os.WTERMSIG(status) if os.WIFSIGNALED(status) else _signal.SIGKILL
    if signum in _CORE:
        os._exit(128 + signum)
    _signal.set_wakeup_fd(-1)
    if signum != _signal.SIGKILL:
        _signal.signal(signum, _signal.SIG_DFL)
    _signal.pthread_sigmask(_signal.SIG_UNBLOCK, [signum])
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)  # the signal did not end us (it cannot be default-fatal here)


def main(argv: list[str]) -> None:
    lifeline, status_fd, program = int(argv[0]), int(argv[1]), argv[2:]
    os.set_inheritable(lifeline, False)  # PROGRAM gets neither
    os.set_inheritable(status_fd, False)
    _set_subreaper()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    _signal.set_wakeup_fd(wake_w)
    for signum in _SIGNALS:
        _signal.signal(signum, _noop)
    try:
        pid = os.posix_spawnp(program[0], program, os.environ, setsid=True,
                              setsigdef=_DEFAULTS)
    except OSError as exc:
        os.write(status_fd, b"E%d\n" % (exc.errno or 0))
        os._exit(127)
    os.write(status_fd, b"P%d\n" % pid)
    os.close(status_fd)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    _exit_like(_Launcher(lifeline, pid, wake_r).run())


if __name__ == "__main__":
    main(sys.argv[1:])
