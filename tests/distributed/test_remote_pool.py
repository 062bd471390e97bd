"""RemotePool: the Pool API over workers on two nodes, a worker crashing, a node killed
mid-way."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from gen_agent._errors import RequestError, TurnError

from . import agents
from .conftest import gray, pid_gone


def test_a_pool_over_two_nodes_answers_every_task_once_when_a_node_dies(cluster) -> None:
    ns = cluster.namespace
    node_a = cluster.start_node("a")
    node_b = cluster.start_node("b")
    pool = gray.RemotePool(agents.Echo, nodes=["a", "b"], size=2, backend=agents.MockBackend,
                           namespace=ns, prefix="done:", delay_s=0.05)
    try:
        assert len(pool.workers()) == 4
        # A worker crash inside a node fails its task with worker_down; the node's
        # supervisor restarts the worker.
        with pytest.raises(TurnError) as crashed:
            pool.map(["crash"], timeout=30)
        kind, reason = crashed.value.reason
        assert kind == "worker_down" and reason[:2] == ("callback_failed", "error"), reason
        warm = pool.map([f"w{i}" for i in range(8)], timeout=30)
        assert [r.text for r in warm] == [f"done:w{i}" for i in range(8)]
        assert pool.status()["nodes"] == {"a": "up", "b": "up"}
        refs = [pool.submit(f"t{i}") for i in range(60)]
        # Kill node b once its first tasks are running there.
        first = pool.result(refs[0], timeout=30)
        assert first.text == "done:t0"
        os.kill(node_b.pid, signal.SIGKILL)
        outcomes: dict[int, str] = {0: "ok"}
        for i, ref in enumerate(refs[1:], start=1):
            try:
                response = pool.result(ref, timeout=60)
            except TurnError as exc:
                assert exc.reason == ("worker_down", ("node_down", "b")), exc.reason
                outcomes[i] = "worker_down"
            else:
                assert response.text == f"done:t{i}"
                outcomes[i] = "ok"
        assert len(outcomes) == 60  # every task answered, exactly once (results are popped)
        lost = [i for i, kind in outcomes.items() if kind == "worker_down"]
        assert 0 < len(lost) <= 2 * 2  # at most what was in flight on b (2 workers)
        with pytest.raises(LookupError):
            pool.result(refs[1], timeout=1)
        # b came back (Ray restarted it) and serves the pool again.
        node_b.wait_ready(60)
        again = pool.map([f"x{i}" for i in range(8)], timeout=30)
        assert [r.text for r in again] == [f"done:x{i}" for i in range(8)]
    finally:
        pool.stop(30)
    assert not [t for t in threading.enumerate() if t.name.startswith("gen_agent-remote-pool")]
    with pytest.raises(RequestError):
        pool.submit("late")
    assert node_a.info()["agents"] == 0  # the pool's workers are gone from the nodes
    assert pid_gone(node_b.pid, 10)

