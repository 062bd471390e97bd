"""The Workspace recipe (docs/examples/workspace.py, contract §10); needs `git`."""

from __future__ import annotations

import os
import queue
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

import gen_agent
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.testing import wait_for_state

from ._loader import load_example

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

workspace = load_example("workspace")


def _paragraph(prompt: str) -> list:
    return mock.text_turn(workspace.fake_model(prompt))


def _start(root: Path, *scripts, backend=MockBackend, **opts) -> tuple[Any, queue.Queue]:
    reports: queue.Queue = queue.Queue()
    ref = gen_agent.start_agent(workspace.WorkspaceWriter, name="ws", backend=backend,
                                backend_opts={"scripts": list(scripts)}, root=str(root),
                                topic="actors", report_to=reports, **opts)
    return ref, reports


def _log(path: str) -> list[str]:
    return workspace.git(path, "log", "--format=%H %s", timeout_s=10).splitlines()


def test_it_writes_commits_and_finishes_with_hooks_in_order(tmp_path, capsys) -> None:
    trace: list[str] = []

    class TracingMock(MockBackend):
        @classmethod
        def start_session(cls, opts):
            trace.append("start_session")
            return super().start_session(opts)

        @classmethod
        def prompt(cls, session, prompt, context=None):
            trace.append("backend")
            return super().prompt(session, prompt, context)

    ref, reports = _start(tmp_path, _paragraph, _paragraph, backend=TracingMock,
                          workspace_id="book-1", paragraphs=2, trace=trace.append)
    gen_agent.tell("ws", workspace.NEXT)
    summary = reports.get(timeout=10)
    book = gen_agent.status("ws").agent_state
    ref.stop()

    path = str(tmp_path / "book-1")
    assert summary == {"phase": "finished", "path": path, "commits": 2, "failure": None}
    assert [sha for _, sha in book.written] == [line.split()[0] for line in _log(path)][::-1]
    assert [line.split(" ", 1)[1] for line in _log(path)] == ["Paragraph 2", "Paragraph 1"]
    assert (tmp_path / "book-1" / "paragraph-2.md").read_text() == (
        "Paragraph 2: agents keep their state between turns.\n")
    turn = ["pre_turn", "backend", "handle_response", "post_turn"]
    assert trace == ["init_agent", "start_session", "pre_run", *turn, *turn, "pre_turn",
                     "post_run", "terminate_agent"]
    assert "Wrote 2 paragraphs in" in capsys.readouterr().out


def test_pre_turn_grounds_the_generic_prompt(tmp_path) -> None:
    _, reports = _start(tmp_path, _paragraph, _paragraph, paragraphs=2)
    gen_agent.tell("ws", workspace.NEXT)
    reports.get(timeout=10)
    first, second = MockBackend.history("ws")
    assert first == "We are writing 2 short paragraphs about actors. Write paragraph 1."
    assert second.startswith("We are writing 2 short paragraphs about actors. Write paragraph"
                             " 2. The previous one was:\nParagraph 1: agents")


def test_an_invalid_workspace_id_refuses_the_start(tmp_path) -> None:
    for bad in ("Upper", "has space", "x" * 64, ""):
        with pytest.raises(gen_agent.AgentStartError) as refused:
            _start(tmp_path, workspace_id=bad or 7)
        assert refused.value.reason == ("init_agent_failed",
                                        ("invalid_workspace_id", bad or 7))
    assert list(tmp_path.iterdir()) == []
    _start(tmp_path, workspace_id="a" * 63)[0].stop()              # 63 characters is fine


def test_an_existing_directory_is_refused_and_left_alone(tmp_path) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    ref, _ = _start(tmp_path, workspace_id="taken")
    assert ref.wait_stopped(5)
    assert ref.exit_reason == ("pre_run_failed", ("workspace_exists", str(tmp_path / "taken")))
    assert os.listdir(tmp_path / "taken") == ["keep.txt"]


def test_a_failed_setup_removes_the_partial_workspace(tmp_path) -> None:
    ref, _ = _start(tmp_path, workspace_id="slow", git_timeout_s=1e-6)
    assert ref.wait_stopped(5)
    assert ref.exit_reason == ("pre_run_failed", ("workspace_setup_failed", "TimeoutExpired"))
    assert not (tmp_path / "slow").exists()


def test_handle_error_halts_failed_and_post_run_claims_no_success(tmp_path, capsys) -> None:
    _, reports = _start(tmp_path, _paragraph, mock.error_turn("model_down"), paragraphs=3,
                        workspace_id="w")
    gen_agent.tell("ws", workspace.NEXT)
    assert reports.get(timeout=10) == {"phase": "failed", "path": str(tmp_path / "w"),
                                       "commits": 1, "failure": "model_down"}
    assert "Stopped (failed) after 1 commits" in capsys.readouterr().out


def test_a_commit_failure_is_recorded_then_halts(tmp_path) -> None:
    held = mock.gate(mock.text_turn("Paragraph 1."))
    _, reports = _start(tmp_path, held, _paragraph, workspace_id="w")
    gen_agent.tell("ws", workspace.NEXT)
    held.wait_blocked(5)
    shutil.rmtree(tmp_path / "w" / ".git")                        # commits now fail
    held.release()
    summary = reports.get(timeout=10)
    assert summary["phase"] == "failed" and summary["commits"] == 0
    assert summary["failure"] == ("commit_failed", 1, "CalledProcessError")
    assert len(MockBackend.history("ws")) == 1                     # halted before turn 2


def test_an_unexpected_commit_log_fails_the_check(tmp_path) -> None:
    held = mock.gate(mock.text_turn("Paragraph 2."))
    _, reports = _start(tmp_path, _paragraph, held, paragraphs=2, workspace_id="w")
    gen_agent.tell("ws", workspace.NEXT)
    held.wait_blocked(5)
    path = str(tmp_path / "w")
    workspace.git(path, "commit", "-q", "--allow-empty", "-m", "intruder", timeout_s=10)
    held.release()
    summary = reports.get(timeout=10)
    assert summary["phase"] == "failed" and summary["failure"] == ("commit_log", 3)


def test_main_runs_on_the_mock_backend(capsys) -> None:
    workspace.main([])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("Wrote 3 paragraphs in ") and out[0].endswith("/demo")
    assert [line.split(" ", 1)[1] for line in out[1:]] == [
        "Paragraph 3", "Paragraph 2", "Paragraph 1"]


def test_a_cli_backend_can_be_given_the_workspace_before_it_exists(tmp_path) -> None:
    from gen_agent.backends.claude import ClaudeCLI

    path = tmp_path / "ws-cli"
    ref = gen_agent.start_agent(
        workspace.WorkspaceWriter, name="ws", backend=ClaudeCLI, root=str(tmp_path),
        topic="actors", workspace_id="ws-cli",
        backend_opts={"cli_path": sys.executable, "cwd": str(path)})
    wait_for_state("ws", lambda s: True)              # pre_run has run before any call
    assert path.is_dir() and (path / ".git").is_dir()
    ref.stop()
