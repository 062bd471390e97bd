"""`SQLiteStore`: a `SessionStore` in one SQLite file (stdlib `sqlite3`, WAL), the embedded
default. One connection per store under a lock; every write is one `BEGIN IMMEDIATE`
transaction; SQLite's busy/locked errors are waited out (`busy_timeout`) and never reach a
caller as `database is locked`.
"""

from __future__ import annotations

import contextlib
import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Final, Literal, TypeVar

import msgspec

from gen_agent.store._lease import forget_token, holder_alive, new_lease
from gen_agent.store._records import (
    ENCODER,
    FIELDS,
    LEASE_DECODER,
    SCHEMA_VERSION,
    CorruptRecord,
    InFlightTurn,
    Lease,
    LeaseHeld,
    SessionRecord,
    StoreError,
    StoreSchemaError,
    ToolCallEntry,
    check_key,
    decode_entries,
    decode_record,
    encode_entry,
    encode_fields,
)

__all__ = ["SQLiteStore"]


# -- SQLiteStore ---------------------------------------------------------------------------

_SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS sessions (
        key TEXT PRIMARY KEY,
        backend BLOB, conversation BLOB, state BLOB, totals BLOB,
        in_flight BLOB, interrupted BLOB, last_outcome BLOB,
        created_at REAL NOT NULL, updated_at REAL NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS leases (
        key TEXT PRIMARY KEY, token TEXT NOT NULL, lease BLOB NOT NULL,
        heartbeat_at REAL NOT NULL)""",
)
# Schema 2: the tool journal, one row per tool call of the running turn (cleared when the
# turn's conversation record is written). `seq` keeps the calls in journal order.
_JOURNAL_SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS tool_calls (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        key TEXT NOT NULL, ref TEXT NOT NULL, call_id TEXT NOT NULL, entry BLOB NOT NULL,
        UNIQUE (key, ref, call_id))""",
)
_JOURNAL_UPSERT: Final = (
    "INSERT INTO tool_calls (key, ref, call_id, entry) SELECT ?, ?, ?, ? WHERE EXISTS "
    "(SELECT 1 FROM leases WHERE key = ? AND token = ?) ON CONFLICT (key, ref, call_id) "
    "DO UPDATE SET entry = excluded.entry")
_MARKER: Final = ("UPDATE sessions SET in_flight = ?, updated_at = ? WHERE key = ? AND "
                  "EXISTS (SELECT 1 FROM leases WHERE key = ? AND token = ?)")
_T = TypeVar("_T")
_UPSERTS: dict[tuple[str, ...], str] = {}  # the upsert statement of each field set
_BEAT: Final = "UPDATE leases SET heartbeat_at = ? WHERE key = ? AND token = ?"


def _busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, 6)  # SQLITE_BUSY, SQLITE_LOCKED
    text = str(exc).lower()
    return "locked" in text or "busy" in text


