"""Fixtures for the backend tests: scripted fake `claude` and `codex` CLIs, a loopback model
server, a pass-through agent, turn helpers, leak checks."""

from __future__ import annotations

import json
import os
import shlex
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _agents import PassThrough

from gen_agent._event import Event
from gen_agent._response import Response
from gen_agent.backend import BackendError, TurnContext
from gen_agent.backends._subprocess import process as _process
from gen_agent.testing._model_server import ScriptedModelServer

FAKES = Path(__file__).resolve().parent.parent / "fakes"
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "claude-cli"


class FakeCLI:
    """A fake CLI executable (a wrapper around a script in tests/fakes) and the directory
    through which a test scripts it and reads what it was called with."""

    NAME = ""
    SCRIPT = ""
    DIR_VAR = ""

    def __init__(self, root: Path) -> None:
        self.dir = root / f"fake-{self.NAME}"
        self.dir.mkdir()
        self.cli = root / "bin" / self.NAME
        self.cli.parent.mkdir()
        fake = FAKES / self.SCRIPT
        self.cli.write_text(
            f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(fake))} "$@"\n'
        )
        self.cli.chmod(0o755)
        self.script("echo")

    def script(self, *scenarios: str) -> None:
        """Set the scenarios invocations play, in order (the last one repeats)."""
        (self.dir / "scenarios").write_text("\n".join(scenarios) + "\n")

    def options(self, **extra: Any) -> dict[str, Any]:
        """Backend options that run this fake (merge `extra` over them)."""
        env = {self.DIR_VAR: str(self.dir), "PATH": os.environ.get("PATH", "")}
        env.update(extra.pop("env", {}))
        return {"cli_path": str(self.cli), "env": env, "inherit_env": False, **extra}

    def calls(self) -> list[dict[str, Any]]:
        """What every invocation so far was called with: `argv`, `pid`, `pgid`, `cwd` and
        the environment (`env_keys` for claude, `env` for codex)."""
        path = self.dir / "calls.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line]

    def helper_pid(self) -> int:
        """The pid of the helper process the `slow` scenario started."""
        return int((self.dir / "helper.pid").read_text())


class FakeClaude(FakeCLI):
    """A fake `claude` (tests/fakes/fake_claude.py). It plays per-turn invocations (print
    mode), so its options pin `mode="per_turn"`; warm mode is tested on the real CLI."""

    NAME, SCRIPT, DIR_VAR = "claude", "fake_claude.py", "FAKE_CLAUDE_DIR"

    def options(self, **extra: Any) -> dict[str, Any]:
        return super().options(**{"mode": "per_turn", **extra})


class FakeCodex(FakeCLI):
    """A fake `codex` (tests/fakes/codex_fake.py)."""

    NAME, SCRIPT, DIR_VAR = "codex", "codex_fake.py", "FAKE_CODEX_DIR"


@pytest.fixture
def fake_claude(tmp_path: Path) -> FakeClaude:
    """A fresh fake `claude` CLI; script it with `.script(...)`, run it with `.options()`."""
    return FakeClaude(tmp_path)


@pytest.fixture
def fake_codex(tmp_path: Path) -> FakeCodex:
    """A fresh fake `codex` CLI; script it with `.script(...)`, run it with `.options()`."""
    return FakeCodex(tmp_path)


@pytest.fixture
def server() -> Iterator[ScriptedModelServer]:
    """A running `ScriptedModelServer` on 127.0.0.1, stopped after the test."""
    with ScriptedModelServer() as running:
        yield running


Agent = PassThrough
"""The backend tests' agent: its `backend_opts` start option goes to the backend as is."""


@pytest.fixture
def schema_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where this test's temporary files (e.g. Codex `--output-schema` files) are made."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.fixture
def no_child_left() -> Iterator[None]:
    """Every child process a test started is reaped (and its helper threads ended) by the
    end of the test, within a bounded wait."""
    yield
    assert _process.wait_all_reaped(15.0), f"children left: {_process.live_children()}"


class TurnRecorder:
    """A hand-built `TurnContext` for backend-level tests, recording checkpoints."""

    def __init__(self, checkpoint: Callable[[str], None] | None = None) -> None:
        self.checkpoints: list[str] = []
        self.cancel_event = threading.Event()
        self._checkpoint = checkpoint

        def record(session_id: str) -> None:
            self.checkpoints.append(session_id)
            if self._checkpoint is not None:
                self._checkpoint(session_id)

        self.context = TurnContext(
            agent="test-agent",
            ref="test-ref",
            attempt=1,
            cancel_event=self.cancel_event,
            checkpoint=record,
        )


def run_turn(backend: Any, session: Any, prompt: str, recorder: TurnRecorder | None = None):
    """Run one turn the way the runtime does: read up to the first terminal event, close the
    stream, then apply the checkpoint and (after a result) `update_session`.

    Returns:
        `(events, session, recorder)`.
    """
    recorder = recorder or TurnRecorder()
    stream, session = backend.prompt(session, prompt, recorder.context)
    events: list[Event] = []
    try:
        for event in stream:
            events.append(event)
            if event.is_terminal:
                break
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()
    if recorder.checkpoints:
        session = backend.checkpoint_session(session, recorder.checkpoints[0])
    if events and events[-1].kind == "result":
        session = backend.update_session(session, events[-1].data)
    return events, session, recorder


def kinds(events: list[Event]) -> list[str]:
    """The kinds of `events`, in order."""
    return [event.kind for event in events]


def response_of(events: list[Event]) -> Response:
    """The `Response` of a turn's events, with the session id its terminal event reports."""
    return Response.from_events(events, session_id=events[-1].data.get("session_id"))


def reason_of(events: list[Event]) -> BackendError:
    """The `BackendError` reason of a turn that ended with a terminal `error` event."""
    assert events[-1].kind == "error"
    reason = events[-1].data["reason"]
    assert isinstance(reason, BackendError)
    return reason


def read_in_thread(stream: Any) -> tuple[threading.Thread, list[Event]]:
    """Start a thread that reads `stream` to its end; returns it and the list it fills."""
    out: list[Event] = []
    reader = threading.Thread(target=lambda: out.extend(stream))
    reader.start()
    return reader, out


def process_group_alive(pgid: int) -> bool:
    """True if some live (non-zombie) process is in process group `pgid` (reads /proc)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def pid_alive(pid: int) -> bool:
    """True if `pid` is a live (non-zombie) process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :].split()[0] != "Z"


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Re-check `condition` until it holds or `timeout` seconds pass (bounded)."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not condition():
        if time.monotonic() >= deadline:
            return False
        pause.wait(0.02)
    return True
