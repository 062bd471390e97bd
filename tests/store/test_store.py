"""`SQLiteStore` on its own: schema versions, files that are no store, durability levels
(the protocol tests every store passes are in `test_conformance.py`)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gen_agent._response import Response
from gen_agent.store import (
    SCHEMA_VERSION,
    MemoryStore,
    SQLiteStore,
    StoreError,
    StoreSchemaError,
    Totals,
)


def test_totals_sum_what_responses_carry() -> None:
    first = Response(text="a", usage={"input_tokens": 3, "output_tokens": 2, "model": "x"},
                     cost_usd=0.25)
    second = Response(text="b", usage={"input_tokens": 1}, cost_usd=None)
    totals = Totals().add(first).add(second)
    assert totals == Totals(turns=2, usage={"input_tokens": 4, "output_tokens": 2},
                            cost_usd=0.25)


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


