"""The pytest plugin (gen_agent.testing.pytest_plugin), run inside pytester sessions.

Inner sessions run in this process; they reach objects of the outer test through a probe
module put in `sys.modules`, so a deliberately leaked thread or process can be ended here.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import types
from importlib.metadata import entry_points
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

PLUGIN = "gen_agent.testing.pytest_plugin"
# Plugins the inner sessions do without: the outer timeout must stay in force, and an inner
# session would re-import hypothesis each time (pytester forgets the modules a run imported).
NOT_NEEDED = ("timeout", "cacheprovider", "hypothesispytest", "anyio")


def plugin_args() -> list[str]:
    """Inner-run arguments: the plugin comes from its entry point when the package is
    installed with it (as `make test` does), else it is named explicitly."""
    installed = any(ep.value == PLUGIN for ep in entry_points(group="pytest11"))
    args = [arg for name in NOT_NEEDED for arg in ("-p", f"no:{name}")]
    return args if installed else [*args, "-p", PLUGIN]


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    module = types.ModuleType("gen_agent_plugin_probe")
    module.release = threading.Event()
    module.threads = []
    module.processes = []
    module.refs = []
    module.ports = []
    monkeypatch.setitem(sys.modules, "gen_agent_plugin_probe", module)
    yield module
    module.release.set()
    for thread in module.threads:
        thread.join(5)
    for process in module.processes:
        process.kill()
        process.wait(5)


def test_the_plugin_is_declared_as_a_pytest11_entry_point():
    text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert '[project.entry-points.pytest11]\ngen_agent = "gen_agent.testing.pytest_plugin"' in text


def test_fixtures_give_an_isolated_system_mock_scripts_and_telemetry(pytester, probe):
    pytester.makepyfile("""
        import gen_agent
        from gen_agent.telemetry import TURN_STOP
        from gen_agent.testing import ScriptedAgent

        def test_ask(agent_system, mock_backend, telemetry_recorder):
            assert gen_agent.current_system() is agent_system
            ref = gen_agent.start_agent(ScriptedAgent, name="a", backend=mock_backend.backend,
                                        **mock_backend.options(mock_backend.text("hi")))
            assert ref.ask("question", timeout=5).text == "hi"
            assert mock_backend.history("a") == ["question"]
            record = telemetry_recorder.wait_for(TURN_STOP, timeout=5)
            assert record.metadata["agent"] == "a"
            assert agent_system.list_agents() == ["a"]
    """)
    result = pytester.runpytest(*plugin_args())
    result.assert_outcomes(passed=1)


def test_agent_system_stops_agents_and_supervisors_left_running(pytester, probe):
    pytester.makepyfile("""
        import gen_agent
        import gen_agent_plugin_probe as probe
        from gen_agent._supervisor import Supervisor, child_spec
        from gen_agent.testing import ScriptedAgent

        def test_leaves_them_running(agent_system, mock_backend):
            probe.refs.append(gen_agent.start_agent(ScriptedAgent, name="loose",
                                                    backend=mock_backend.backend))
            sup = Supervisor([child_spec(ScriptedAgent, name="kept", restart="permanent",
                                         backend=mock_backend.backend)])
            probe.refs.append(sup)
            probe.refs.append(sup.whereis("kept"))
    """)
    result = pytester.runpytest(*plugin_args())
    result.assert_outcomes(passed=1)
    loose, sup, kept = probe.refs
    assert not loose.is_alive() and not kept.is_alive()
    assert sup.wait_stopped(0) and sup.exit_reason == "shutdown"


def test_a_thread_left_behind_fails_the_test_at_teardown(pytester, probe):
    pytester.makeini("[pytest]\ngen_agent_leak_timeout = 0.2\n")
    pytester.makepyfile("""
        import threading
        import gen_agent_plugin_probe as probe

        def test_leaks_a_thread(agent_system):
            thread = threading.Thread(target=probe.release.wait, args=(30,), name="leaky")
            thread.start()
            probe.threads.append(thread)
    """)
    result = pytester.runpytest(*plugin_args())
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*gen_agent leak check: threads left behind: [[]'leaky'[]]*"])


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="the process check needs /proc")
def test_a_child_process_left_behind_fails_the_test_at_teardown(pytester, probe):
    pytester.makeini("[pytest]\ngen_agent_leak_timeout = 0.2\n")
    pytester.makepyfile("""
        import subprocess, sys
        import gen_agent_plugin_probe as probe

        def test_leaks_a_process(agent_system):
            probe.processes.append(subprocess.Popen(
                [sys.executable, "-c", "import time; time.sleep(60)"]))
    """)
    result = pytester.runpytest(*plugin_args())
    result.assert_outcomes(passed=1, errors=1)
    (process,) = probe.processes
    result.stdout.fnmatch_lines([f"*child processes left behind: [[]{process.pid}[]]*"])


def test_a_child_process_reaped_in_the_test_is_no_leak(pytester, probe):
    pytester.makepyfile("""
        import subprocess, sys

        def test_runs_a_process(agent_system):
            subprocess.run([sys.executable, "-c", "pass"], check=True, timeout=30)
    """)
    pytester.runpytest(*plugin_args()).assert_outcomes(passed=1)


def test_the_leak_check_can_be_switched_off(pytester, probe):
    pytester.makeini("[pytest]\ngen_agent_leak_check = false\n")
    pytester.makepyfile("""
        import threading
        import gen_agent_plugin_probe as probe

        def test_leaks_a_thread(agent_system):
            thread = threading.Thread(target=probe.release.wait, args=(30,))
            thread.start()
            probe.threads.append(thread)
    """)
    pytester.runpytest(*plugin_args()).assert_outcomes(passed=1)


def test_a_bad_leak_timeout_is_a_usage_error(pytester, probe):
    pytester.makeini("[pytest]\ngen_agent_leak_timeout = soon\n")
    pytester.makepyfile("""
        def test_x(agent_system):
            pass
    """)
    result = pytester.runpytest(*plugin_args())
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*gen_agent_leak_timeout must be a number of seconds*"])


def test_scripted_model_server_is_one_loopback_server_per_session(pytester, probe):
    pytester.makepyfile("""
        import gen_agent_plugin_probe as probe

        def test_first(scripted_model_server):
            assert scripted_model_server.url.startswith("http://127.0.0.1:")
            probe.ports.append(scripted_model_server.port)

        def test_second(scripted_model_server):
            probe.ports.append(scripted_model_server.port)
    """)
    pytester.runpytest(*plugin_args()).assert_outcomes(passed=2)
    first, second = probe.ports
    assert first == second


def test_scripted_model_server_is_clean_for_every_test(pytester, probe):
    pytester.makepyfile("""
        from gen_agent.testing._model_server import Reply

        def test_leaves_things_behind(scripted_model_server):
            scripted_model_server.enqueue(Reply.text("left over"))
            scripted_model_server.default = Reply.text("a default")

        def test_sees_none_of_them(scripted_model_server):
            assert scripted_model_server.remaining == 0
            assert scripted_model_server.default is None
            assert scripted_model_server.requests == []
    """)
    pytester.runpytest(*plugin_args()).assert_outcomes(passed=2)


def test_the_plugin_can_be_disabled(pytester, probe):
    if not any(ep.value == PLUGIN for ep in entry_points(group="pytest11")):
        pytest.skip("the package is installed without its entry point")
    pytester.makepyfile("""
        def test_x(mock_backend):
            pass
    """)
    without = [arg for name in (*NOT_NEEDED, "gen_agent") for arg in ("-p", f"no:{name}")]
    result = pytester.runpytest(*without)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'mock_backend' not found*"])


def test_leak_check_sees_a_process_started_outside_the_agent_system():
    # A sanity check of this file's own premise: a plain child is a child of this process.
    from gen_agent.testing import child_processes

    process = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                               stdin=subprocess.PIPE)
    try:
        found = child_processes()
        assert found is None or process.pid in found
    finally:
        process.stdin.close()
        process.wait(10)
