"""`init_local` leaves no session folder or Ray process behind."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import time

# In a child process (the session's Ray runs in this one): a local Ray stopped the way a
# user stops it, `ray.shutdown()`; the exit hook `init_local` registered (`shutdown_local`)
# removes its session folder when the interpreter exits.
_SCRIPT = """
import os
from gen_agent.ray.local import init_local
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
