"""Finding and ending what CLIs left behind: every CLI the package starts carries its owner's
mark in its environment (`OWNER_ENV`, inherited by its tools), so a later owner (a restarted
agent, a Ray node's next incarnation) can end what a dead one left before it resumes.

A leaf below every layer: the runtime's durability and the backends' process code both use it.
Linux only (`/proc`); elsewhere finding returns nothing and reaping is a no-op.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from typing import Final

from loguru import logger

OWNER_ENV: Final = "GEN_AGENT_OWNER"
"""Set in every CLI's environment (inherited by its tools): `<pid>:<start ticks>` of the
process that started it, so a later owner can find what a dead one left (`reap_marked`)."""

LAUNCHER: Final = os.path.join(os.path.dirname(os.path.abspath(__file__)), "backends",
                               "_subprocess", "_launcher.py")
"""The launcher every CLI starts under (its path, as it appears in the launcher's argv)."""


def descendants(root: int) -> list[int]:
    """Every live process below `root` (Linux `/proc`; [] elsewhere)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
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
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


_MARKERS: dict[str, str] = {}


def set_child_marker(name: str, value: str | None) -> None:
    """Put `name=value` in the environment of every CLI started from now on (whatever its
    `env` and `inherit_env`), or stop doing so (`value` None): how a Ray node marks its CLIs
    so that its next incarnation finds them (`reap_marked`)."""
    if value is None:
        _MARKERS.pop(name, None)
    else:
        _MARKERS[name] = value


def owned_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """The child's environment with `OWNER_ENV` naming this process, and the markers."""
    owned = dict(os.environ if env is None else env)
    owned.update(_MARKERS)
    owned[OWNER_ENV] = _OWNER
    return owned


def owner_marker(pid: int, started_ticks: int) -> bytes:
    """The `OWNER_ENV` entry (as in `/proc/PID/environ`) of the CLIs a process started."""
    return f"{OWNER_ENV}={pid}:{started_ticks}".encode()


def marked(matches: Callable[[list[bytes]], bool]) -> list[int]:
    """The live (non-zombie) processes, other than this one, whose environment entries
    `matches` accepts (Linux `/proc`; only processes we may read)."""
    found: list[int] = []
    me = os.getpid()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as file:
                environ = file.read().split(b"\0")
            with open(f"/proc/{entry}/stat", "rb") as file:
                stat = file.read()
        except OSError:
            continue
        if stat[stat.rindex(b")") + 2:][:1] in (b"Z", b"X") or not matches(environ):
            continue
        found.append(int(entry))
    return found


def is_launcher(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            return LAUNCHER.encode() in file.read()
    except OSError:
        return False


def reap_marked(matches: Callable[[list[bytes]], bool], *, timeout: float) -> int:
    """End every process whose environment `matches` accepts (e.g. holds `owner_marker` of a
    dead owner) and wait up to `timeout` seconds until none is left.

    Launchers get SIGUSR1 first (each kills its whole tree, tools whose environment was
    scrubbed included) and up to a second to do it; then whatever still matches is
    SIGKILLed. Linux only (`/proc`); elsewhere a no-op.

    Returns:
        How many matching processes there were.
    """
    found = marked(matches)
    if not found:
        return 0
    deadline = time.monotonic() + timeout
    for pid in found:
        if is_launcher(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGUSR1)
    pause = threading.Event()
    launchers_deadline = min(deadline, time.monotonic() + 1.0)
    while time.monotonic() < launchers_deadline and any(is_launcher(p) for p in
                                                        marked(matches)):
        pause.wait(0.02)
    while left := marked(matches):
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() >= deadline:
            logger.warning("gen_agent: {} marked processes outlived the reap", len(left))
            break
        pause.wait(0.02)
    return len(found)


def start_ticks(pid: int) -> int:
    """A process's start time (clock ticks since boot, `/proc/PID/stat` field 22); 0 when
    unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read()
        return int(stat[stat.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return 0


_OWNER = f"{os.getpid()}:{start_ticks(os.getpid())}"


def _reset_owner() -> None:
    global _OWNER
    _OWNER = f"{os.getpid()}:{start_ticks(os.getpid())}"


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_owner)
