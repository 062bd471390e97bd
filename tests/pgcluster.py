"""A throwaway PostgreSQL cluster for the tests, from Debian's `postgresql` package (the
Makefile installs it where apt runs as root): `initdb` and `pg_ctl` run as a non-root user
(initdb refuses root: `nobody` through `runuser` when the tests run as root), the server
listens on a unix socket in a fresh temporary folder only (no TCP port), with fsync off and
small buffers so that it starts in about a second. Skipped, saying why, without the binaries.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

_USER = "gen_agent"  # the cluster's superuser (trust authentication on the socket only)


def _bin_dir() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(p.split("/")[-3]) if p.split("/")[-3].isdigit() else 0)
    if found:
        return os.path.dirname(found[-1])
    initdb = shutil.which("initdb")
    return os.path.dirname(initdb) if initdb else None


def _as_owner(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    runuser = shutil.which("runuser")
    if runuser is None:
        pytest.skip("PostgreSQL tests run as root need runuser (util-linux) to start the "
                    "server as nobody")
    return [runuser, "-u", "nobody", "--", *argv]


class Cluster:
    """A running server: `conninfo(dbname)` for psycopg / `PostgresStore`."""

    def __init__(self, folder: str, bindir: str) -> None:
        self.folder, self.bindir = folder, bindir
        self.data = os.path.join(folder, "data")

    def conninfo(self, dbname: str = "postgres") -> str:
        return f"host={self.folder} user={_USER} dbname={dbname}"

    def start(self) -> None:
        if os.geteuid() == 0:
            os.chown(self.folder, *_nobody())
        env = {**os.environ, "LC_ALL": "C"}
        subprocess.run(_as_owner([f"{self.bindir}/initdb", "-D", self.data, "-U", _USER,
                                  "-A", "trust", "--no-sync", "-E", "UTF8", "--no-locale"]),
                       check=True, capture_output=True, timeout=120, env=env)
        options = (f"-k {self.folder} -c listen_addresses='' -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off -c shared_buffers=16MB "
                   "-c max_connections=60")
        subprocess.run(_as_owner([f"{self.bindir}/pg_ctl", "-D", self.data, "-w", "-t", "60",
                                  "-l", os.path.join(self.folder, "log"), "-o", options,
                                  "start"]),
                       check=True, capture_output=True, timeout=90, env=env)

    def stop(self) -> None:
        subprocess.run(_as_owner([f"{self.bindir}/pg_ctl", "-D", self.data, "-m", "immediate",
                                  "-w", "stop"]), capture_output=True, timeout=60)

    def execute(self, sql: str, params: Any = None, dbname: str = "postgres") -> list[Any]:
        """Run one statement as the superuser (autocommit); its rows, if any."""
        import psycopg

        with psycopg.connect(self.conninfo(dbname), autocommit=True) as conn:
            cursor = conn.execute(sql, params)
            return cursor.fetchall() if cursor.description else []


def _nobody() -> tuple[int, int]:
    import pwd

    entry = pwd.getpwnam("nobody")
    return entry.pw_uid, entry.pw_gid


def postgres_cluster() -> Iterator[Cluster]:
    """The body of the session fixture `postgres`: skip without psycopg or the binaries."""
    pytest.importorskip("psycopg", reason="psycopg is not installed (pip install "
                                          "'gen-agent[postgres]'; make test installs it)")
    bindir = _bin_dir()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries not found (Debian: apt-get install "
                    "postgresql; make test installs it where apt runs as root)")
    folder = tempfile.mkdtemp(prefix="ga_pg_")
    cluster = Cluster(folder, bindir)
    try:
        cluster.start()
    except subprocess.CalledProcessError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        pytest.skip(f"PostgreSQL did not start: {exc.stderr.decode(errors='replace')[-300:]}")
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)


TABLES = "gen_agent_sessions, gen_agent_leases, gen_agent_tool_calls"


def wipe(cluster: Cluster, dbname: str = "postgres") -> None:
    """Empty the store's tables (each test starts from an empty database)."""
    if cluster.execute("SELECT to_regclass('gen_agent_sessions')", dbname=dbname)[0][0]:
        cluster.execute(f"TRUNCATE {TABLES}", dbname=dbname)
