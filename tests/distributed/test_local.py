"""`init_local` leaves no session folder or Ray process behind."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from gen_agent.ray import _local as local

# In a child process (the session's Ray runs in this one): a local Ray stopped the way a
# user stops it, `ray.shutdown()`; the exit hook `init_local` registered (`shutdown_local`)
# removes its session folder when the interpreter exits.
_SCRIPT = """
import os
from gen_agent.ray._local import init_local
context = init_local(num_cpus=0)  # no worker process is needed
import ray
folder = os.path.dirname(context.address_info["session_dir"])
assert os.path.isdir(folder) and ray.is_initialized()
print(folder, flush=True)
ray.shutdown()
"""


def _processes_naming(folder: str) -> list[int]:
    """Processes whose command line names `folder` (Ray's daemons take its paths)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if folder.encode() in cmdline.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def test_no_session_folder_or_ray_process_is_left_behind(ray_session: None) -> None:
    before = set(glob.glob("/tmp/ga_ray_*"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}  # a fresh Ray
    done = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True,
                          timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    folder = done.stdout.split()[0]
    assert folder.startswith("/tmp/ga_ray_") and folder not in before
    assert not os.path.exists(folder)
    deadline = time.monotonic() + 30
    while _processes_naming(folder) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_naming(folder) == []
    # (Not "no new /tmp/ga_ray_* at all": another Ray on this machine may be running.)


def _processes_marked(marker: bytes) -> list[tuple[int, str]]:
    """Live processes whose environment holds `marker` (every process of one local Ray)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as environ:
                if marker not in environ.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                found.append((int(entry), cmdline.read().replace(b"\0", b" ")[:60].decode()))
        except OSError:
            continue
    return found


_OWNER = """
import sys
from gen_agent.ray import _local as local
local.init_local(num_cpus=1)
import ray
ray.get(ray.remote(lambda: 1).remote())  # a worker process too
print(local._OWNED[0], local._owner_identity(), flush=True)
sys.stdin.read()
"""


# slow: starts a second local Ray (~3-5 s) and waits for its processes to end after the owner
# is SIGKILLed (measured ~2.5 s: Ray's agents ignore SIGTERM and get SIGKILL after 2 s).
@pytest.mark.slow
def test_the_owners_sigkill_leaves_no_ray_process_and_no_folder(ray_session: None) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}  # a fresh Ray
    owner = subprocess.Popen([sys.executable, "-c", _OWNER], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert owner.stdout is not None
        folder, identity = owner.stdout.readline().split()
        marker = f"{local.OWNER_ENV}={identity}".encode()
        assert len(_processes_marked(marker)) >= 4  # gcs, raylet, agents, a worker
        owner.kill()
        owner.wait(30)
        killed = time.monotonic()
        while _processes_marked(marker) and time.monotonic() - killed < 15:
            time.sleep(0.1)
        assert _processes_marked(marker) == []  # within 15 s of the SIGKILL
        while os.path.exists(folder) and time.monotonic() - killed < 15:
            time.sleep(0.1)
        assert not os.path.exists(folder)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait(30)
        assert owner.stdin is not None and owner.stdout is not None
        owner.stdin.close()
        owner.stdout.close()


def test_init_local_removes_the_folders_of_dead_owners_only(tmp_path) -> None:
    dead = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
    dead_pid = int(dead.stdout)  # exited: its pid names no live owner
    stale = tempfile.mkdtemp(prefix="ga_ray_", dir="/tmp")
    live = tempfile.mkdtemp(prefix="ga_ray_", dir="/tmp")
    foreign = tempfile.mkdtemp(prefix="ga_ray_", dir="/tmp")  # no owner file: not ours
    try:
        with open(os.path.join(stale, local._OWNER_FILE), "w") as file:
            file.write(f"{dead_pid}:1")
        with open(os.path.join(live, local._OWNER_FILE), "w") as file:
            file.write(local._owner_identity())
        local._remove_stale_folders()
        assert not os.path.exists(stale)
        assert os.path.isdir(live) and os.path.isdir(foreign)
    finally:
        for folder in (stale, live, foreign):
            shutil.rmtree(folder, ignore_errors=True)
