"""Who owns a session key: owner identity (pid, host, boot id, process start time) and the
liveness rules that let a dead owner's lease be taken over at once.

A lease of this process is judged from `_LIVE_TOKENS` (released, or tied by `bind_owner` to
an agent that was closed); one of another process on this host by the OS (`kill(pid, 0)`, not a
zombie, same start time, same boot); one of another host by its heartbeat's age.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Callable

from gen_agent.store._records import Lease

__all__ = ["bind_owner", "forget_token", "holder_alive", "new_lease", "taken_from"]


# -- owner identity and liveness ----------------------------------------------------------

# Tokens of leases held by this process, each with an optional liveness check (an agent's
# "not closed"), so a lease of our own pid is judged without asking the OS: a released lease
# or one whose agent was killed is free at once.
_LIVE_TOKENS: dict[str, Callable[[], bool] | None] = {}
_LIVE_LOCK = threading.Lock()


def bind_owner(lease: Lease, alive: Callable[[], bool]) -> None:
    """Tie `lease` (taken by this process) to `alive()`: once it returns False the lease is
    free for another owner in this process, without a release (a killed agent runs no
    cleanup). Called by the runtime right after `acquire`."""
    with _LIVE_LOCK:
        if lease.token in _LIVE_TOKENS:
            _LIVE_TOKENS[lease.token] = alive


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as file:
            return file.read().strip()
    except OSError:
        return ""


def _stat_fields(pid: int) -> list[str] | None:
    raw = _read(f"/proc/{pid}/stat")
    if not raw or ")" not in raw:
        return None
    return raw[raw.rindex(")") + 2:].split()  # fields from 3 (state) on


def _start_ticks(pid: int) -> int:
    fields = _stat_fields(pid)
    try:
        return int(fields[19]) if fields is not None else 0  # field 22, starttime
    except (IndexError, ValueError):
        return 0


_BOOT_ID = _read("/proc/sys/kernel/random/boot_id")
_HOST = socket.gethostname()


def _pid_alive(pid: int, started_ticks: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by another user
    fields = _stat_fields(pid)
    if fields is None:
        return True  # no /proc: trust kill(0)
    if fields[0] in ("Z", "X"):
        return False  # a zombie: dead, not yet reaped
    return not (started_ticks and _start_ticks(pid) not in (0, started_ticks))


def holder_alive(holder: Lease, ttl_s: float, now: float) -> bool:
    if holder.host != _HOST or holder.boot_id != _BOOT_ID:
        if holder.host == _HOST and holder.boot_id and _BOOT_ID:
            return False  # same machine, rebooted since: the owner is gone
        return now - holder.heartbeat_at < ttl_s
    if holder.pid == os.getpid():
        with _LIVE_LOCK:
            if holder.token not in _LIVE_TOKENS:
                return False
            alive = _LIVE_TOKENS[holder.token]
        return alive is None or bool(alive())
    return _pid_alive(holder.pid, holder.started_ticks)


# Leases of this process taken over from a dead owner: token -> that owner's lease, so the
# runtime can end what the dead owner left running before it resumes (`taken_from`).
_TAKEN_FROM: dict[str, Lease] = {}


def taken_from(lease: Lease) -> Lease | None:
    """The dead owner's lease that `lease` (just acquired by this process) replaced, or None
    (a free key); asked once."""
    with _LIVE_LOCK:
        return _TAKEN_FROM.pop(lease.token, None)


def new_lease(key: str, now: float, previous: Lease | None = None) -> Lease:
    token = uuid.uuid4().hex
    with _LIVE_LOCK:
        _LIVE_TOKENS[token] = None
        if previous is not None:
            _TAKEN_FROM[token] = previous
    return Lease(key=key, token=token, pid=os.getpid(), host=_HOST, boot_id=_BOOT_ID,
                 started_ticks=_start_ticks(os.getpid()), heartbeat_at=now, acquired_at=now)


def forget_token(token: str) -> None:
    with _LIVE_LOCK:
        _LIVE_TOKENS.pop(token, None)
        _TAKEN_FROM.pop(token, None)
