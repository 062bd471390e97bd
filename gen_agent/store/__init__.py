"""Durable sessions: where an agent's conversation, state and accounting survive its process.

An agent opts in with two reserved start options, `store=` (a `SessionStore`) and
`session_key=` (a non-empty `str`). At start it takes the key's lease (one live owner per key,
across processes), loads the stored record and resumes from it: the backend session through the
backend's `restore_session` hook, the agent state through `GenAgent.decode_state` when the
agent sets `persist_state = True`. Every turn then writes, in this order:

1. at dispatch, the in-flight marker (which request, which attempt, since when, its prompt);
2. for each tool call, the tool journal (`ToolJournal`): `started` before a Python tool runs
   (a side-effecting tool whose start cannot be written does not run), `finished` after; a
   CLI's own tools from their events;
3. after the terminal event and *before* `handle_response`, the conversation record (the
   backend's resumable session from `export_session`, the accounting totals) and the marker's
   removal (with `persist_state`: the marker moves to phase `"after_response"`); if this
   write fails the turn fails through `handle_error` with `("store_failed", kind)`, so a
   caller who saw an answer never loses it;
4. after the decision callback (and `post_turn`) and before the reply, the agent state (and
   the marker's removal); a failed state write does not change the outcome: it is logged,
   emitted as telemetry (`STORE_ERROR`), shown in `Status.store` and retried with the next
   turn.

A turn that was running when its process died is not replayed: the next start finds the
marker, moves it to `interrupted` as an `InterruptedTurn` (its prompt, finished and in-doubt
tool calls, usage and phase), sends that to `handle_info` and shows it in
`Status.store.interrupted_turn`; `gen_agent.resend` re-sends it, guarded by its journal.

Implementations: `SQLiteStore` (stdlib `sqlite3`, one file, WAL; the embedded default),
`PostgresStore` (psycopg 3, the extra `gen-agent[postgres]`: one database several machines
share) and `MemoryStore` (one process; tests). Values are encoded with msgspec (MessagePack);
the schema is versioned (`SCHEMA_VERSION`) and a newer schema on disk is refused with
`StoreSchemaError`, never misread. Records hold data only: reasons are stored in their portable form
(`gen_agent._portable`), never as exception objects.

Mirrors: nothing in the Elixir original (its agents are `:temporary` and persist nothing,
docs/pages/contract.md#appendix-b item 9).
"""

from gen_agent.store._lease import bind_owner
from gen_agent.store._memory import MemoryStore
from gen_agent.store._postgres import PostgresStore
from gen_agent.store._records import (
    INTERRUPTED_NOTE,
    OUTCOME_UNKNOWN,
    SCHEMA_VERSION,
    STORE_ERROR,
    CorruptRecord,
    InFlightTurn,
    InterruptedTurn,
    Lease,
    LeaseHeld,
    SessionRecord,
    SessionStore,
    StoreError,
    StoreSchemaError,
    StoreStatus,
    ToolCallEntry,
    ToolJournal,
    Totals,
    TurnOutcome,
)
from gen_agent.store._sqlite import SQLiteStore

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
    "MemoryStore",
    "PostgresStore",
    "SQLiteStore",
    "SessionRecord",
    "SessionStore",
    "StoreError",
    "StoreSchemaError",
    "StoreStatus",
    "ToolCallEntry",
    "ToolJournal",
    "Totals",
    "TurnOutcome",
    "bind_owner",
]
