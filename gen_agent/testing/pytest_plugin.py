"""The gen_agent pytest plugin: fixtures for actor-based tests.

Installed with the package as the `pytest11` entry point `gen_agent`, so the fixtures are
available in any test suite once gen_agent is installed (disable with `-p no:gen_agent`).

Fixtures:

- `agent_system`: an isolated `AgentSystem`, entered for the test (the module-level client
  functions address it). At teardown every supervisor and agent of it is stopped, then every
  thread the test started must end and, where `/proc` exists, every child process the test
  started must exit, within `gen_agent_leak_timeout` seconds; otherwise the test errors with
  the names / pids left behind.
- `mock_backend`: a `MockScripts` (build `MockBackend` scripts, read the prompt history).
- `telemetry_recorder`: a `TelemetryRecorder` attached to every gen_agent event for the test.
- `scripted_model_server`: a session-wide `ScriptedModelServer` on 127.0.0.1 (skipped where
  `gen_agent.testing._model_server` is not available). Enqueue what your test needs.

ini options: `gen_agent_leak_timeout` (seconds, default 10), `gen_agent_leak_check`
(bool, default true).

See `docs/pages/testing.md`.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from gen_agent._supervisor import _stop_all
from gen_agent._system import AgentSystem
from gen_agent.telemetry import TelemetryRecorder
from gen_agent.testing._helpers import MockScripts, child_processes, find_leaks

__all__ = [
    "agent_system",
    "mock_backend",
    "pytest_addoption",
    "pytest_configure",
    "scripted_model_server",
    "telemetry_recorder",
]

_DEFAULT_LEAK_TIMEOUT_S = "10"


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the plugin's ini options."""
    parser.addini("gen_agent_leak_timeout",
                  "seconds the agent_system fixture waits at teardown for threads and child "
                  "processes started by the test to end (default 10)",
                  default=_DEFAULT_LEAK_TIMEOUT_S)
    parser.addini("gen_agent_leak_check",
                  "whether the agent_system fixture fails a test that leaves threads or "
                  "child processes behind (default true)", type="bool", default=True)


def pytest_configure(config: pytest.Config) -> None:
    """Validate the ini options once, so a bad value is a usage error of the run."""
    _leak_timeout(config)


def _leak_timeout(config: pytest.Config) -> float:
    raw = config.getini("gen_agent_leak_timeout")
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise pytest.UsageError(
            f"gen_agent_leak_timeout must be a number of seconds, got {raw!r}") from None
    if value < 0:
        raise pytest.UsageError(f"gen_agent_leak_timeout must be >= 0, got {raw!r}")
    return value


@pytest.fixture
def agent_system(request: pytest.FixtureRequest) -> Iterator[AgentSystem]:
    """An isolated `AgentSystem` for one test, checked for leaks at teardown."""
    check = bool(request.config.getini("gen_agent_leak_check"))
    timeout = _leak_timeout(request.config)
    threads_before = set(threading.enumerate())
    children_before = child_processes()
    with AgentSystem() as system:
        try:
            yield system
        finally:
            _stop_all(system)
    if not check:
        return
    report = find_leaks(threads_before, children_before, timeout)
    if report:
        pytest.fail(f"gen_agent leak check: {report.describe()}", pytrace=False)


@pytest.fixture
def mock_backend() -> MockScripts:
    """Shortcuts to build `MockBackend` scripts (`text`, `gate`, `error`, `echo`, ...)."""
    return MockScripts()


@pytest.fixture
def telemetry_recorder() -> Iterator[TelemetryRecorder]:
    """A `TelemetryRecorder` of every gen_agent event, attached for the test."""
    with TelemetryRecorder() as recorder:
        yield recorder


@pytest.fixture(scope="session")
def _scripted_model_server_session() -> Iterator[Any]:
    if importlib.util.find_spec("gen_agent.testing._model_server") is None:
        pytest.skip("gen_agent.testing._model_server is not available")
    from gen_agent.testing._model_server import ScriptedModelServer

    with ScriptedModelServer() as server:
        yield server


@pytest.fixture
def scripted_model_server(_scripted_model_server_session: Any) -> Iterator[Any]:
    """A `ScriptedModelServer` on 127.0.0.1: one server (one port) for the whole session,
    `reset()` before every test, so no reply, request or default is left over from another."""
    server = _scripted_model_server_session
    server.reset()
    yield server
    server.reset()
