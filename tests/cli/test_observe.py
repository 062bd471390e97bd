"""`gen-agent observe`: the demo's agents under the observer's web view."""

from __future__ import annotations

import json
import urllib.request

import pytest
from typer.testing import CliRunner

import gen_agent
from gen_agent.cli._app import app
from gen_agent.cli._demo import DemoOptions, run_demo

pytest.importorskip("starlette", reason="the observer extra is not installed: "
                                        "pip install 'gen-agent[observer]'")
from gen_agent import observer

runner = CliRunner()


def test_observe_runs_the_demo_under_an_observer_and_stops_cleanly() -> None:
    result = runner.invoke(app, ["observe", "--fast", "--rounds", "1", "--port", "0",
                                 "--pause", "0"])
    assert result.exit_code == 0, result.output
    assert "open http://127.0.0.1:" in result.output and "/?token=" in result.output
    assert "round 1: 8 tasks, as scripted" in result.output


def test_observe_refuses_a_remote_host_without_allow_remote() -> None:
    result = runner.invoke(app, ["observe", "--host", "0.0.0.0", "--rounds", "1"])
    assert result.exit_code == 2
    assert "allow_remote" in result.output


def test_the_demo_agents_show_up_in_the_observer(agent_system: gen_agent.AgentSystem) -> None:
    with observer.serve(system=agent_system) as obs:
        report = run_demo(DemoOptions(fast=True, timeout=60), system=agent_system)
        assert report.problems() == []
        with urllib.request.urlopen(obs.base_url + "/api/state", timeout=10) as answer:
            view = json.load(answer)
    workers = {t["agent"] for t in view["turns"]}
    assert workers == {"demo-0", "demo-1", "demo-2"}
    assert {t["outcome"] for t in view["turns"]} >= {"ok", "backend_or_callback_error"}
    crashes = [e for e in view["events"] if e["event"] == "terminated"]
    assert "callback_failed:error:DemoCrash" in {e["detail"] for e in crashes}


def test_observe_without_the_web_stack_is_one_error_line(monkeypatch: pytest.MonkeyPatch) -> None:
    # As on an install without the observer extra: the web stack's import fails.
    def missing() -> None:
        raise ImportError("gen_agent.observer needs Starlette and uvicorn: "
                          "pip install 'gen-agent[observer]'")

    monkeypatch.setattr("gen_agent.observer._server._require_web_stack", missing)
    result = runner.invoke(app, ["observe", "--fast", "--rounds", "1", "--port", "0"])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        "error: gen_agent.observer needs Starlette and uvicorn: "
        "pip install 'gen-agent[observer]'"]