class SQLiteStore:
    """A `SessionStore` in one SQLite file (stdlib `sqlite3`, WAL journal): the embedded
    default. Thread-safe (one connection per store, used under a lock) and process-safe: any
    number of processes on one host may share the file.

    Args:
        path: the database file (created with its directory's permissions; `~` expanded).
        synchronous: `"NORMAL"` (default: a committed turn survives a crash of the process,
            WAL without an fsync per commit) or `"FULL"` (it also survives a crash of the
            machine: an fsync per commit, i.e. per store write of a turn).
        busy_timeout: how long one operation waits for other processes' write locks before
            failing with `StoreError("busy")` (seconds, default 30.0). Callers never see
            SQLite's `database is locked`: waits are retried inside this bound.
        lease_ttl_s: how long a lease of an owner on another host (or one whose liveness
            cannot be checked) stays valid after its last heartbeat (seconds, default 60.0).
            Writes refresh the heartbeat at most every `lease_ttl_s / 4`; an idle owner
            may call `heartbeat(lease)`.
            Owners on this host are checked directly (pid, start time, boot id): a dead
            owner's lease is taken over at once.

    Raises:
        StoreSchemaError: the file has a newer schema version than `SCHEMA_VERSION`.
        StoreError: `"io_error"` (not a database, unwritable, ...) or `"busy"`.
        ValueError: `synchronous` is not `"NORMAL"` or `"FULL"`.

    Note: SQLite's WAL mode needs shared memory, so the file must not live on a network
    file system shared between hosts (SQLite's own rule).

    Mirrors: nothing in the original.
    """

    def __init__(self, path: str | os.PathLike[str], *,
                 synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
                 busy_timeout: float = 30.0, lease_ttl_s: float = 60.0) -> None:
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError(f"synchronous must be 'NORMAL' or 'FULL', got {synchronous!r}")
        for name, value in (("busy_timeout", busy_timeout), ("lease_ttl_s", lease_ttl_s)):
            if (isinstance(value, bool) or not isinstance(value, int | float)
                    or not math.isfinite(value) or value <= 0):
                raise ValueError(f"{name} must be a finite number > 0 (seconds), got {value!r}")
        self.path = os.path.expanduser(os.fspath(path))
        self.synchronous = synchronous
        self.busy_timeout = float(busy_timeout)
        self.lease_ttl_s = float(lease_ttl_s)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        # When each lease of this store last refreshed its heartbeat (Unix time, seconds):
        # writes refresh it at most every quarter TTL, so most writes touch one page.
        self._beats: dict[str, float] = {}
        self._beat_every_s = self.lease_ttl_s / 4
        try:
            self._conn = self._retrying(self._open)
        except BaseException:
            self.close()
            raise

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r}, synchronous={self.synchronous!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # A store travels as its settings (e.g. in a child spec sent to a Ray node): the
        # receiving process opens its own connection to the same file.
        return (_reopen, (self.path, self.synchronous, self.busy_timeout, self.lease_ttl_s))

    # ---------------------------------------------------------------- connection
    def _open(self) -> sqlite3.Connection:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None,
                               check_same_thread=False)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError("io_error", f"session store {self.path!r}: WAL unavailable")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            self._migrate(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _migrate(self, conn: sqlite3.Connection) -> None:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreSchemaError(self.path, version, SCHEMA_VERSION)
        if version == SCHEMA_VERSION:
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreSchemaError(self.path, version, SCHEMA_VERSION)
            if version == 0:
                tables = {row[0] for row in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'")}
                if tables - {"sessions", "leases", "tool_calls", "sqlite_sequence"}:
                    raise StoreError("io_error", f"{self.path!r} is a SQLite database of "
                                                 f"something else (tables {sorted(tables)})")
                for statement in _SCHEMA:
                    conn.execute(statement)
            if version < 2:
                # 1 -> 2: the tool journal; the new record fields have defaults, so version-1
                # blobs decode as they are.
                for statement in _JOURNAL_SCHEMA:
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise

    def _retrying(self, fn: Callable[[], _T]) -> _T:
        """Run `fn`, retrying SQLite's busy/locked errors until `busy_timeout` has passed;
        translate every sqlite3 error into a `StoreError`."""
        try:
            return fn()
        except sqlite3.Error as exc:
            if not _busy(exc):
                raise StoreError("io_error",
                                 f"session store {self.path!r}: {_describe(exc)}") from None
        deadline = time.monotonic() + self.busy_timeout
        pause = 0.001
        while True:
            try:
                return fn()
            except sqlite3.Error as exc:
                if _busy(exc) and time.monotonic() < deadline:
                    time.sleep(pause)
                    pause = min(pause * 2, 0.05)
                    continue
                kind = "busy" if _busy(exc) else "io_error"
                raise StoreError(kind, f"session store {self.path!r}: {_describe(exc)}") from None

    @contextlib.contextmanager
    def _transaction(self, *, write: bool) -> Iterator[sqlite3.Connection]:
        conn = self._conn
        if conn is None:
            raise StoreError("closed", "the session store is closed")
        conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            yield conn
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _run(self, fn: Callable[[sqlite3.Connection], _T], *, write: bool = True,
             sync: bool = True) -> _T:
        relaxed = not sync and self.synchronous == "FULL"

        def attempt() -> _T:
            with self._lock:
                conn = self._conn
                if relaxed and conn is not None:
                    conn.execute("PRAGMA synchronous = NORMAL")  # this commit: no fsync
                try:
                    with self._transaction(write=write) as conn:
                        return fn(conn)
                finally:
                    if relaxed and self._conn is not None:
                        self._conn.execute("PRAGMA synchronous = FULL")
        return self._retrying(attempt)

    # ---------------------------------------------------------------- leases
    def _holder(self, conn: sqlite3.Connection, key: str) -> Lease | None:
        row = conn.execute("SELECT lease, heartbeat_at FROM leases WHERE key = ?",
                           (key,)).fetchone()
        if row is None:
            return None
        try:
            lease = LEASE_DECODER.decode(row[0])
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None  # an unreadable lease protects nothing: take it over
        # The heartbeat lives in its own column (refreshed without rewriting the lease).
        return msgspec.structs.replace(lease, heartbeat_at=float(row[1]))

    def acquire(self, key: str) -> Lease:
        """Take `key`'s lease (one live owner per key, across processes).

        Returns:
            The new `Lease`.

        Raises:
            LeaseHeld: a live owner holds it (same host: its process runs; other host: its
                heartbeat is younger than `lease_ttl_s`).
            StoreError: `"busy"`, `"io_error"`, `"closed"`.
        """
        check_key(key)

        def take(conn: sqlite3.Connection) -> Lease:
            now = time.time()
            holder = self._holder(conn, key)
            if holder is not None and holder_alive(holder, self.lease_ttl_s, now):
                raise LeaseHeld(key, holder)
            lease = new_lease(key, now, previous=holder)
            conn.execute("INSERT OR REPLACE INTO leases (key, token, lease, heartbeat_at) "
                         "VALUES (?, ?, ?, ?)", (key, lease.token, ENCODER.encode(lease), now))
            return lease

        lease = self._run(take)
        self._beats[lease.token] = lease.heartbeat_at
        return lease

    def release(self, lease: Lease) -> None:
        """Give `lease` up (no-op when another owner holds the key now)."""
        forget_token(lease.token)
        self._beats.pop(lease.token, None)
        self._run(lambda conn: conn.execute(
            "DELETE FROM leases WHERE key = ? AND token = ?", (lease.key, lease.token)))

    def heartbeat(self, lease: Lease) -> None:
        """Refresh `lease`'s heartbeat (every `update` does too). Raises
        `StoreError("lease_lost")` when it is no longer held."""

        def beat(conn: sqlite3.Connection) -> None:
            cursor = conn.execute("UPDATE leases SET heartbeat_at = ? WHERE key = ? AND "
                                  "token = ?", (time.time(), lease.key, lease.token))
            if cursor.rowcount == 0:
                raise StoreError("lease_lost", f"the lease of {lease.key!r} was lost")

        self._run(beat)

    # ---------------------------------------------------------------- records
    def load(self, key: str) -> SessionRecord | None:
        """The record stored under `key`, or None.

        Raises:
            CorruptRecord: a field does not decode (names the key and the field).
            StoreError: `"busy"`, `"io_error"`, `"closed"`.
        """
        columns = ", ".join(FIELDS)

        def read(conn: sqlite3.Connection) -> tuple[Any, Lease | None] | None:
            row = conn.execute(f"SELECT {columns}, created_at, updated_at FROM sessions "
                               "WHERE key = ?", (key,)).fetchone()
            return None if row is None else (row, self._holder(conn, key))

        found = self._run(read, write=False)
        if found is None:
            return None
        row, lease = found
        blobs = dict(zip(FIELDS, row[:len(FIELDS)], strict=True))
        for name, blob in blobs.items():
            if blob is not None and not isinstance(blob, bytes):
                raise CorruptRecord(key, f"field {name!r} is not a blob")
        return decode_record(key, blobs, row[-2], row[-1], lease)

    def update(self, lease: Lease, *, sync: bool = True, **fields: Any) -> None:
        """Write `fields` (names of `SessionRecord` fields) of the lease's record, creating
        it, fenced by the lease in the same statement; the lease's heartbeat is refreshed
        with it at most every `lease_ttl_s / 4` seconds (so most writes touch one page).

        `sync=False` lets a `synchronous="FULL"` store skip this commit's fsync: the write
        becomes durable against a machine crash with the next synced commit (WAL commits are
        ordered; one fsync covers every earlier frame). The runtime uses it to fsync once per
        turn, on the last write before the reply. No effect at `"NORMAL"`.

        Raises:
            StoreError: `"lease_lost"` (another owner holds the key now), `"encode_error"`,
                `"busy"`, `"io_error"`, `"closed"`.
            TypeError: an unknown field name.
        """
        blobs = encode_fields(fields)
        names = tuple(blobs)
        sql = _UPSERTS.get(names)
        if sql is None:
            assignments = ", ".join(f"{name} = excluded.{name}" for name in names)
            # Fenced by the lease in the same statement: no row is written unless the token
            # still holds the key (one WAL page per commit, not two).
            sql = _UPSERTS[names] = (
                f"INSERT INTO sessions (key, {', '.join(names)}, created_at, updated_at) "
                f"SELECT ?, {', '.join('?' * len(names))}, ?, ? WHERE EXISTS (SELECT 1 FROM "
                f"leases WHERE key = ? AND token = ?) ON CONFLICT (key) DO UPDATE "
                f"SET {assignments}{', ' if names else ''}updated_at = excluded.updated_at")
        values = tuple(blobs.values())
        relaxed = not sync and self.synchronous == "FULL"
        key, token = lease.key, lease.token

        def write() -> None:
            # The hot path of every turn: one transaction, no context managers or closures.
            with self._lock:
                conn = self._conn
                if conn is None:
                    raise StoreError("closed", "the session store is closed")
                if relaxed:
                    conn.execute("PRAGMA synchronous = NORMAL")  # this commit: no fsync
                try:
                    now = time.time()
                    beat = now - self._beats.get(token, 0.0) >= self._beat_every_s
                    if beat:
                        conn.execute("BEGIN IMMEDIATE")
                    try:
                        written = conn.execute(sql, (key, *values, now, now, key, token))
                        if written.rowcount == 0:
                            raise StoreError("lease_lost", f"the lease of {key!r} was lost")
                        if beat:
                            conn.execute(_BEAT, (now, key, token))
                    except BaseException:
                        if beat:
                            with contextlib.suppress(sqlite3.Error):
                                conn.execute("ROLLBACK")
                        raise
                    if beat:
                        conn.execute("COMMIT")
                        self._beats[token] = now
                finally:
                    if relaxed:
                        conn.execute("PRAGMA synchronous = FULL")

        self._retrying(write)

    # ---------------------------------------------------------------- tool journal
    def journal_write(self, lease: Lease, entry: ToolCallEntry, *,
                      in_flight: InFlightTurn | None = None, sync: bool = True) -> None:
        """Store `entry` (replacing the entry of the same `ref` and `call_id`) and, when
        given, the `in_flight` marker, in one transaction fenced by the lease.

        `sync=False`: as for `update` (the runtime syncs a side-effecting tool's `started`).

        Raises:
            StoreError: `"lease_lost"`, `"encode_error"`, `"busy"`, `"io_error"`, `"closed"`.
        """
        blob = encode_entry(entry)
        marker = None if in_flight is None else encode_fields({"in_flight": in_flight})
        key, token = lease.key, lease.token

        def write(conn: sqlite3.Connection) -> None:
            written = conn.execute(_JOURNAL_UPSERT, (key, entry.ref, entry.call_id, blob,
                                                     key, token))
            if written.rowcount == 0:
                raise StoreError("lease_lost", f"the lease of {key!r} was lost")
            if marker is not None:
                conn.execute(_MARKER, (marker["in_flight"], time.time(), key, key, token))

        self._run(write, sync=sync)

    def journal(self, key: str) -> list[ToolCallEntry]:
        """Every journal entry stored under `key`, oldest first.

        Raises:
            CorruptRecord: an entry does not decode.
            StoreError: `"busy"`, `"io_error"`, `"closed"`.
        """
        rows = self._run(lambda conn: conn.execute(
            "SELECT entry FROM tool_calls WHERE key = ? ORDER BY seq", (key,)).fetchall(),
            write=False)
        return decode_entries(key, (row[0] for row in rows))

    def journal_clear(self, lease: Lease) -> None:
        """Remove the lease's key's journal entries (fenced: a lost lease clears nothing).

        Raises:
            StoreError: `"busy"`, `"io_error"`, `"closed"`.
        """
        self._run(lambda conn: conn.execute(
            "DELETE FROM tool_calls WHERE key = ? AND EXISTS (SELECT 1 FROM leases WHERE "
            "key = ? AND token = ?)", (lease.key, lease.key, lease.token)))

    def list_keys(self) -> list[str]:
        """Every stored key, sorted."""
        return self._run(lambda conn: [row[0] for row in conn.execute(
            "SELECT key FROM sessions ORDER BY key")], write=False)

    def delete(self, key: str, *, force: bool = False) -> bool:
        """Remove `key`'s record and lease; True if a record existed.

        Raises:
            LeaseHeld: a live owner holds the key and `force` is False.
        """

        def remove(conn: sqlite3.Connection) -> bool:
            holder = self._holder(conn, key)
            if holder is not None and not force and holder_alive(holder, self.lease_ttl_s,
                                                                   time.time()):
                raise LeaseHeld(key, holder)
            conn.execute("DELETE FROM leases WHERE key = ?", (key,))
            conn.execute("DELETE FROM tool_calls WHERE key = ?", (key,))
            return conn.execute("DELETE FROM sessions WHERE key = ?", (key,)).rowcount > 0

        return self._run(remove)

    def close(self) -> None:
        """Close the connection (idempotent); later calls raise `StoreError("closed")`."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _reopen(path: str, synchronous: Any, busy_timeout: float, lease_ttl_s: float) -> SQLiteStore:
    return SQLiteStore(path, synchronous=synchronous, busy_timeout=busy_timeout,
                       lease_ttl_s=lease_ttl_s)


# What SQLite's primary result codes mean for a store file, in words a reader can act on. The
# codes are SQLite's own (never data from the file), so they may appear in messages and logs.
_MEANING = {
    "SQLITE_CORRUPT": "the file is damaged: its database image is malformed",
    "SQLITE_NOTADB": "the file is not a SQLite database",
    "SQLITE_CANTOPEN": "the file cannot be opened",
    "SQLITE_READONLY": "the file or its folder is read-only",
    "SQLITE_FULL": "the disk is full",
    "SQLITE_IOERR": "an I/O error reading or writing the file",
    "SQLITE_PERM": "permission denied",
}


def _describe(exc: sqlite3.Error) -> str:
    """`DatabaseError (the file is damaged ...)`: the exception type and what SQLite's result
    code means, never the exception's message."""
    name = getattr(exc, "sqlite_errorname", None)
    if not isinstance(name, str):
        return type(exc).__name__
    meaning = _MEANING.get("_".join(name.split("_")[:2]))  # SQLITE_IOERR_READ: SQLITE_IOERR
    return f"{type(exc).__name__} ({name}: {meaning})" if meaning else \
        f"{type(exc).__name__} ({name})"

