"""`init_local`: a local Ray instance bound to 127.0.0.1, for tests, benchmarks and demos.

Ray picks the machine's external address for its sockets unless told otherwise, and Ray 2.60
turns on token authentication for a new local cluster (writing a token under `~/.ray`). This
helper starts Ray on loopback only, with a fresh token held in the environment (inherited by
Ray's own processes, never written to disk by gen_agent), and its session files in a short
temporary folder, removed again by `shutdown_local` (or at interpreter exit).

Nothing outlives the owner: Ray's processes inherit `GEN_AGENT_RAY_OWNER=<pid>:<start ticks>`
(set only while `ray.init` starts them), and a small watcher process (`_watch`, ~10 ms to
start) holding a pipe from the owner ends every process so marked (SIGTERM, SIGKILL after
2 s) and removes the folder once the owner is gone, even SIGKILLed: measured, nothing of that
Ray is left ~2.5 s after the owner's SIGKILL (Ray's own agents stayed ~90 s before). A folder
whose owner died with its watcher is removed by the next `init_local` on the machine.
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

__all__ = ["LOOPBACK", "OWNER_ENV", "init_local", "prepare_loopback_env", "shutdown_local"]

LOOPBACK = "127.0.0.1"
# Read by Ray at import time: False makes every Ray process use the loopback address.
_CLUSTER_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
# Session folders init_local created for a Ray it started (removed by shutdown_local).
_OWNED: list[str] = []
_OWNED_LOCK = threading.Lock()
_AT_EXIT = [False]  # whether the exit hook is registered
# How long shutdown_local retries removing a folder Ray's exiting processes still write to.
_REMOVE_WAIT_S = 5.0
OWNER_ENV = "GEN_AGENT_RAY_OWNER"
"""Set in the environment of the Ray processes `init_local` starts: `<pid>:<start ticks>` of
the owner, by which its watcher (or a later `init_local`) finds them."""
_OWNER_FILE = "gen_agent_owner"  # in the session folder: the owner's `<pid>:<start ticks>`
_WATCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_watch.py")
_WATCHERS: list[tuple[Any, int]] = []  # (Popen, our end of its lifeline) per Ray started
_WATCH_EXIT_S = 10.0  # how long shutdown_local waits for a watcher to finish


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
        _remove_stale_folders()
        temp_dir = tempfile.mkdtemp(prefix="ga_ray_", dir="/tmp" if sys.platform != "win32"
                                    else None)
    owner = _owner_identity()
    if created:
        with open(os.path.join(temp_dir, _OWNER_FILE), "w", encoding="ascii") as file:
            file.write(owner)
    ray_init_kwargs.setdefault("include_dashboard", False)
    ray_init_kwargs.setdefault("log_to_driver", False)
    ray_init_kwargs.setdefault("configure_logging", False)
    watcher = _start_watcher(f"{OWNER_ENV}={owner}", temp_dir if created else "")
    previous = os.environ.get(OWNER_ENV)
    os.environ[OWNER_ENV] = owner  # inherited by the processes ray.init starts, and only them
    try:
        context = ray.init(address="local", num_cpus=num_cpus, namespace=namespace,
                           _node_ip_address=LOOPBACK, _temp_dir=temp_dir, **ray_init_kwargs)
    except BaseException:
        _stop_watcher(*watcher)  # ends what ray.init had started
        if created:
            shutil.rmtree(temp_dir, ignore_errors=True)
        raise
    finally:
        if previous is None:
            os.environ.pop(OWNER_ENV, None)
        else:
            os.environ[OWNER_ENV] = previous
    with _OWNED_LOCK:
        _WATCHERS.append(watcher)
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
        watchers, _WATCHERS[:] = list(_WATCHERS), []
    for watcher in watchers:
        _stop_watcher(*watcher)  # ends what ray.shutdown left (nothing, normally)
    for folder in folders:
        deadline = time.monotonic() + _REMOVE_WAIT_S
        while True:
            shutil.rmtree(folder, ignore_errors=True)
            if not os.path.exists(folder) or time.monotonic() >= deadline:
                break
            time.sleep(0.05)


def _owner_identity() -> str:
    """`<pid>:<start ticks>` of this process (ticks 0 where there is no `/proc`)."""
    from gen_agent._reap import start_ticks as _start_ticks

    return f"{os.getpid()}:{_start_ticks(os.getpid())}"


def _owner_alive(identity: str) -> bool:
    from gen_agent._reap import start_ticks as _start_ticks

    try:
        pid_text, ticks_text = identity.strip().split(":")
        pid, ticks = int(pid_text), int(ticks_text)
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (ValueError, PermissionError, OSError):
        return True  # unreadable, or another user's: not ours to judge
    return not ticks or _start_ticks(pid) in (0, ticks)


def _start_watcher(marker: str, folder: str) -> tuple[Any, int]:
    """Start the watcher (see `_watch`) of a Ray about to start; returns it and our end of
    its lifeline (which only this process holds: closing it, or dying, ends that Ray)."""
    import subprocess

    life_r, life_w = os.pipe()
    try:
        watcher = subprocess.Popen(
            [sys.executable, "-I", "-S", _WATCH, str(life_r), marker, folder],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(life_r,), start_new_session=True,
            env={k: v for k, v in os.environ.items() if k != OWNER_ENV})
    except BaseException:
        os.close(life_w)
        raise
    finally:
        os.close(life_r)
    return watcher, life_w


def _stop_watcher(watcher: Any, lifeline: int) -> None:
    import contextlib
    import subprocess

    with contextlib.suppress(OSError):
        os.close(lifeline)
    try:
        watcher.wait(_WATCH_EXIT_S)
    except subprocess.TimeoutExpired:
        watcher.kill()
        watcher.wait()


def _holds(entry: bytes) -> Any:
    """A `reap_marked` predicate: the environment holds `entry`."""
    return lambda environ: entry in environ


def _remove_stale_folders() -> None:
    """Remove `/tmp/ga_ray_*` folders of ours whose owner process is dead, ending the
    processes of their Ray first (a watcher that died with its owner left them)."""
    import glob

    for folder in glob.glob("/tmp/ga_ray_*"):
        try:
            if os.stat(folder).st_uid != os.getuid():
                continue
            with open(os.path.join(folder, _OWNER_FILE), encoding="ascii") as file:
                identity = file.read().strip()
        except OSError:
            continue  # not made by init_local (or not yet written): left alone
        if _owner_alive(identity):
            continue
        from gen_agent._reap import reap_marked

        marker = f"{OWNER_ENV}={identity}".encode()
        reap_marked(_holds(marker), timeout=5.0)
        shutil.rmtree(folder, ignore_errors=True)
