"""The watcher `init_local` starts beside a local Ray: it ends that Ray when its owner is gone.

Run as a script, never imported by the owner: ``python -I -S _watch.py LIFELINE_FD MARKER
FOLDER`` (standard library only). LIFELINE_FD is the read end of a pipe whose write end only
the owner holds. At its EOF (the owner called `shutdown_local`, or its process died, even
SIGKILLed) the watcher sends SIGTERM to every process whose environment holds MARKER (the
`GEN_AGENT_RAY_OWNER=<pid>:<start ticks>` entry Ray's processes inherited from `init_local`),
SIGKILL to those left after `_TERM_S`, waits until none is left (at most `_KILL_S` more), then
removes FOLDER (Ray's session folder) and exits. Linux (`/proc`); elsewhere it only removes the
folder.
"""

from __future__ import annotations

import os
import select
import sys
import time

_TERM_S = 2.0  # how long Ray's processes get to exit after SIGTERM
_KILL_S = 5.0  # how long the watcher waits for them after SIGKILL


def marked(marker: bytes) -> list[int]:
    """The live (non-zombie) processes, other than this one, whose environment holds
    `marker`."""
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
        if marker in environ and stat[stat.rindex(b")") + 2:][:1] not in (b"Z", b"X"):
            found.append(int(entry))
    return found


def end(marker: bytes) -> None:
    """SIGTERM, then SIGKILL, every marked process; bounded."""
    for signum, wait_s in ((15, _TERM_S), (9, _KILL_S)):
        deadline = time.monotonic() + wait_s
        for pid in marked(marker):
            try:  # noqa: SIM105 - contextlib would slow the watcher's start
                os.kill(pid, signum)
            except (ProcessLookupError, PermissionError):
                pass
        while marked(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not marked(marker):
            return


def main(argv: list[str]) -> None:
    lifeline, marker, folder = int(argv[0]), argv[1].encode(), argv[2]
    os.set_inheritable(lifeline, False)
    poller = select.poll()
    poller.register(lifeline, select.POLLIN)
    while True:
        poller.poll()
        try:
            if os.read(lifeline, 64):
                continue
        except OSError:
            pass
        break
    end(marker)
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
