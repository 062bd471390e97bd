"""The node side of `gen_agent.ray.RayHost`: this node process's `AgentHost`s, by name, and
the one entry point `NodeServer.host_call_packed` runs. Imports nothing of `gen_agent.ray`
(the node module imports it)."""

from __future__ import annotations

import pickle
import threading
from typing import Any, Final

from gen_agent._host import AgentHost
from gen_agent._portable import to_portable

__all__ = ["NO_HOST", "host_call"]

NO_HOST: Final = ("no_host", None)
"""The answer of a node that runs no such host (first contact, or restarted since)."""

_HOSTS: dict[Any, AgentHost] = {}
_LOCK = threading.Lock()


def host_call(system: Any, op: str, name: Any, key: Any, args: tuple[Any, ...]) -> Any:
    """Run `op` of host `name` on this node: `("ok", value)`, `("error", portable
    exception)` or `NO_HOST`. `"open"` takes the host's pickled `(module, backend,
    options)` and starts it in `system` unless it runs; `"close"` closes it."""
    try:
        if op == "open":
            with _LOCK:
                if name not in _HOSTS:
                    module, backend, options = pickle.loads(args[0])
                    _HOSTS[name] = AgentHost(module, backend=backend, name=name,
                                             agent_system=system, **options)
            return ("ok", None)
        if op == "close":
            with _LOCK:
                host = _HOSTS.pop(name, None)
            if host is not None:
                host.close()
            return ("ok", None)
        host = _HOSTS.get(name)
        if host is None or host._closed:
            return NO_HOST
        if op == "ask":
            return ("ok", host.ask(key, *args))
        value = _op(host, op, key, args)
        return ("ok", to_portable(value) if op in ("status", "poll") else value)
    except Exception as exc:  # noqa: BLE001 - every failure goes back to the caller
        return ("error", to_portable(exc))


def _op(host: AgentHost, op: str, key: Any, args: tuple[Any, ...]) -> Any:
    if op == "live_keys":
        return host.live_keys()
    if op == "host_status":
        return host.host_status()
    method: Any = {"tell": host.tell, "poll": host.poll, "status": host.status,
              "notify": host.notify, "send": host.send, "interrupt": host.interrupt,
              "halt": host.halt, "resume": host.resume, "forget": host.forget,
                   "deactivate": host.deactivate}[op]
    return method(key, *args)
