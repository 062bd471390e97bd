"""What the fake CLIs (fake_claude.py, codex_fake.py) share: byte-exact writes, the scenario
runner, and the scenarios whose behaviour does not depend on the CLI's line format.

A fake is run as a script, so this module is imported from the script's own folder. Only the
standard library; never imports gen_agent.

Every fake is configured by a directory named in an environment variable:

- `scenarios`: one scenario name per line; invocation N (0-based) plays line N (the last line
  repeats when there are more invocations than lines);
- `calls.jsonl`: appended by every invocation: `{"argv", "pid", "pgid", ..., "cwd"}`;
- `helper.pid`: written by the `slow` scenarios (the pid of a helper they started; `slow_tool`
  starts it in a session of its own).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn

OUT = 1
ERR = 2

Scenario = Callable[[list[str]], None]


def write(data: bytes, fd: int = OUT) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def line(obj: object) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode() + b"\n"


def pause() -> None:
    # Gives the reader a chance to consume what was written, so the next write lands in a
    # separate read (the exact split is also covered by LineBuffer's own tests).
    time.sleep(0.05)


def hang() -> NoReturn:
    while True:
        time.sleep(3600)


def plain_then_exit(argv: list[str]) -> None:
    """A CLI that cannot start: plain text (not JSON) on stdout, then exit 1."""
    write("Invalid API key · Please run /login\n(no result follows)\n".encode())
    sys.exit(1)


def ignoring_term(scenario: Scenario) -> Scenario:
    """`scenario`, with SIGTERM ignored (only SIGKILL ends it)."""

    def play(argv: list[str]) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        scenario(argv)

    return play


def flooding_stderr(scenario: Scenario, size_var: str) -> Scenario:
    """`scenario`, after writing `$size_var` bytes (default 200 KiB) and a marker to stderr."""

    def play(argv: list[str]) -> None:
        size = int(os.environ.get(size_var, str(200 * 1024)))
        chunk = b"e" * 1023 + b"\n"
        written = 0
        while written < size:
            write(chunk, ERR)
            written += len(chunk)
        write(b"END-OF-STDERR\n", ERR)
        scenario(argv)

    return play


def start_helper(dir_var: str, *, own_session: bool = False) -> None:
    """Start a long `sleep` and record its pid in `helper.pid`: in our process group, or
    (`own_session`) in a session of its own, as the real Claude Code Bash tool runs commands,
    out of reach of a kill of our group."""
    helper = subprocess.Popen(["sleep", "1000"], start_new_session=own_session)
    with open(os.path.join(os.environ[dir_var], "helper.pid"), "w") as f:
        f.write(str(helper.pid))


def run(scenarios: dict[str, Scenario], dir_var: str, record: Callable[[], dict[str, Any]]) -> None:
    """Record this invocation in `calls.jsonl` (with `record()`'s fields) and play the
    scenario its index names."""
    argv = sys.argv[1:]
    directory = os.environ[dir_var]
    with open(os.path.join(directory, "scenarios")) as f:
        names = [s.strip() for s in f if s.strip()]
    with open(os.path.join(directory, "calls.jsonl"), "a+") as f:
        f.seek(0)
        index = sum(1 for _ in f)
        call = {"argv": argv, "pid": os.getpid(), "pgid": os.getpgid(0), **record()}
        f.write(json.dumps({**call, "cwd": os.getcwd()}) + "\n")
    scenarios[names[min(index, len(names) - 1)]](argv)
