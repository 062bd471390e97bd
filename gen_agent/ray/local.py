"""`init_local`: a local Ray instance bound to 127.0.0.1, for tests, benchmarks and demos.

Ray picks the machine's external address for its sockets unless told otherwise, and Ray 2.60
turns on token authentication for a new local cluster (writing a token under `~/.ray`). This
helper starts Ray on loopback only, with a fresh token held in the environment (inherited by
Ray's own processes, never written to disk by gen_agent), and its session files in a short
temporary folder.
"""

from __future__ import annotations

import os
import secrets
import sys
import tempfile
from typing import Any

__all__ = ["LOOPBACK", "init_local", "prepare_loopback_env"]

LOOPBACK = "127.0.0.1"
# Read by Ray at import time: False makes every Ray process use the loopback address.
_CLUSTER_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def prepare_loopback_env() -> None:
    """Set the environment so that a Ray imported afterwards binds to 127.0.0.1 only.

    Sets `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`, and token authentication with a fresh random
    token (`RAY_AUTH_MODE=token`, `RAY_AUTH_TOKEN`) unless `RAY_AUTH_MODE` is already set.
    Call it before the first `import ray` of the process (`init_local` calls it and also
    patches an already imported Ray). Child processes inherit the variables.
    """
    os.environ[_CLUSTER_ENV] = "0"
    if "RAY_AUTH_MODE" not in os.environ:
        os.environ["RAY_AUTH_MODE"] = "token"
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)


def init_local(*, num_cpus: int | None = None, namespace: str = "gen_agent",
               temp_dir: str | None = None, **ray_init_kwargs: Any) -> Any:
    """Start (or join) a local, loopback-only Ray instance in this process.

    Args:
        num_cpus: CPUs Ray may schedule on (default: Ray's, the machine's count).
        namespace: the driver's Ray namespace (default `"gen_agent"`; nodes and the directory
            take their namespace explicitly anyway).
        temp_dir: Ray's session folder; default a new short folder under the system temp
            folder (Ray's socket paths must stay short).
        **ray_init_kwargs: passed to `ray.init` (e.g. `object_store_memory`), except the
            address options this helper owns.

    Returns:
        What `ray.init` returns (its context). A Ray already initialized in this process is
        left as it is and its context returned.

    Raises:
        ValueError: `address` or `_node_ip_address` was given (this helper is loopback only).
        ImportError: Ray is not installed (`pip install 'gen-agent[ray]'`).

    Mirrors: nothing in the Elixir original (a local `Node.start/2` on loopback).
    """
    for key in ("address", "_node_ip_address"):
        if key in ray_init_kwargs:
            raise ValueError(f"init_local is loopback only: do not pass {key!r}")
    imported_before = "ray" in sys.modules
    prepare_loopback_env()
    import ray
    from ray._private import ray_constants

    if imported_before:
        # Ray read its settings at import: apply the loopback and token settings now.
        ray_constants.ENABLE_RAY_CLUSTER = False
        from ray._raylet import Config  # type: ignore[attr-defined]

        Config.initialize("")
    if ray.is_initialized():
        return ray.get_runtime_context()
    if temp_dir is None:
        temp_dir = tempfile.mkdtemp(prefix="ga_ray_", dir="/tmp" if sys.platform != "win32"
                                    else None)
    ray_init_kwargs.setdefault("include_dashboard", False)
    ray_init_kwargs.setdefault("log_to_driver", False)
    ray_init_kwargs.setdefault("configure_logging", False)
    return ray.init(address="local", num_cpus=num_cpus, namespace=namespace,
                    _node_ip_address=LOOPBACK, _temp_dir=temp_dir, **ray_init_kwargs)
