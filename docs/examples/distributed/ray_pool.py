"""Pool over two nodes: a `RemotePool` on Ray, with one node killed while it works (issue 23).

Two nodes (Ray actor processes, each hosting an `AgentSystem` and a supervisor) run two
workers each; the caller keeps the queue, hands each node only as many tasks as its workers
may hold, and gets every task answered exactly once: a `Response`, or `("worker_down",
reason)` for the few that were in flight on the killed node. The rest move on to the other
node, and to the killed one again once Ray has restarted it.

Run it: `python docs/examples/distributed/ray_pool.py` (needs `pip install 'gen-agent[ray]'`;
it starts a local Ray bound to 127.0.0.1 and stops it at the end).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import gen_agent
from gen_agent import GenAgent, NoReply
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.ray._local import init_local, shutdown_local


# --8<-- [start:worker]
class Summarizer(GenAgent):
    """A pool worker: answers every prompt, never halts."""

    def init_agent(self, opts: dict[str, Any]) -> Any:
        # One scripted answer per turn on the mock backend; a real worker returns its
        # backend's options here (ClaudeCLI, AnthropicAPI...), and nothing else changes.
        return {"scripts": [fake_model] * 1_000}, {"done": 0}

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return NoReply({"done": state["done"] + 1})


def fake_model(prompt: str) -> list[gen_agent.Event]:
    return mock.text_turn(f"summary of {prompt}")
# --8<-- [end:worker]


# --8<-- [start:pool]
def run(namespace: str = "ray_pool_recipe", kill_one: bool = True) -> dict[str, int]:
    """Start two nodes and a pool over them, run 40 tasks (killing node b after the first
    answer), and count the outcomes. Needs a running Ray (`init_local` or `ray.init`)."""
    import ray

    import gen_agent.ray as cluster

    # The nodes must be able to unpickle the worker class: this script is not importable
    # on them, so its classes travel by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    nodes = [cluster.start_node(name, namespace=namespace) for name in ("a", "b")]
    counts = {"ok": 0, "worker_down": 0}
    try:
        with cluster.RemotePool(Summarizer, nodes=["a", "b"], size=2, backend=MockBackend,
                                namespace=namespace) as pool:
            refs = [pool.submit(f"document {i}") for i in range(40)]
            pool.result(refs[0], timeout=60)
            counts["ok"] += 1
            if kill_one:
                os.kill(nodes[1].pid, signal.SIGKILL)  # the node dies mid-way
            for ref in refs[1:]:
                try:
                    pool.result(ref, timeout=60)
                    counts["ok"] += 1
                except gen_agent.TurnError as exc:
                    assert exc.reason[0] == "worker_down"  # in flight on the dead node
                    counts["worker_down"] += 1
    finally:
        for node in nodes:
            node.stop()
    return counts
# --8<-- [end:pool]


def main() -> None:
    init_local(num_cpus=2)
    try:
        counts = run()
    finally:
        shutdown_local()  # Ray stops; its session folder is removed
    print(f"{counts['ok']} answered, {counts['worker_down']} lost with the killed node "
          f"(of 40, each exactly once)")


if __name__ == "__main__":
    main()
