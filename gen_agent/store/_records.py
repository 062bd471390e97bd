"""The records, errors and protocol of `gen_agent.store`, and their MessagePack encoding.

Everything here is data: msgspec structs encoded with MessagePack, one blob per record field,
so a field can be written alone (the in-flight marker, the state) and a field that does not
decode names itself in `CorruptRecord`.
"""

from __future__ import annotations

import datetime
import decimal
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Final, Protocol, runtime_checkable

import msgspec
from loguru import logger

# The store's exceptions live with the rest of the tree; the store's namespace shows them.
from gen_agent._errors import CorruptRecord, LeaseHeld, StoreError, StoreSchemaError

__all__ = [
    "INTERRUPTED_NOTE",
    "OUTCOME_UNKNOWN",
    "SCHEMA_VERSION",
    "STORE_ERROR",
    "CorruptRecord",
    "InFlightTurn",
    "InterruptedTurn",
    "Lease",
    "LeaseHeld",
    "SessionRecord",
    "SessionStore",
    "StoreError",
    "StoreSchemaError",
    "StoreStatus",
    "ToolCallEntry",
    "ToolJournal",
    "Totals",
    "TurnOutcome",
]

SCHEMA_VERSION: Final = 2
"""The record schema this gen_agent reads and writes (SQLite `PRAGMA user_version`).

Versions: 1, the session record and the lease; 2 adds the tool journal (the `tool_calls`
table) and the payload fields of `InFlightTurn` / `InterruptedTurn` (a version-1 file is
migrated in place when opened)."""

OUTCOME_UNKNOWN: Final = (
    "outcome unknown: this tool call was started before the agent was interrupted and no "
    "result was recorded, so it may or may not have taken effect. It was not run again; "
    "check its effect before repeating it.")
"""The default result text (for the model) of an in-doubt call answered without running in a
`resend`; an agent class overrides it with an `outcome_unknown` class attribute (a `str`)."""

INTERRUPTED_NOTE: Final = (
    "[This turn was interrupted before it was answered (the process running it stopped); a "
    "tool result above saying \"outcome unknown\" may or may not have taken effect.]")
"""The default closing note (an assistant message) of an interrupted turn added to a resumed
HTTP backend's history; an agent class overrides it with an `interrupted_note` attribute."""

STORE_ERROR: Final = ("gen_agent", "store", "error")
"""Telemetry: a store write failed. Measurements `system_time`; metadata `agent`, `key`,
`operation` (`"begin"`, `"journal"`, `"conversation"`, `"state"`, `"release"`) and `kind` (the
`StoreError` reason). A gen_agent extension, not one of the contract's §8 events."""


# -- records -------------------------------------------------------------------------------


class Totals(msgspec.Struct, frozen=True, kw_only=True):
    """The per-session accounting totals: what the successful turns' `Response`s carried.

    Fields:
        turns: successful turns (count).
        usage: every integer field of `Response.usage`, summed per key (tokens).
        cost_usd: the sum of `Response.cost_usd` (US dollars; 0.0 when none reported).
        interrupted_turns: turns cut short by the owner's death or a stop (count); the usage
            they had reported is in `usage` too, so spend caps count it.
    """

    turns: int = 0
    usage: dict[str, int] = msgspec.field(default_factory=dict)
    cost_usd: float = 0.0
    interrupted_turns: int = 0

    def add_interrupted(self, usage: Mapping[str, int]) -> Totals:
        """These totals plus one interrupted turn that had reported `usage` (tokens)."""
        summed = dict(self.usage)
        for name, value in usage.items():
            if isinstance(value, int) and not isinstance(value, bool):
                summed[name] = summed.get(name, 0) + value
        return msgspec.structs.replace(self, usage=summed,
                                       interrupted_turns=self.interrupted_turns + 1)

    def add(self, response: Any) -> Totals:
        """These totals plus one successful turn's `Response` (a new `Totals`)."""
        usage = dict(self.usage)
        for name, value in (getattr(response, "usage", None) or {}).items():
            if isinstance(value, int) and not isinstance(value, bool):
                usage[name] = usage.get(name, 0) + value
        cost = getattr(response, "cost_usd", None)
        extra = float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else 0
        return Totals(turns=self.turns + 1, usage=usage, cost_usd=self.cost_usd + extra,
                      interrupted_turns=self.interrupted_turns)


