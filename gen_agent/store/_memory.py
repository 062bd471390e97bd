"""`MemoryStore`: a `SessionStore` in this process's memory (tests, ephemeral agents)."""

from __future__ import annotations

import threading
import time
from typing import Any

import msgspec

from gen_agent.store._lease import forget_token, holder_alive, new_lease
from gen_agent.store._records import (
    InFlightTurn,
    Lease,
    LeaseHeld,
    SessionRecord,
    StoreError,
    ToolCallEntry,
    check_key,
    decode_entries,
    decode_record,
    encode_entry,
    encode_fields,
)

__all__ = ["MemoryStore"]


# -- MemoryStore ---------------------------------------------------------------------------


class MemoryStore:
    """A `SessionStore` in this process's memory (tests, ephemeral agents). Thread-safe.

    Values are encoded on write and decoded on read, exactly as `SQLiteStore` does, so a value
    that would not survive a file does not survive here either. Leases follow the same rules
    (one live owner per key); all owners are this process.

    Mirrors: nothing in the original.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[str, dict[str, Any]] = {}
        self._leases: dict[str, Lease] = {}
        self._journal: dict[str, dict[tuple[str, str], bytes]] = {}

    def acquire(self, key: str) -> Lease:
        """Take `key`'s lease. Raises `LeaseHeld` if a live owner holds it."""
        check_key(key)
        now = time.time()
        with self._lock:
            holder = self._leases.get(key)
            if holder is not None and holder_alive(holder, float("inf"), now):
                raise LeaseHeld(key, holder)
            lease = new_lease(key, now, previous=holder)
            self._leases[key] = lease
            return lease

    def release(self, lease: Lease) -> None:
        """Give up `lease` (no-op when no longer held)."""
        forget_token(lease.token)
        with self._lock:
            if (held := self._leases.get(lease.key)) is not None and held.token == lease.token:
                del self._leases[lease.key]

    def load(self, key: str) -> SessionRecord | None:
        """The record under `key`, or None. Raises `CorruptRecord`."""
        with self._lock:
            row = self._rows.get(key)
            if row is None:
                return None
            row = dict(row)
            lease = self._leases.get(key)
        return decode_record(key, row["blobs"], row["created_at"], row["updated_at"], lease)

    def update(self, lease: Lease, *, sync: bool = True, **fields: Any) -> None:
        """Write `fields` of the lease's record (`sync` has no meaning in memory).

        Raises `StoreError("lease_lost")`."""
        blobs = encode_fields(fields)
        now = time.time()
        with self._lock:
            held = self._leases.get(lease.key)
            if held is None or held.token != lease.token:
                raise StoreError("lease_lost", f"the lease of {lease.key!r} was lost")
            self._leases[lease.key] = msgspec.structs.replace(held, heartbeat_at=now)
            row = self._rows.setdefault(lease.key, {"blobs": {}, "created_at": now})
            row["blobs"].update(blobs)
            row["updated_at"] = now

    def journal_write(self, lease: Lease, entry: ToolCallEntry, *,
                      in_flight: InFlightTurn | None = None, sync: bool = True) -> None:
        """Store `entry` (and `in_flight` when given), fenced by the lease. Raises
        `StoreError("lease_lost")`, `StoreError("encode_error")`."""
        blob = encode_entry(entry)
        marker = None if in_flight is None else encode_fields({"in_flight": in_flight})
        now = time.time()
        with self._lock:
            held = self._leases.get(lease.key)
            if held is None or held.token != lease.token:
                raise StoreError("lease_lost", f"the lease of {lease.key!r} was lost")
            self._journal.setdefault(lease.key, {})[entry.ref, entry.call_id] = blob
            if marker is not None:
                row = self._rows.setdefault(lease.key, {"blobs": {}, "created_at": now})
                row["blobs"].update(marker)
                row["updated_at"] = now

    def journal(self, key: str) -> list[ToolCallEntry]:
        """`key`'s journal entries, oldest first. Raises `CorruptRecord`."""
        with self._lock:
            blobs = list(self._journal.get(key, {}).values())
        return decode_entries(key, blobs)

    def journal_clear(self, lease: Lease) -> None:
        """Remove the lease's key's journal entries."""
        with self._lock:
            self._journal.pop(lease.key, None)

    def list_keys(self) -> list[str]:
        """Every stored key, sorted."""
        with self._lock:
            return sorted(self._rows)

    def delete(self, key: str, *, force: bool = False) -> bool:
        """Remove `key`'s record and lease. Raises `LeaseHeld` for a live owner unless
        `force`. Returns whether a record existed."""
        with self._lock:
            holder = self._leases.get(key)
            if holder is not None and not force and holder_alive(holder, float("inf"),
                                                                   time.time()):
                raise LeaseHeld(key, holder)
            self._leases.pop(key, None)
            self._journal.pop(key, None)
            return self._rows.pop(key, None) is not None

    def corrupt(self, key: str, field: str, blob: bytes) -> None:
        """Test helper: store raw `blob` as `field` of `key` (creates the record)."""
        with self._lock:
            now = time.time()
            row = self._rows.setdefault(key, {"blobs": {}, "created_at": now})
            row["blobs"][field] = blob
            row["updated_at"] = now

    def close(self) -> None:
        """Nothing to release (idempotent)."""
