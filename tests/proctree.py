"""What is left of a CLI's process tree, read from /proc (Linux): the tests of issue 32's
guarantees (a CLI and its tools end with their agent, their host, their node).

A test marks the tree it wants to watch with an environment variable of its own (`mark()`),
passed to the CLI in the backend's `env`: the CLI, the launcher and every tool they start
inherit it. `marked(token)` lists the live processes carrying it; `SessionSampler` records,
from a background thread, the most live CLI processes seen at once on the marked conversation
(a test marks one conversation: every CLI carrying its mark runs it, whatever its argv says;
a first CLI has no `--resume` yet, its successor has).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

VAR = "GA_TREE_MARK"


def mark() -> tuple[str, dict[str, str]]:
    """A fresh token and the `env` entry that carries it."""
    token = uuid.uuid4().hex
    return token, {VAR: token}


def _stat(pid: str) -> list[str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()


def _parent(pid: int) -> str:
    fields = _stat(str(pid))
    return "?" if fields is None else fields[1]


def marked(token: str) -> list[tuple[int, str]]:
    """`(pid, command line)` of every live (non-zombie) process whose environment holds
    `GA_TREE_MARK=token`."""
    needle = f"{VAR}={token}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if needle not in environ.split(b"\0"):
            continue
        fields = _stat(entry)
        if fields is None or fields[0] in ("Z", "X"):
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        found.append((int(entry), cmdline.replace(b"\0", b" ").decode(errors="replace")))
    return found


def wait_gone(token: str, timeout: float) -> list[tuple[int, str]]:
    """Wait up to `timeout` seconds until no process carries `token`; what is left."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while (left := marked(token)) and time.monotonic() < deadline:
        pause.wait(0.05)
    return left


def kill_marked(token: str) -> None:
    """SIGKILL what carries `token` (a failed test's leftovers; only this test's own)."""
    for pid, _ in marked(token):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)


class SessionSampler:
    """Samples, every `interval_s`, the live processes carrying `token` that `is_cli(cmdline)`
    picks: `most` is the most seen at once (and `worst` their command lines), `samples` the
    number of samples taken. A process whose parent is one of them is not another CLI: a fork
    of the CLI about to exec a tool (its command line is the CLI's until the exec)."""

    def __init__(self, token: str, is_cli: Callable[[str], bool],
                 interval_s: float = 0.02) -> None:
        self.token = token
        self.is_cli = is_cli
        self.interval_s = interval_s
        self.most = 0
        self.worst: list[str] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> SessionSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def current(self) -> dict[int, str]:
        """{pid: command line} of the live CLI processes on the conversation, now."""
        clis = {pid: cmd for pid, cmd in marked(self.token) if self.is_cli(cmd)}
        forks = [pid for pid in clis if _parent(pid) in {str(p) for p in clis}]
        for pid in forks:
            del clis[pid]
        return clis

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            clis = self.current()
            if len(clis) > self.most:
                self.most = len(clis)
                self.worst = [f"{pid} (parent {_parent(pid)}) {cmd[:100]}"
                              for pid, cmd in clis.items()]
            self.samples += 1
