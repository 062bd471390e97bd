"""`init_local`: a local Ray instance bound to 127.0.0.1, for tests, benchmarks and demos.

Ray picks the machine's external address for its sockets unless told otherwise, and Ray 2.60
turns on token authentication for a new local cluster (writing a token under `~/.ray`). This
helper starts Ray on loopback only, with a fresh token held in the environment (inherited by
Ray's own processes, never written to disk by gen_agent), and its session files in a short
temporary folder, removed again by `shutdown_local` (or at interpreter exit).
"""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import sys
import tempfile
import threading
import time
from typing import Any

__all__ = ["LOOPBACK", "init_local", "prepare_loopback_env", "shutdown_local"]

LOOPBACK = "127.0.0.1"
# Read by Ray at import time: False makes every Ray process use the loopback address.
_CLUSTER_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
# Session folders init_local created for a Ray it started (removed by shutdown_local).
_OWNED: list[str] = []
_OWNED_LOCK = threading.Lock()
_AT_EXIT = [False]  # whether the exit hook is registered
# How long shutdown_local retries removing a folder Ray's exiting processes still write to.
_REMOVE_WAIT_S = 5.0


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
    """Start a new local, loopback-only Ray cluster from this process (or keep the one this
    process already initialized; it never joins another process's cluster).

    This process then owns the cluster: its exit (or `shutdown_local`) ends it, with every
    node on it. Another process on this machine joins it with the environment this call
    set (inherited by subprocesses: `RAY_AUTH_MODE`, `RAY_AUTH_TOKEN`,
    `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`) and `ray.init(address=<the GCS address>)`, the
    address being `ray.get_runtime_context().gcs_address` here; `address="auto"` picks
    whichever local Ray it finds first.

    Args:
        num_cpus: CPUs Ray may schedule on (default: Ray's, the machine's count).
        namespace: the driver's Ray namespace (default `"gen_agent"`; nodes and the directory
            take their namespace explicitly anyway).
        temp_dir: Ray's session folder; default a new short folder under the system temp
            folder (Ray's socket paths must stay short), `/tmp/ga_ray_*`, which
            `shutdown_local` (or the interpreter's exit) removes with Ray's files in it. A
            folder you pass is yours: it is left as it is.
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
    created = temp_dir is None
    if temp_dir is None:
        temp_dir = tempfile.mkdtemp(prefix="ga_ray_", dir="/tmp" if sys.platform != "win32"
                                    else None)
    ray_init_kwargs.setdefault("include_dashboard", False)
    ray_init_kwargs.setdefault("log_to_driver", False)
    ray_init_kwargs.setdefault("configure_logging", False)
    try:
        context = ray.init(address="local", num_cpus=num_cpus, namespace=namespace,
                           _node_ip_address=LOOPBACK, _temp_dir=temp_dir, **ray_init_kwargs)
    except BaseException:
        if created:
            shutil.rmtree(temp_dir, ignore_errors=True)
        raise
    if created:
        with _OWNED_LOCK:
            _OWNED.append(temp_dir)
            if not _AT_EXIT[0]:
                # Registered after Ray's own exit hook, so it runs first (atexit is LIFO):
                # it shuts Ray down itself, then removes the folder.
                atexit.register(shutdown_local)
                _AT_EXIT[0] = True
    return context


def shutdown_local() -> None:
    """`ray.shutdown()`, then remove the session folders `init_local` created (Ray leaves
    its logs and sockets there). Idempotent; also run at interpreter exit.

    A folder still written to by a Ray process that is exiting is retried for up to
    `_REMOVE_WAIT_S` seconds; what cannot be removed then is left (never an error).

    Mirrors: nothing in the Elixir original (stopping a local `Node.start/2`).
    """
    if "ray" in sys.modules:
        import ray

        ray.shutdown()
    with _OWNED_LOCK:
        folders, _OWNED[:] = list(_OWNED), []
    for folder in folders:
        deadline = time.monotonic() + _REMOVE_WAIT_S
        while True:
            shutil.rmtree(folder, ignore_errors=True)
            if not os.path.exists(folder) or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