class InFlightTurn(msgspec.Struct, frozen=True, kw_only=True):
    """The turn an owner has dispatched and not yet finished (the in-flight marker).

    Fields:
        ref: the request's ref, as text (`repr` of the `RequestRef`).
        origin: `"ask"`, `"tell"`, `"event"` or `"self_chain"`.
        attempt: the attempt number, 1-based.
        started_at: when it was dispatched (Unix time, seconds).
        pid: the owner process's id.
        prompt: the request's prompt (as the caller sent it, before `pre_turn`), or None.
        output: the structured-output type's name (`RequestOptions.output`), or None.
        tools: the names of the Python tools on offer.
        usage: the turn's usage reported so far (tokens; refreshed at most every 0.5 s and
            with every tool-journal write).
        phase: `"turn"` while the turn runs; `"after_response"` once its conversation is
            stored and its decision (the state write) is not yet.
        response: with `"after_response"`, the reply's text.
    """

    ref: str
    origin: str
    attempt: int
    started_at: float
    pid: int
    prompt: str | None = None
    output: str | None = None
    tools: tuple[str, ...] = ()
    usage: dict[str, int] = msgspec.field(default_factory=dict)
    phase: str = "turn"
    response: str | None = None

    def __repr__(self) -> str:
        return (f"InFlightTurn(ref={self.ref!r}, origin={self.origin!r}, "
                f"attempt={self.attempt}, phase={self.phase!r})")


class ToolCallEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One tool call of a turn as the tool journal holds it.

    Fields:
        ref: the turn's request ref, as text.
        call_id: the provider's tool-use id.
        tool: the tool's name.
        input: the arguments as the model sent them (a JSON object).
        started_at: when it was journalled as started (Unix time, seconds).
        source: `"python"` (a Python tool the runtime ran: journalled before it ran) or
            `"event"` (a tool the backend ran itself, e.g. a CLI's own: journalled from its
            `tool_use` / `tool_result` events, i.e. reported, not guarded).
        side_effects: the tool declared `side_effects=True`.
        finished_at: when its result was journalled (Unix time, seconds), or None: started,
            no finish recorded, i.e. *in doubt* once the turn is cut short.
        result: the result text (bounded like a retained event), or None.
        is_error: the result is an error result.
    """

    ref: str
    call_id: str
    tool: str
    input: Any = None
    started_at: float = 0.0
    source: str = "python"
    side_effects: bool = False
    finished_at: float | None = None
    result: str | None = None
    is_error: bool = False

    def __repr__(self) -> str:
        state = "in_doubt" if self.finished_at is None else "finished"
        return f"ToolCallEntry(call_id={self.call_id!r}, tool={self.tool!r}, {state})"


class InterruptedTurn(msgspec.Struct, frozen=True, kw_only=True, tag="interrupted_turn"):
    """A turn that was running when its agent's process died (or the agent was stopped):
    it was not answered and is not replayed.

    Sent once to `handle_info` at the next start on the same key, and shown in
    `Status.store.interrupted_turn` (and by `gen-agent sessions show`).

    Fields:
        key: the session key.
        ref: the interrupted request's ref, as text.
        origin: its origin (`"ask"`, `"tell"`, `"event"`, `"self_chain"`).
        attempt: its attempt number, 1-based.
        started_at: when it was dispatched (Unix time, seconds).
        detected_at: when the next start found it (Unix time, seconds).
        prompt: the request's prompt (before `pre_turn`), or None when unknown.
        output: the structured-output type's name, or None.
        tools: the names of the Python tools that were on offer.
        finished: the tool calls journalled as finished (`ToolCallEntry`, with results).
        in_doubt: the tool calls journalled as started with no finish: they may or may not
            have taken effect. The runtime never runs them again on its own.
        usage: the usage the turn had reported (tokens); counted in `Totals.usage`.
        phase: `"turn"` (cut short before its answer was stored) or `"after_response"` (its
            conversation and reply were stored; the decision callback's state write was
            not: reconcile the state with `response`).
        response: with `"after_response"`, the stored reply's text.

    `repr` shows no payload (prompt, inputs, results, response).
    """

    key: str
    ref: str
    origin: str
    attempt: int
    started_at: float
    detected_at: float
    prompt: str | None = None
    output: str | None = None
    tools: tuple[str, ...] = ()
    finished: tuple[ToolCallEntry, ...] = ()
    in_doubt: tuple[ToolCallEntry, ...] = ()
    usage: dict[str, int] = msgspec.field(default_factory=dict)
    phase: str = "turn"
    response: str | None = None

    def __repr__(self) -> str:
        return (f"InterruptedTurn(key={self.key!r}, ref={self.ref!r}, phase={self.phase!r}, "
                f"finished={len(self.finished)}, in_doubt={len(self.in_doubt)})")


class TurnOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """How the last finished turn of a session ended (data only).

    Fields:
        ref: the request's ref, as text.
        ok: True for a response, False for an error.
        reason: for an error, the reason in portable form (`gen_agent._portable.portable`:
            exceptions become `PortableException` records), else None.
        ended_at: Unix time, seconds.
    """

    ref: str
    ok: bool
    reason: Any = None
    ended_at: float = 0.0


class Lease(msgspec.Struct, frozen=True, kw_only=True):
    """Who owns a key: one live owner per key, across processes.

    Fields:
        key: the session key.
        token: the owner's random token (fences writes: a lost lease fails them).
        pid: the owner's process id.
        host: the owner's host name.
        boot_id: the owner host's boot id (Linux), so a reboot frees every lease.
        started_ticks: the owner process's start time (Linux clock ticks since boot), so a
            reused pid is not mistaken for the owner; 0 when unknown.
        heartbeat_at: the last write or heartbeat (Unix time, seconds).
        acquired_at: when the lease was taken (Unix time, seconds).
    """

    key: str
    token: str
    pid: int
    host: str
    boot_id: str = ""
    started_ticks: int = 0
    heartbeat_at: float = 0.0
    acquired_at: float = 0.0


class SessionRecord(msgspec.Struct, frozen=True, kw_only=True):
    """Everything stored under one key, decoded.

    Fields:
        key: the session key.
        backend: the backend's name (`"AnthropicAPI"`, ...) of the last writer, or None.
        conversation: the backend's resumable session (`export_session`'s data: a CLI's
            session id, an HTTP backend's history, a response id), or None.
        state: the agent state as encoded by `GenAgent.encode_state` (bytes), or None.
        totals: the accounting `Totals`.
        in_flight: the turn running now (or when the owner died), or None.
        interrupted: the last `InterruptedTurn` found at a start, or None.
        last_outcome: how the last finished turn ended (`TurnOutcome`), or None.
        created_at, updated_at: Unix time, seconds.
        lease: the current lease, or None.
    """

    key: str
    backend: str | None = None
    conversation: Any = None
    state: bytes | None = None
    totals: Totals = msgspec.field(default_factory=Totals)
    in_flight: InFlightTurn | None = None
    interrupted: InterruptedTurn | None = None
    last_outcome: TurnOutcome | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    lease: Lease | None = None


class StoreStatus(msgspec.Struct, frozen=True, kw_only=True):
    """The durable-session part of `Status` (`Status.store`), for an agent with a store.

    Fields:
        key: the session key.
        resumed: whether the start found a stored record and resumed from it.
        interrupted_turn: the `InterruptedTurn` this start found, or None.
        last_error: `(operation, kind)` of the latest failed store write, or None once a
            later write of the same kind succeeded.
        state_pending: True while the latest agent state is not stored (a failed state write,
            retried with the next turn).
    """

    key: str
    resumed: bool = False
    interrupted_turn: InterruptedTurn | None = None
    last_error: tuple[str, str] | None = None
    state_pending: bool = False


# -- the protocol --------------------------------------------------------------------------


@runtime_checkable
class SessionStore(Protocol):
    """What the runtime needs from a session store. Implementations must be thread-safe
    (many agents of one process share one store) and, for a store shared between processes,
    process-safe.

    Methods:
        acquire(key): take the key's lease; returns the `Lease`. Raises `LeaseHeld` when
            another live owner holds it (a lease whose owner is dead is taken over at once).
        release(lease): give the lease up (no-op when no longer held).
        load(key): the `SessionRecord` under `key`, or None. Raises `CorruptRecord`.
        update(lease, *, sync=True, **fields): write some fields of the lease's record
            (creating it), fenced by the lease (refreshing its heartbeat now and then);
            `fields` are `SessionRecord` field names other than `key`, `created_at`,
            `updated_at` and `lease`. `sync=False`
            allows the write to become durable only with the next synced one (the runtime's
            in-flight marker, and a conversation record followed by a state write). Raises
            `StoreError` (`"lease_lost"` when the lease is no longer this owner's).
        list_keys(): every stored key, sorted.
        delete(key, force=False): remove the record and its lease; True if there was a
            record. Raises `LeaseHeld` when a live owner holds it, unless `force`.
        close(): release resources (idempotent).
    """

    def acquire(self, key: str) -> Lease:
        """See the class docstring."""

    def release(self, lease: Lease) -> None:
        """See the class docstring."""

    def load(self, key: str) -> SessionRecord | None:
        """See the class docstring."""

    def update(self, lease: Lease, *, sync: bool = True, **fields: Any) -> None:
        """See the class docstring."""

    def list_keys(self) -> list[str]:
        """See the class docstring."""

    def delete(self, key: str, *, force: bool = False) -> bool:
        """See the class docstring."""

    def close(self) -> None:
        """See the class docstring."""


@runtime_checkable
class ToolJournal(Protocol):
    """The tool journal part of a session store (both bundled stores have it; a store
    without it runs agents without a journal: no `started` guard, no tool calls in
    `InterruptedTurn`).

    Methods:
        journal_write(lease, entry, *, in_flight=None, sync=True): store `entry` (a
            `ToolCallEntry`, replacing the one of the same `ref` and `call_id`), and when
            `in_flight` is given also that in-flight marker, in one transaction fenced by
            the lease. Raises `StoreError` (`"lease_lost"`, ...).
        journal(key): every entry stored under `key`, oldest first. Raises
            `CorruptRecord` for an entry that does not decode.
        journal_clear(lease): remove the lease's key's entries.
    """

    def journal_write(self, lease: Lease, entry: ToolCallEntry, *,
                      in_flight: InFlightTurn | None = None, sync: bool = True) -> None:
        """See the class docstring."""

    def journal(self, key: str) -> list[ToolCallEntry]:
        """See the class docstring."""

    def journal_clear(self, lease: Lease) -> None:
        """See the class docstring."""


# -- encoding ------------------------------------------------------------------------------

_FIELD_TYPES: Final[Mapping[str, Any]] = {
    "backend": str | None,
    "conversation": Any,
    "state": bytes | None,
    "totals": Totals,
    "in_flight": InFlightTurn | None,
    "interrupted": InterruptedTurn | None,
    "last_outcome": TurnOutcome | None,
}
FIELDS: Final = tuple(_FIELD_TYPES)
_FIELD_SET: Final = frozenset(FIELDS)
ENCODER = msgspec.msgpack.Encoder()
_DECODERS: Final = {name: msgspec.msgpack.Decoder(kind) for name, kind in _FIELD_TYPES.items()}
LEASE_DECODER = msgspec.msgpack.Decoder(Lease)
ENTRY_DECODER = msgspec.msgpack.Decoder(ToolCallEntry)


def encode_fields(fields: Mapping[str, Any]) -> dict[str, bytes]:
    """Each field's MessagePack blob. A `str` holding a lone surrogate (which UTF-8 cannot
    encode: a prompt, a tool result or an exception message built from bad input) is stored
    with U+FFFD in its place, so bad input never makes a record unwritable.

    Raises:
        TypeError: an unknown field name.
        StoreError: `"encode_error"`, a value msgspec cannot encode.
    """
    if not fields.keys() <= _FIELD_SET:
        unknown = sorted(set(fields) - _FIELD_SET)
        raise TypeError(f"unknown session record fields {unknown}; known: {FIELDS}")
    try:
        return {name: _encode(name, value) for name, value in fields.items()}
    except (TypeError, msgspec.EncodeError, OverflowError, UnicodeEncodeError) as exc:
        raise StoreError("encode_error", f"a session record value cannot be encoded "
                                         f"({type(exc).__name__})") from None


def decode_entries(key: str, blobs: Iterable[bytes]) -> list[ToolCallEntry]:
    """`key`'s journal entries from their blobs, in the order given (every store's
    `journal`).

    Raises:
        CorruptRecord: an entry does not decode.
    """
    try:
        return [ENTRY_DECODER.decode(blob) for blob in blobs]
    except (msgspec.DecodeError, msgspec.ValidationError, TypeError):
        raise CorruptRecord(key, "a tool journal entry does not decode") from None


def encode_entry(entry: ToolCallEntry) -> bytes:
    """A journal entry's MessagePack blob (the rules of `encode_fields`).

    Raises:
        StoreError: `"encode_error"`, an input msgspec cannot encode.
    """
    try:
        return _encode("tool_call", entry)
    except (TypeError, msgspec.EncodeError, OverflowError, UnicodeEncodeError) as exc:
        raise StoreError("encode_error", f"a tool journal entry cannot be encoded "
                                         f"({type(exc).__name__})") from None


# Kept as they are by `to_builtins` (MessagePack encodes them natively).
_NATIVE: Final = (bytes, bytearray, memoryview, datetime.datetime, datetime.date,
                  datetime.time, datetime.timedelta, uuid.UUID, decimal.Decimal)


def _encode(name: str, value: Any) -> bytes:
    try:
        return ENCODER.encode(value)
    except UnicodeEncodeError:
        pass
    # Rare: the value as builtins (a Struct as the map it encodes to), every str repaired.
    logger.warning("gen_agent session store: a lone surrogate in field {!r} is stored as "
                   "U+FFFD", name)
    return ENCODER.encode(_repaired(msgspec.to_builtins(value, builtin_types=_NATIVE)))


def _repaired(value: Any) -> Any:
    if isinstance(value, str):
        return repair_text(value)
    if isinstance(value, list | tuple):
        return [_repaired(item) for item in value]
    if isinstance(value, dict):
        return {_repaired(key): _repaired(item) for key, item in value.items()}
    return value


def repair_text(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD (a surrogate pair left as two
    code points is joined into its character); unchanged when UTF-8 can encode it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def decode_record(key: str, blobs: Mapping[str, bytes | None], created_at: float,
                   updated_at: float, lease: Lease | None) -> SessionRecord:
    values: dict[str, Any] = {}
    for name in FIELDS:
        blob = blobs.get(name)
        if blob is None:
            continue
        try:
            values[name] = _DECODERS[name].decode(blob)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise CorruptRecord(key, f"field {name!r} does not decode") from None
    if values.get("totals") is None:
        values.pop("totals", None)
    return SessionRecord(key=key, created_at=created_at, updated_at=updated_at, lease=lease,
                         **values)


def check_key(key: Any) -> str:
    if not isinstance(key, str) or not key:
        raise ValueError(f"a session key must be a non-empty str, got {key!r}")
    at = next((i for i, c in enumerate(key) if "\ud800" <= c <= "\udfff"), None)
    if at is not None:
        raise ValueError(f"a session key must be encodable as UTF-8, got {key!r} "
                         f"(a lone surrogate at index {at})")
    return key
