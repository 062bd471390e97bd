"""`PostgresStore` on its own, against the throwaway server of `tests/pgcluster.py`: its
schema version, bad settings, an unreachable server, a dropped connection, what its repr and
pickle carry, and many processes creating the schema and writing at once. (The protocol
tests every store passes are in `test_conformance.py`.)"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gen_agent.store import SCHEMA_VERSION, PostgresStore, StoreError, StoreSchemaError, Totals


@pytest.fixture
def database(postgres: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh, empty database of its own (its conninfo)."""
    name = "t_" + request.node.name[-40:].lower().replace("-", "_")
    postgres.execute(f"DROP DATABASE IF EXISTS {name}")
    postgres.execute(f"CREATE DATABASE {name}")
    yield postgres.conninfo(name)
    postgres.execute(f"DROP DATABASE {name} WITH (FORCE)")


def test_the_schema_is_created_once_and_a_newer_one_is_refused(postgres: Any,
                                                                 database: str) -> None:
    dbname = database.rsplit("=", 1)[1]
    with PostgresStore(database) as store:
        store.update(store.acquire("k"), totals=Totals(turns=1))
    PostgresStore(database).close()  # opens again: nothing to create
    assert postgres.execute("SELECT version FROM gen_agent_schema", dbname=dbname) == [
        (SCHEMA_VERSION,)]
    postgres.execute("UPDATE gen_agent_schema SET version = version + 1", dbname=dbname)
    with pytest.raises(StoreSchemaError) as caught:
        PostgresStore(database)
    assert (caught.value.found, caught.value.supported) == (SCHEMA_VERSION + 1, SCHEMA_VERSION)
    assert "newer" in str(caught.value)
    assert postgres.execute("SELECT count(*) FROM gen_agent_sessions", dbname=dbname) == [(1,)]


def test_settings_are_checked_and_an_unreachable_server_is_an_io_error(tmp_path: Path) -> None:
    for name in ("busy_timeout", "lease_ttl_s", "connect_timeout"):
        for bad in (0, float("nan"), float("inf"), True):
            with pytest.raises(ValueError, match=rf"{name} must be a finite number > 0"):
                PostgresStore("", **{name: bad})
    with pytest.raises(TypeError, match="conninfo must be a str"):
        PostgresStore(42)  # type: ignore[arg-type]
    with pytest.raises(StoreError) as caught:
        PostgresStore(f"host={tmp_path} user=x password=SECRET dbname=nowhere",
                      connect_timeout=2)
    assert caught.value.reason == "io_error" and "cannot connect" in str(caught.value)
    assert "SECRET" not in str(caught.value)


def test_repr_hides_the_password_and_a_pickle_reopens_the_database(postgres: Any) -> None:
    store = PostgresStore(postgres.conninfo() + " password=SECRET", lease_ttl_s=7.0)
    try:
        assert "SECRET" not in repr(store) and postgres.folder in repr(store)
        copy = pickle.loads(pickle.dumps(store))
        assert copy.lease_ttl_s == 7.0 and copy.conninfo == store.conninfo
        lease = copy.acquire("travelled")
        copy.update(lease, state=b"from the copy")
        record = store.load("travelled")
        assert record is not None and record.state == b"from the copy"
        copy.release(lease)
        copy.close()
        assert store.delete("travelled") is True
    finally:
        store.close()


def test_a_key_holding_nul_is_refused(postgres: Any) -> None:
    with PostgresStore(postgres.conninfo()) as store:
        with pytest.raises(ValueError, match="NUL"):
            store.acquire("a\x00b")
        assert store.delete("a\x00b") is False


def test_a_dropped_connection_is_opened_again(postgres: Any) -> None:
    with PostgresStore(postgres.conninfo()) as store:
        lease = store.acquire("reconnect")
        pid = store._conn.info.backend_pid
        postgres.execute("SELECT pg_terminate_backend(%s)", (pid,))
        store.update(lease, state=b"after")  # the next operation reconnects, once
        assert store._conn.info.backend_pid != pid
        record = store.load("reconnect")
        assert record is not None and record.state == b"after"
        store.release(lease)
        store.delete("reconnect")


_WRITER = """
import json, sys
from gen_agent.store import PostgresStore, Totals
conninfo, me = sys.argv[1], sys.argv[2]
store = PostgresStore(conninfo)
won = []
for i in range(30):
    key = f"k{i}"
    try:
        lease = store.acquire(key)
    except Exception as exc:
        assert type(exc).__name__ == "LeaseHeld", exc
        continue
    record = store.load(key)
    turns = 0 if record is None else record.totals.turns
    store.update(lease, totals=Totals(turns=turns + 1), state=me.encode())
    store.release(lease)
    won.append(key)
print(json.dumps(won))
"""


def test_processes_create_the_schema_and_share_keys_at_once(database: str,
                                                            tmp_path: Path) -> None:
    # Two processes open a database without the schema at the same moment, then race on
    # the same 30 keys: the schema is made once, and every write of a lease's holder lands.
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [subprocess.Popen([sys.executable, str(script), database, f"p{n}"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for n in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-1500:] for _, err in outs]
    wins = [json.loads(out) for out, _ in outs]
    with PostgresStore(database) as store:
        keys = store.list_keys()
        assert keys == sorted(f"k{i}" for i in range(30))
        for key in keys:
            record = store.load(key)
            assert record is not None and record.lease is None
            assert record.totals.turns == sum(key in won for won in wins)
