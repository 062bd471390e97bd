"""`gen_agent.store` on its own: records, schema versions, corrupt records, leases."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from gen_agent._response import Response
from gen_agent.store import (
    SCHEMA_VERSION,
    CorruptRecord,
    InFlightTurn,
    Lease,
    LeaseHeld,
    MemoryStore,
    SessionStore,
    SQLiteStore,
    StoreError,
    StoreSchemaError,
    Totals,
)


@pytest.fixture(params=["sqlite", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SessionStore]:
    made: SessionStore = SQLiteStore(tmp_path / "s.db") if request.param == "sqlite" \
        else MemoryStore()
    yield made
    made.close()


def test_a_record_round_trips(store: SessionStore) -> None:
    assert isinstance(store, SessionStore)
    assert store.load("k") is None
    lease = store.acquire("k")
    flight = InFlightTurn(ref="r-1", origin="ask", attempt=1, started_at=1.5, pid=os.getpid())
    store.update(lease, conversation={"history": [{"role": "user", "content": "hi"}]},
                 state=b"\x01", totals=Totals(turns=2, usage={"input_tokens": 5}),
                 in_flight=flight)
    record = store.load("k")
    assert record is not None
    assert record.conversation == {"history": [{"role": "user", "content": "hi"}]}
    assert (record.state, record.totals.turns, record.totals.usage) == (b"\x01", 2,
                                                                       {"input_tokens": 5})
    assert record.in_flight == flight
    assert record.lease is not None and record.lease.token == lease.token
    store.update(lease, in_flight=None)
    record = store.load("k")
    assert record is not None and record.in_flight is None and record.state == b"\x01"
    assert store.list_keys() == ["k"]
    store.release(lease)
    assert store.delete("k") is True
    assert store.load("k") is None and store.list_keys() == []


def test_totals_sum_what_responses_carry() -> None:
    first = Response(text="a", usage={"input_tokens": 3, "output_tokens": 2, "model": "x"},
                     cost_usd=0.25)
    second = Response(text="b", usage={"input_tokens": 1}, cost_usd=None)
    totals = Totals().add(first).add(second)
    assert totals == Totals(turns=2, usage={"input_tokens": 4, "output_tokens": 2},
                            cost_usd=0.25)


def test_one_live_owner_per_key(store: SessionStore) -> None:
    lease = store.acquire("k")
    with pytest.raises(LeaseHeld) as caught:
        store.acquire("k")
    assert (caught.value.key, caught.value.holder.pid) == ("k", os.getpid())
    with pytest.raises(LeaseHeld):
        store.delete("k")
    store.release(lease)
    again = store.acquire("k")
    assert again.token != lease.token
    with pytest.raises(StoreError) as lost:
        store.update(lease, state=b"old owner")  # fenced: the released lease writes nothing
    assert lost.value.reason == "lease_lost"
    store.update(again, state=b"new owner")
    record = store.load("k")
    assert record is not None and record.state == b"new owner"


def test_a_dead_processs_lease_is_taken_over_at_once(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    code = ("import sys; from gen_agent.store import SQLiteStore; "
            "l = SQLiteStore(sys.argv[1]).acquire('k'); print(l.pid, flush=True)")
    child = subprocess.run([sys.executable, "-c", code, str(db)], capture_output=True,
                           text=True, timeout=60, check=True)
    store = SQLiteStore(db)
    lease = store.acquire("k")  # the child exited holding the lease: no wait, no error
    assert lease.pid == os.getpid() != int(child.stdout.split()[0])
    store.close()


def test_a_live_processs_lease_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    code = ("import sys; from gen_agent.store import SQLiteStore; "
            "SQLiteStore(sys.argv[1]).acquire('k'); print('held', flush=True); "
            "sys.stdin.readline()")
    child = subprocess.Popen([sys.executable, "-c", code, str(db)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        store = SQLiteStore(db)
        with pytest.raises(LeaseHeld) as caught:
            store.acquire("k")
        assert caught.value.holder.pid == child.pid
        store.close()
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)
        assert child.stdout is not None
        child.stdout.close()


def test_a_lease_of_another_host_expires_after_its_ttl(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db", lease_ttl_s=0.5)
    other = Lease(key="k", token="t", pid=1, host="elsewhere", heartbeat_at=0.0)
    fresh = msgspec.structs.replace(other, heartbeat_at=time.time() + 60)
    conn = sqlite3.connect(store.path)
    conn.execute("INSERT INTO leases VALUES (?, ?, ?, ?)",
                 ("k", "t", msgspec.msgpack.encode(fresh), fresh.heartbeat_at))
    conn.commit()
    with pytest.raises(LeaseHeld):
        store.acquire("k")
    conn.execute("UPDATE leases SET lease = ?, heartbeat_at = 0", (msgspec.msgpack.encode(other),))
    conn.commit()
    conn.close()
    assert store.acquire("k").host != "elsewhere"
    store.close()


def test_a_newer_schema_is_refused_and_left_alone(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    SQLiteStore(db).close()
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(StoreSchemaError) as caught:
        SQLiteStore(db)
    assert (caught.value.found, caught.value.supported) == (SCHEMA_VERSION + 1, SCHEMA_VERSION)
    assert "newer" in str(caught.value) and str(db) in str(caught.value)
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
    conn.close()


def test_another_applications_database_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "other.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE invoices (id INTEGER)")
    conn.close()
    with pytest.raises(StoreError) as caught:
        SQLiteStore(db)
    assert caught.value.reason == "io_error" and "invoices" in str(caught.value)


def test_a_file_that_is_no_database_is_an_io_error(tmp_path: Path) -> None:
    db = tmp_path / "junk.db"
    db.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError) as caught:
        SQLiteStore(db)
    assert caught.value.reason == "io_error"


def test_a_corrupt_field_names_the_key(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    store.update(store.acquire("good"), totals=Totals(turns=1))
    store.update(store.acquire("bad"), totals=Totals(turns=1))
    conn = sqlite3.connect(store.path)
    conn.execute("UPDATE sessions SET totals = ? WHERE key = 'bad'", (b"\xc1garbage",))
    conn.commit()
    conn.close()
    with pytest.raises(CorruptRecord) as caught:
        store.load("bad")
    assert (caught.value.key, caught.value.detail) == ("bad", "field 'totals' does not decode")
    good = store.load("good")
    assert good is not None and good.totals.turns == 1
    store.close()


def test_values_msgspec_cannot_encode_are_refused(store: SessionStore) -> None:
    lease = store.acquire("k")
    with pytest.raises(StoreError) as caught:
        store.update(lease, conversation={"client": object()})
    assert caught.value.reason == "encode_error"
    with pytest.raises(TypeError):
        store.update(lease, nonsense=1)


def test_a_lone_surrogate_is_stored_as_a_replacement_character(store: SessionStore) -> None:
    from gen_agent._portable import to_portable
    from gen_agent.store import TurnOutcome

    lease = store.acquire("k")
    reason = to_portable(("task_crashed", UnicodeEncodeError("utf-8", "a\ud800", 1, 2, "x")))
    store.update(lease, conversation={"history": [{"role": "user", "content": "hi \ud800",
                                                   "\udfff": ["\ud83d\ude00 ok"]}]},
                 last_outcome=TurnOutcome(ref="r", ok=False, reason=reason, ended_at=1.0),
                 state=b"\xed\xa0\x80")
    record = store.load("k")
    assert record is not None
    assert record.conversation == {"history": [{"role": "user", "content": "hi \ufffd",
                                                "\ufffd": ["\U0001f600 ok"]}]}
    assert record.last_outcome is not None and record.last_outcome.ok is False
    assert record.last_outcome.reason[1]["args"][1] == "a\ufffd"
    assert record.state == b"\xed\xa0\x80"  # bytes are never touched


def test_a_key_with_a_lone_surrogate_is_refused(store: SessionStore) -> None:
    with pytest.raises(ValueError, match="lone surrogate at index 2"):
        store.acquire("ab\udc80")
    assert store.list_keys() == []

def test_options_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="synchronous"):
        SQLiteStore(tmp_path / "s.db", synchronous="OFF")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="session key"):
        MemoryStore().acquire("")
    for name in ("busy_timeout", "lease_ttl_s"):
        for bad in (0, float("nan"), float("inf"), True):
            with pytest.raises(ValueError, match=rf"{name} must be a finite number > 0 \(sec"):
                SQLiteStore(tmp_path / "s.db", **{name: bad})


def test_full_durability_is_set_on_the_connection(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db", synchronous="FULL")
    assert store._conn is not None
    assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert store._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.close()
    with pytest.raises(StoreError) as caught:
        store.list_keys()
    assert caught.value.reason == "closed"


def test_an_unsynced_write_at_full_durability_keeps_full_for_the_next(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db", synchronous="FULL")
    lease = store.acquire("k")
    store.update(lease, sync=False, state=b"marker")  # fsynced by the next synced commit
    assert store._conn is not None
    assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 2
    store.update(lease, state=b"synced")
    record = store.load("k")
    assert record is not None and record.state == b"synced"
    store.close()


def test_writes_refresh_the_heartbeat_at_most_every_quarter_ttl(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db", lease_ttl_s=0.4)
    lease = store.acquire("k")
    first = lease.heartbeat_at
    store.update(lease, state=b"1")  # within a quarter TTL: the heartbeat is not rewritten
    assert store.load("k").lease.heartbeat_at == first  # type: ignore[union-attr]
    while time.time() <= first + 0.1:  # the clock must pass a quarter TTL (bounded)
        time.sleep(0.01)
    store.update(lease, state=b"2")
    assert store.load("k").lease.heartbeat_at > first  # type: ignore[union-attr]
    store.close()
