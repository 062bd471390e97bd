"""gen_agent on Ray: agents, supervision trees and pools across processes and machines.

Install with `pip install 'gen-agent[ray]'`. A *node* is a Ray actor process hosting an
`AgentSystem` and a `Supervisor` tree (`start_node`); agents are addressed by name wherever
they run (`ask`, `tell`, `poll`, `status`, `interrupt`, `halt`, `resume`, `drain`, `stop`,
`whereis`, `list_agents`, `stream`), through one directory per Ray namespace. Restarts have
two layers: an agent crash is restarted inside its node by the node's supervisor; a node
process death is restarted by Ray and the node restores its children with their last session
ids, with restart intensity counted as OTP does (restarts within a window); the directory
itself is restarted by Ray and reads its state back from Ray's GCS store. `RemotePool` is
the `Pool` API over workers on several nodes; `RayHost` is activation by key (`AgentHost`)
over several nodes on one shared store (`PostgresStore`). See `docs/pages/scale-out.md`.

`init_local()` starts a local Ray bound to 127.0.0.1 (tests, benchmarks, demos) and
`shutdown_local()` stops it and removes its session folder; on a real cluster call
`ray.init(address=...)` as usual.
"""

# Submodules load on first use (PEP 562), so that `gen_agent.ray._local` can set Ray's
# environment before anything imports Ray.
from typing import Any

_LAZY = {
    "DEFAULT_NAMESPACE": "_client", "Node": "_client", "ask": "_client", "drain": "_client",
    "halt": "_client", "interrupt": "_client", "list_agents": "_client", "notify": "_client",
    "poll": "_client", "resume": "_client", "start_agent": "_client", "start_node": "_client",
    "status": "_client", "stop": "_client", "stop_node": "_client", "stream": "_client",
    "tell": "_client", "whereis": "_client", "init_local": "_local",
    "prepare_loopback_env": "_local", "shutdown_local": "_local", "RemotePool": "_pool",
    "drop_directory": "_client", "RayHost": "_host", "ClusterLimit": "_limits",
    "ClusterBudget": "_limits",
}

__all__ = [
    "DEFAULT_NAMESPACE",
    "ClusterBudget",
    "ClusterLimit",
    "Node",
    "RayHost",
    "RemotePool",
    "ask",
    "drain",
    "drop_directory",
    "halt",
    "init_local",
    "interrupt",
    "list_agents",
    "notify",
    "poll",
    "prepare_loopback_env",
    "resume",
    "shutdown_local",
    "start_agent",
    "start_node",
    "status",
    "stop",
    "stop_node",
    "stream",
    "tell",
    "whereis",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gen_agent.ray' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"gen_agent.ray.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
