"""gen_agent.ray nodes: remote calls, names across nodes, both restart layers, streaming."""

from __future__ import annotations

import pytest

import gen_agent
from gen_agent.errors import AgentDown, AgentNotFound, AlreadyStarted, CallTimeout, TurnError

from . import agents
from .conftest import gray


def test_remote_ask_tell_poll_status_and_errors(cluster) -> None:
    spec = gen_agent.child_spec(agents.Echo, name="greeter", backend=agents.MockBackend,
                                restart="permanent", prefix="hi ")
    node = cluster.start_node("a", [spec])
    ns = cluster.namespace
    response = gray.ask("greeter", "Ada", timeout=10, namespace=ns)
    assert response.text == "hi Ada"
    ref = gray.tell("greeter", "Bob", timeout=10, namespace=ns)
    result = gray.poll("greeter", ref, timeout=10, namespace=ns)
    assert result.status in ("pending", "completed")
    status = gray.status("greeter", timeout=10, namespace=ns)
    assert status.name == "greeter" and status.agent_state["node_pid"] == node.pid
    assert gray.whereis("greeter", namespace=ns) == "a"
    assert gray.whereis("nobody", namespace=ns) is None
    assert gray.list_agents(namespace=ns) == ["greeter"]
    with pytest.raises(AgentNotFound):
        gray.ask("nobody", "x", timeout=10, namespace=ns)
    with pytest.raises(TypeError, match="prompt must be a str"):
        gray.ask("greeter", 42, namespace=ns)  # type: ignore[arg-type]
    info = node.info()
    assert info["agents"] == 1 and info["rss_kib"] > 0
    assert gray.poll("nobody", ref, namespace=ns).reason == "not_found"

