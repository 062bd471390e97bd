"""`RayHost`: activation by key over two Ray nodes on one PostgreSQL. The loopback model
server is the witness: it never sees two incarnations of one key in a turn at once, however
the nodes race and whichever node dies."""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from gen_agent._errors import AgentDown, AgentStartError
from gen_agent.store import PostgresStore

from . import host_agents
from .conftest import Cluster, gray, pid_gone, ray

pytest.importorskip("anthropic", reason="the anthropic extra is not installed")
from gen_agent.backends.anthropic import AnthropicAPI
from gen_agent.testing import Reply, ScriptedModelServer

ray.cloudpickle.register_pickle_by_value(host_agents)


class Witness:
    """The model server's record: which incarnation of each key is in a turn, and every turn
    as `(key, node pid, question, answers the agent held)`."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.in_flight: dict[str, str] = {}
        self.violations: list[str] = []
        self.turns: list[tuple[str, int, str, int]] = []
        self.gates: dict[str, threading.Event] = {}  # question -> released

    def answer(self, request: Any) -> Any:
        content = request.body["messages"][-1]["content"]
        text = content if isinstance(content, str) else "".join(
            block.get("text", "") for block in content if isinstance(block, dict))
        key, pid, incarnation, history, question = text.split("|")
        with self.lock:
            if key in self.in_flight:
                self.violations.append(f"{key}: {self.in_flight[key]} and {incarnation}")
            self.in_flight[key] = incarnation
            self.turns.append((key, int(pid), question, int(history)))
            self.lock.notify_all()
            gate = self.gates.get(question)
        try:
            if gate is not None:
                assert gate.wait(30), "the gate was never opened"
            return Reply.text(f"{key}:{question}:{history}")
        finally:
            with self.lock:
                if self.in_flight.get(key) == incarnation:
                    del self.in_flight[key]
                self.lock.notify_all()

    def wait(self, predicate: Any, timeout: float = 30.0) -> bool:
        with self.lock:
            return self.lock.wait_for(predicate, timeout)


@pytest.fixture(scope="module")
def cluster(ray_session: None) -> Any:
    """Nodes `a` and `b` for the whole module (a node start costs seconds): the kill test,
    which kills `a`, comes last."""
    nodes = Cluster()
    for name in ("a", "b"):
        nodes.start_node(name)
    try:
        yield nodes
    finally:
        nodes.close()


def _pids(cluster: Any) -> dict[str, int]:
    return {node.name: node.pid for node in cluster.nodes}


@pytest.fixture
def shared_store(postgres: Any) -> Any:
    from pgcluster import wipe

    wipe(postgres)
    store = PostgresStore(postgres.conninfo())
    yield store
    store.close()


def _host(cluster: Any, store: Any, url: str, **options: Any) -> Any:
    return gray.RayHost(host_agents.Chat, backend=AnthropicAPI, nodes=["a", "b"], store=store,
                        namespace=cluster.namespace, url=url, **options)


def test_two_nodes_on_one_postgres_race_on_new_keys(cluster: Any, shared_store: Any) -> None:
    witness = Witness()
    with ScriptedModelServer([witness.answer] * 200) as server:
        pids = _pids(cluster)
        host = _host(cluster, shared_store, server.url, deactivate_after_ms=10)

        def insist(node: str, key: str) -> str:
            # Straight to one node, again while the other node's agent holds the key.
            deadline = time.monotonic() + 30
            while True:
                try:
                    return host._send(node, "ask", key, (f"via-{node}", 30), 30).text
                except AgentStartError as exc:
                    assert exc.reason[0] == "session_leased", exc.reason
                    assert time.monotonic() < deadline, f"{key} never reached {node}"
                    time.sleep(0.005)

        keys = [f"race-{i}" for i in range(6)]
        with ThreadPoolExecutor(12) as pool:
            texts = list(pool.map(insist, ["a", "b"] * len(keys), sorted(keys * 2)))
        # Each key was activated on both nodes, one after the other, its state continuous
        # through the shared store: one of its two turns saw the other's answer.
        assert witness.violations == []
        for key in keys:
            turns = [(pid, q, h) for k, pid, q, h in witness.turns if k == key]
            assert sorted(h for _, _, h in turns) == [0, 1], turns
            assert {pid for pid, _, _ in turns} == set(pids.values())
        assert sorted(texts) == sorted(f"{k}:{q}:{h}" for k, _, q, h in witness.turns)

        # Through the host: keys spread over both nodes by their hash, conversations whole.
        spread = [f"user-{i}" for i in range(8)]
        assert {host.node_of(key) for key in spread} == {"a", "b"}
        with ThreadPoolExecutor(4) as pool:
            for n in range(2):
                answers = list(pool.map(host.ask, spread, [f"q{n}"] * len(spread),
                                        [30] * len(spread)))
                assert [a.text for a in answers] == [f"{k}:q{n}:{n}" for k in spread]
        served = {k: {pid for key, pid, _, _ in witness.turns if key == k} for k in spread}
        assert served == {k: {pids[host.node_of(k)]} for k in spread}
        assert witness.violations == []
        host.close()


def test_a_node_killed_mid_turn_its_keys_come_back_on_the_other(cluster: Any,
                                                                  shared_store: Any) -> None:
    witness = Witness()
    with ScriptedModelServer([witness.answer] * 50) as server:
        nodes = {node.name: node for node in cluster.nodes}
        host = _host(cluster, shared_store, server.url, down_hold_s=120)
        on_a = [k for k in (f"key-{i}" for i in range(40)) if host.node_of(k) == "a"][:2]
        busy, idle = on_a
        assert host.ask(busy, "q1", 30).text == f"{busy}:q1:0"
        assert host.ask(idle, "q1", 30).text == f"{idle}:q1:0"
        witness.gates["q2"] = gate = threading.Event()
        failed: list[BaseException] = []

        def cut_short() -> None:
            try:
                host.ask(busy, "q2", 30)
            except BaseException as exc:
                failed.append(exc)

        caller = threading.Thread(target=cut_short)
        caller.start()
        assert witness.wait(lambda: busy in witness.in_flight)  # mid-turn on node a
        os.kill(nodes["a"].pid, signal.SIGKILL)
        caller.join(30)
        assert not caller.is_alive()
        assert [type(e) for e in failed] == [AgentDown]
        assert failed[0].reason == ("node_down", "a")  # type: ignore[attr-defined]
        assert pid_gone(nodes["a"].pid, 10)
        gate.set()  # the dead incarnation's request ends at the server
        assert witness.wait(lambda: busy not in witness.in_flight)

        # The next messages go to b, which takes the dead owner's leases over at once,
        # resumes both keys from the store and reports the cut turn, once.
        b_pid = nodes["b"].pid
        assert host.ask(busy, "q3", 30).text == f"{busy}:q3:1"
        assert host.ask(idle, "q2", 30).text == f"{idle}:q2:1"
        assert host.node_of(busy) == host.node_of(idle) == "b"
        assert host.deactivate(busy) is True
        assert host.ask(busy, "q4", 30).text == f"{busy}:q4:2"
        status = host.status(busy, 30)
        assert status.agent_state["interrupted"] == ["q2"]
        assert status.agent_state["answers"] == [f"{busy}:q1:0", f"{busy}:q3:1",
                                                 f"{busy}:q4:2"]
        assert host.status(idle, 30).agent_state["interrupted"] == []
        after = [(k, pid) for k, pid, q, _ in witness.turns if q != "q1"]
        assert after == [(busy, nodes["a"].pid), (busy, b_pid), (idle, b_pid), (busy, b_pid)]
        assert witness.violations == []
        record = shared_store.load(busy)
        assert record is not None and record.totals.interrupted_turns == 1
        host.close()
