"""One local Ray for the distributed tests, bound to 127.0.0.1 (skipped without Ray).

The folder is not named `ray`: that would shadow the package under pytest's default import
mode. Ray starts once per session (2-6 s) on loopback with token authentication; each test
stops the nodes it started and drops the directory, so names never leak between tests.
Ray's own processes (raylet, GCS) start before any test's leak snapshot, and its worker
processes are children of the raylet, not of the test process.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import os
import time
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

if importlib.util.find_spec("ray") is None:
    pytest.skip("Ray is not installed (pip install 'gen-agent[ray]'; make test installs it)",
                allow_module_level=True)

from gen_agent.ray._local import prepare_loopback_env

prepare_loopback_env()  # before the first import of ray in this process

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # Ray's own import-time deprecations are not ours
    import ray
    import ray.cloudpickle

    import gen_agent.ray as gray
    from gen_agent._errors import AgentDown, CallTimeout
    from gen_agent.ray import _client as gray_client

from . import agents  # noqa: E402 - after the environment is set

_namespaces = itertools.count(1)


def pid_gone(pid: int, timeout: float) -> bool:
    """Wait (bounded) until process `pid` no longer exists (or is a zombie)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except OSError:  # gone: no file, or (ESRCH) it exited between open and read
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """A local Ray on 127.0.0.1 for the whole session."""
    ray.cloudpickle.register_pickle_by_value(agents)
    gray.init_local(num_cpus=2)
    yield
    gray.shutdown_local()  # Ray stops and its /tmp/ga_ray_* session folder is removed


class Cluster:
    """Starts nodes for one test and stops them (and the directory) afterwards."""

    def __init__(self) -> None:
        self.nodes: list[Any] = []
        # A namespace per test: nothing one test leaves in a directory reaches the next.
        self.namespace = f"gen_agent_test_{os.getpid()}_{next(_namespaces)}"

    def start_node(self, name: Any, children: Any = (), **kwargs: Any) -> Any:
        node = gray.start_node(name, children, namespace=self.namespace, **kwargs)
        self.nodes.append(node)
        return node

    def close(self) -> None:
        try:
            running = []
            for node in self.nodes:
                # The pid of the incarnation running now (Ray may have restarted it); none
                # when it is down for good or stuck (stop_node kills it).
                with contextlib.suppress(AgentDown, CallTimeout):
                    running.append(node.info(timeout=10)["pid"])
                gray.stop_node(node.name, namespace=self.namespace, timeout=30)
            # Nothing left behind: every node process has exited.
            left = [pid for pid in running if not pid_gone(pid, 10)]
            assert left == [], f"node processes still running: {left}"
        finally:
            gray.drop_directory(self.namespace)  # its actor, its stored copy, our cache
            gray_client._forget_all()


@pytest.fixture
def cluster(ray_session: None) -> Iterator[Cluster]:
    """A `Cluster` of this test's nodes in the session's Ray."""
    c = Cluster()
    try:
        yield c
    finally:
        c.close()
