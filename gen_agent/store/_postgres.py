"""`PostgresStore`: a `SessionStore` in a PostgreSQL database (psycopg 3), shared by every
process and machine that reaches the server. The same records, leases, tool journal and
fencing as `SQLiteStore`, in four tables of their own (`gen_agent_schema`,
`gen_agent_sessions`, `gen_agent_leases`, `gen_agent_tool_calls`), so the database may hold
other applications' tables too.

Install with `pip install 'gen-agent[postgres]'`.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections.abc import Callable
from typing import Any, Final, TypeVar

import msgspec

from gen_agent.store._lease import forget_token, holder_alive, new_lease
from gen_agent.store._records import (
    ENCODER,
    FIELDS,
    LEASE_DECODER,
    SCHEMA_VERSION,
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

__all__ = ["PostgresStore"]

_T = TypeVar("_T")

_SCHEMA: Final = (
    """CREATE TABLE gen_agent_schema (
        id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL)""",
    """CREATE TABLE gen_agent_sessions (
        key TEXT PRIMARY KEY,
        backend BYTEA, conversation BYTEA, state BYTEA, totals BYTEA,
        in_flight BYTEA, interrupted BYTEA, last_outcome BYTEA,
        created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE gen_agent_leases (
        key TEXT PRIMARY KEY, token TEXT NOT NULL, lease BYTEA NOT NULL,
        heartbeat_at DOUBLE PRECISION NOT NULL)""",
    # One row per tool call of the running turn; `seq` keeps the journal order.
    """CREATE TABLE gen_agent_tool_calls (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        key TEXT NOT NULL, ref TEXT NOT NULL, call_id TEXT NOT NULL, entry BYTEA NOT NULL,
        UNIQUE (key, ref, call_id))""",
)
# The advisory lock that serializes creating the schema (any constant of our own).
_SCHEMA_LOCK: Final = 0x6761_6765_6E74_0001
# A write is fenced by the lease row, locked FOR SHARE: a takeover (which updates or deletes
# that row) waits for the write, or the write waits for it and then finds the token gone.
_FENCE: Final = ("EXISTS (SELECT 1 FROM gen_agent_leases WHERE key = %s AND token = %s "
                 "FOR SHARE)")
_BEAT: Final = ("WITH beat AS (UPDATE gen_agent_leases SET heartbeat_at = %s WHERE key = %s "
                "AND token = %s RETURNING key) ")
_JOURNAL_UPSERT: Final = (
    "INSERT INTO gen_agent_tool_calls (key, ref, call_id, entry) SELECT %s, %s, %s, %s "
    f"WHERE {_FENCE} ON CONFLICT (key, ref, call_id) DO UPDATE SET entry = excluded.entry")
_MARKER: Final = (f"UPDATE gen_agent_sessions SET in_flight = %s, updated_at = %s WHERE key = %s "
                  f"AND {_FENCE}")
_UPSERTS: dict[tuple[tuple[str, ...], bool], str] = {}


def _lock_id(key: str) -> int:
    """A signed 64-bit advisory lock id for `key` (collisions only serialize two acquires)."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big",
                          signed=True)


def _upsert(names: tuple[str, ...], beat: bool) -> str:
    sql = _UPSERTS.get((names, beat))
    if sql is None:
        columns = "".join(f", {name}" for name in names)
        values = "".join(", %s" for _ in names)
        assignments = "".join(f"{name} = excluded.{name}, " for name in names)
        conflict = (f"ON CONFLICT (key) DO UPDATE SET {assignments}"
                    "updated_at = excluded.updated_at")
        if beat:  # the heartbeat and the write in one statement, fenced by the update
            sql = (f"{_BEAT}INSERT INTO gen_agent_sessions (key{columns}, created_at, "
                   f"updated_at) SELECT key{values}, %s, %s FROM beat {conflict}")
        else:
            sql = (f"INSERT INTO gen_agent_sessions (key{columns}, created_at, updated_at) "
                   f"SELECT %s{values}, %s, %s WHERE {_FENCE} {conflict}")
        _UPSERTS[(names, beat)] = sql
    return sql


def _check_seconds(name: str, value: Any) -> float:
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value) or value <= 0):
        raise ValueError(f"{name} must be a finite number > 0 (seconds), got {value!r}")
    return float(value)


class PostgresStore:
    """A `SessionStore` and `ToolJournal` in a PostgreSQL database (psycopg 3): the store
    several machines share (hosts on Ray, several servers). Thread-safe (one connection per
    store, used under a lock) and process-safe: any number of processes and machines may
    share the database.

    Args:
        conninfo: a libpq connection string or URI (`"postgresql://user@db.internal/app"`,
            `"host=/run/postgresql dbname=app"`); empty: libpq's defaults and `PG*`
            environment variables.
        lease_ttl_s: how long a lease of an owner on another host stays valid after its
            last heartbeat (seconds, default 60.0); writes refresh it at most every
            `lease_ttl_s / 4`, an idle owner may call `heartbeat(lease)`. Owners on this host
            are checked directly (pid, start time, boot id): a dead owner's lease is taken
            over at once, as with `SQLiteStore`.
        busy_timeout: how long one operation waits for other sessions' row locks before
            failing with `StoreError("busy")` (seconds, default 30.0; PostgreSQL's
            `lock_timeout`).
        connect_timeout: seconds to wait for the server when (re)connecting (default 10).

    Durability is the server's (`synchronous_commit`, `fsync`): every write is committed
    before it returns; `sync=False` has no effect here. A connection the server dropped is
    opened again once per operation, so a restarted server costs the callers of that
    moment one `StoreError("io_error")` at most.

    Raises:
        ImportError: psycopg is not installed (`pip install 'gen-agent[postgres]'`).
        StoreSchemaError: the database holds a newer schema version than `SCHEMA_VERSION`.
        StoreError: `"io_error"` (the server cannot be reached, refused the login, ...).
        ValueError: a bad timeout.

    Mirrors: nothing in the original (its agents persist nothing).
    """

    def __init__(self, conninfo: str = "", *, lease_ttl_s: float = 60.0,
                 busy_timeout: float = 30.0, connect_timeout: float = 10.0) -> None:
        try:
            import psycopg
        except ImportError as exc:
            raise ImportError("PostgresStore needs psycopg 3: pip install "
                              "'gen-agent[postgres]'") from exc
        if not isinstance(conninfo, str):
            raise TypeError(f"conninfo must be a str, got {type(conninfo).__name__}")
        self._psycopg = psycopg
        self.conninfo = conninfo
        self.lease_ttl_s = _check_seconds("lease_ttl_s", lease_ttl_s)
        self.busy_timeout = _check_seconds("busy_timeout", busy_timeout)
        self.connect_timeout = _check_seconds("connect_timeout", connect_timeout)
        self._lock = threading.Lock()
        self._conn: Any = None
        self._closed = False
        self._beats: dict[str, float] = {}
        self._beat_every_s = self.lease_ttl_s / 4
        try:
            self._name = self._describe_target()
        except Exception:  # noqa: BLE001 - a malformed string is reported by connect below
            self._name = "postgresql"
        with self._lock:
            self._connect()

    def _describe_target(self) -> str:
        # host and database only: never the password or the rest of the string
        params = self._psycopg.conninfo.conninfo_to_dict(self.conninfo)
        return f"postgresql {params.get('host', '')}/{params.get('dbname', '')}"

    def __repr__(self) -> str:
        return f"PostgresStore({self._name!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # A store travels as its settings (to a Ray node, say): the receiving process opens
        # its own connection to the same database.
        return (_reopen, (self.conninfo, self.lease_ttl_s, self.busy_timeout,
                          self.connect_timeout))

    # ---------------------------------------------------------------- connection
    def _connect(self) -> Any:
        """Open the connection and check (or create) the schema. Caller holds the lock."""
        psycopg = self._psycopg
        if self._closed:
            raise StoreError("closed", "the session store is closed")
        try:
            conn = psycopg.connect(self.conninfo, autocommit=True,
                                   connect_timeout=max(1, math.ceil(self.connect_timeout)))
        except psycopg.Error as exc:
            raise StoreError("io_error", f"session store {self._name}: cannot connect "
                                         f"({_describe(exc)})") from None
        try:
            conn.execute(f"SET lock_timeout = {int(self.busy_timeout * 1000)}")
            self._migrate(conn)
        except BaseException as exc:
            conn.close()
            if isinstance(exc, psycopg.Error):
                raise StoreError("io_error", f"session store {self._name}: "
                                             f"{_describe(exc)}") from None
            raise
        self._conn = conn
        return conn

    def _migrate(self, conn: Any) -> None:
        errors = self._psycopg.errors
        version = self._version(conn)
        for _attempt in range(3):
            if version is not None:
                break
            try:
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                    version = self._version(conn)  # another process may have created it
                    if version is None:
                        for statement in _SCHEMA:
                            conn.execute(statement)
                        conn.execute("INSERT INTO gen_agent_schema (id, version) VALUES "
                                     "(1, %s)", (SCHEMA_VERSION,))
                        version = SCHEMA_VERSION
            except (errors.DuplicateTable, errors.UniqueViolation):
                # Another process created it meanwhile: the catalog lookup above can miss a
                # table committed while this session waited for the lock. Read it again.
                version = self._version(conn)
        if version is None:
            raise StoreError("io_error", f"session store {self._name}: the schema could not "
                                         f"be created")
        if version > SCHEMA_VERSION:
            raise StoreSchemaError(self._name, version, SCHEMA_VERSION)

    @staticmethod
    def _version(conn: Any) -> int | None:
        if conn.execute("SELECT to_regclass('gen_agent_schema')").fetchone()[0] is None:
            return None
        row = conn.execute("SELECT version FROM gen_agent_schema WHERE id = 1").fetchone()
        return None if row is None else int(row[0])

    def _run(self, fn: Callable[[Any], _T]) -> _T:
        """Run `fn(connection)` under the lock; a connection the server dropped is opened
        again once; psycopg's errors become `StoreError`s (never with the server's message,
        which may quote data)."""
        errors = self._psycopg.errors
        deadline = time.monotonic() + self.busy_timeout
        reconnected = False
        while True:
            with self._lock:
                conn = self._conn
                if conn is None:
                    conn = self._connect()
                    reconnected = True
                try:
                    return fn(conn)
                except errors.LockNotAvailable:
                    raise StoreError("busy", f"session store {self._name}: a row stayed "
                                             f"locked past busy_timeout") from None
                except (errors.SerializationFailure, errors.DeadlockDetected) as exc:
                    if time.monotonic() >= deadline:
                        raise StoreError("busy", f"session store {self._name}: "
                                                 f"{_describe(exc)}") from None
                    continue
                except self._psycopg.OperationalError as exc:
                    if not conn.broken:
                        raise StoreError("io_error", f"session store {self._name}: "
                                                     f"{_describe(exc)}") from None
                    self._conn = None
                    conn.close()
                    if reconnected:
                        raise StoreError("io_error", f"session store {self._name}: the "
                                                     f"connection was lost") from None
                    reconnected = True
                except self._psycopg.Error as exc:
                    raise StoreError("io_error", f"session store {self._name}: "
                                                 f"{_describe(exc)}") from None

    # ---------------------------------------------------------------- leases
    @staticmethod
    def _holder(row: Any) -> Lease | None:
        if row is None or row[0] is None:
            return None
        try:
            lease = LEASE_DECODER.decode(row[0])
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None  # an unreadable lease protects nothing: take it over
        return msgspec.structs.replace(lease, heartbeat_at=float(row[1]))

    def acquire(self, key: str) -> Lease:
        """Take `key`'s lease (one live owner per key, across processes and machines).

        Returns:
            The new `Lease`.

        Raises:
            LeaseHeld: a live owner holds it (same host: its process runs; other host: its
                heartbeat is younger than `lease_ttl_s`).
            ValueError: a key that is not a non-empty str, or holds a NUL character
                (PostgreSQL text cannot).
            StoreError: `"busy"`, `"io_error"`, `"closed"`.
        """
        _check_pg_key(key)
        mine: list[str] = []  # tokens this call wrote (a retry after a lost ack finds one)

        def take(conn: Any) -> Lease:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_id(key),))
                holder = self._holder(conn.execute(
                    "SELECT lease, heartbeat_at FROM gen_agent_leases WHERE key = %s",
                    (key,)).fetchone())
                if holder is not None and holder.token in mine:
                    return holder
                now = time.time()
                if holder is not None and holder_alive(holder, self.lease_ttl_s, now):
                    raise LeaseHeld(key, holder)
                lease = new_lease(key, now, previous=holder)
                mine.append(lease.token)
                conn.execute(
                    "INSERT INTO gen_agent_leases (key, token, lease, heartbeat_at) VALUES "
                    "(%s, %s, %s, %s) ON CONFLICT (key) DO UPDATE SET token = excluded.token, "
                    "lease = excluded.lease, heartbeat_at = excluded.heartbeat_at",
                    (key, lease.token, ENCODER.encode(lease), now))
                return lease

        try:
            lease = self._run(take)
        except BaseException:
            for token in mine:
                forget_token(token)
            raise
        self._beats[lease.token] = lease.heartbeat_at
        return lease

    def release(self, lease: Lease) -> None:
        """Give `lease` up (no-op when another owner holds the key now)."""
        forget_token(lease.token)
        self._beats.pop(lease.token, None)
        self._run(lambda conn: conn.execute(
            "DELETE FROM gen_agent_leases WHERE key = %s AND token = %s",
            (lease.key, lease.token)))

    def heartbeat(self, lease: Lease) -> None:
        """Refresh `lease`'s heartbeat (writes do too). Raises `StoreError("lease_lost")`
        when it is no longer held."""

        def beat(conn: Any) -> None:
            cursor = conn.execute("UPDATE gen_agent_leases SET heartbeat_at = %s WHERE "
                                  "key = %s AND token = %s",
                                  (time.time(), lease.key, lease.token))
            if cursor.rowcount == 0:
                raise StoreError("lease_lost", f"the lease of {lease.key!r} was lost")

        self._run(beat)
        self._beats[lease.token] = time.time()

    # ---------------------------------------------------------------- records
    def load(self, key: str) -> SessionRecord | None:
        """The record stored under `key` (with its lease, read in one snapshot), or None.

        Raises:
            CorruptRecord: a field does not decode (names the key and the field).
            StoreError: `"busy"`, `"io_error"`, `"closed"`.
        """
        columns = ", ".join(f"s.{name}" for name in FIELDS)
        row = self._run(lambda conn: conn.execute(
            f"SELECT {columns}, s.created_at, s.updated_at, l.lease, l.heartbeat_at FROM "
            "gen_agent_sessions s LEFT JOIN gen_agent_leases l ON l.key = s.key "
            "WHERE s.key = %s", (key,)).fetchone())
        if row is None:
            return None
        blobs = dict(zip(FIELDS, row[:len(FIELDS)], strict=True))
        return decode_record(key, blobs, row[-4], row[-3], self._holder(row[-2:]))

    def update(self, lease: Lease, *, sync: bool = True, **fields: Any) -> None:
        """Write `fields` (names of `SessionRecord` fields) of the lease's record, creating
        it, in one statement fenced by the lease; the heartbeat is refreshed in the same
        statement at most every `lease_ttl_s / 4` seconds. `sync` has no effect (every
        write is committed).

        Raises:
            StoreError: `"lease_lost"` (another owner holds the key now), `"encode_error"`,
                `"busy"`, `"io_error"`, `"closed"`.
            TypeError: an unknown field name.
        """
        blobs = encode_fields(fields)
        names = tuple(blobs)
        values = tuple(blobs.values())
        key, token = lease.key, lease.token

        def write(conn: Any) -> None:
            now = time.time()
            beat = now - self._beats.get(token, 0.0) >= self._beat_every_s
            if beat:
                params: tuple[Any, ...] = (now, key, token, *values, now, now)
            else:
                params = (key, *values, now, now, key, token)
            if conn.execute(_upsert(names, beat), params).rowcount == 0:
                raise StoreError("lease_lost", f"the lease of {key!r} was lost")
            if beat:
                self._beats[token] = now

        self._run(write)

    # ---------------------------------------------------------------- tool journal
    def journal_write(self, lease: Lease, entry: ToolCallEntry, *,
                      in_flight: InFlightTurn | None = None, sync: bool = True) -> None:
        """Store `entry` (replacing the entry of the same `ref` and `call_id`) and, when
        given, the `in_flight` marker, in one transaction fenced by the lease.

        Raises:
            StoreError: `"lease_lost"`, `"encode_error"`, `"busy"`, `"io_error"`, `"closed"`.
        """
        blob = encode_entry(entry)
        marker = None if in_flight is None else encode_fields({"in_flight": in_flight})
        key, token = lease.key, lease.token

        def write(conn: Any) -> None:
            with conn.transaction():
                written = conn.execute(_JOURNAL_UPSERT, (key, entry.ref, entry.call_id, blob,
                                                         key, token))
                if written.rowcount == 0:
                    raise StoreError("lease_lost", f"the lease of {key!r} was lost")
                if marker is not None:
                    conn.execute(_MARKER, (marker["in_flight"], time.time(), key, key, token))

        self._run(write)

    def journal(self, key: str) -> list[ToolCallEntry]:
        """Every journal entry stored under `key`, oldest first.

        Raises:
            CorruptRecord: an entry does not decode.
            StoreError: `"busy"`, `"io_error"`, `"closed"`.
        """
        rows = self._run(lambda conn: conn.execute(
            "SELECT entry FROM gen_agent_tool_calls WHERE key = %s ORDER BY seq",
            (key,)).fetchall())
        return decode_entries(key, (row[0] for row in rows))

    def journal_clear(self, lease: Lease) -> None:
        """Remove the lease's key's journal entries (fenced: a lost lease clears nothing)."""
        self._run(lambda conn: conn.execute(
            f"DELETE FROM gen_agent_tool_calls WHERE key = %s AND {_FENCE}",
            (lease.key, lease.key, lease.token)))

    def list_keys(self) -> list[str]:
        """Every stored key, sorted by code point (as Python sorts)."""
        return self._run(lambda conn: [row[0] for row in conn.execute(
            'SELECT key FROM gen_agent_sessions ORDER BY key COLLATE "C"')])

    def delete(self, key: str, *, force: bool = False) -> bool:
        """Remove `key`'s record, journal and lease; True if a record existed.

        Raises:
            LeaseHeld: a live owner holds the key and `force` is False.
        """

        def remove(conn: Any) -> bool:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_id(key),))
                holder = self._holder(conn.execute(
                    "SELECT lease, heartbeat_at FROM gen_agent_leases WHERE key = %s",
                    (key,)).fetchone())
                if holder is not None and not force and holder_alive(
                        holder, self.lease_ttl_s, time.time()):
                    raise LeaseHeld(key, holder)
                conn.execute("DELETE FROM gen_agent_leases WHERE key = %s", (key,))
                conn.execute("DELETE FROM gen_agent_tool_calls WHERE key = %s", (key,))
                return bool(conn.execute("DELETE FROM gen_agent_sessions WHERE key = %s",
                                         (key,)).rowcount > 0)

        if "\x00" in key:
            return False  # never stored: PostgreSQL text cannot hold it
        return self._run(remove)

    def close(self) -> None:
        """Close the connection (idempotent); later calls raise `StoreError("closed")`."""
        with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_pg_key(key: Any) -> str:
    check_key(key)
    if "\x00" in key:
        raise ValueError(f"a PostgresStore session key cannot hold a NUL character, got "
                         f"{key!r}")
    return key  # type: ignore[no-any-return]


def _reopen(conninfo: str, lease_ttl_s: float, busy_timeout: float,
            connect_timeout: float) -> PostgresStore:
    return PostgresStore(conninfo, lease_ttl_s=lease_ttl_s, busy_timeout=busy_timeout,
                         connect_timeout=connect_timeout)


def _describe(exc: BaseException) -> str:
    """The exception's type and SQLSTATE, never its message (it may quote data)."""
    state = getattr(exc, "sqlstate", None)
    return f"{type(exc).__name__} (SQLSTATE {state})" if state else type(exc).__name__
