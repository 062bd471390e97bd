"""The agent side of a durable session (`gen_agent.store`): resume at start, write per turn.

One `Durable` per agent with a store; every method runs in the agent's actor thread. The
actor calls it at five points (see `server.py`): `open` in `on_start`, `turn_started` at
dispatch, `turn_ended` after the terminal event (before the decision callback), `save_state`
after the decision callback (before the reply), and `close` when the agent exits. The write
order and failure rules are those of issue #22, documented in `gen_agent.store`.
"""

from __future__ import annotations

import os
import time
from typing import Any

import msgspec

from gen_agent import telemetry
from gen_agent.backend import SessionStartError
from gen_agent.errors import AgentStartError
from gen_agent.portable import to_portable
from gen_agent.store import (
    STORE_ERROR,
    CorruptRecord,
    InFlightTurn,
    InterruptedTurn,
    LeaseHeld,
    SessionRecord,
    StoreError,
    StoreStatus,
    Totals,
    TurnOutcome,
    bind_owner,
)


def ref_text(ref: Any) -> str:
    """The text form of a request ref kept in records."""
    text = getattr(ref, "id", None)
    return text if isinstance(text, str) else repr(ref)




def _backend_name(backend: Any) -> str:
    return backend.__name__ if isinstance(backend, type) else type(backend).__name__


class Durable:
    """A durable session of one agent: its store, key, lease and write bookkeeping."""

    def __init__(self, store: Any, key: str, name: Any, backend: Any, log: Any,
                 alive: Any) -> None:
        self.store = store
        self._alive = alive
        self.key = key
        self.name = name
        self.backend = backend
        self.log = log
        self.lease: Any = None
        self.totals = Totals()
        self.resumed = False
        self.interrupted: InterruptedTurn | None = None
        self.last_error: tuple[str, str] | None = None
        self.state_pending = False
        self.persist_state = False
        self._ended_task: int | None = None
        self._unsynced = False
        self._state_blob: bytes | None = None
        self._export = getattr(backend, "export_session", None)
        self._backend_name = _backend_name(backend)

    # ------------------------------------------------------------------ start
    def open(self, impl: Any, backend_opts: dict[str, Any], state: Any,
             start_session: Any) -> tuple[Any, Any]:
        """Take the lease, load the record and resume: returns `(session, state)`.

        Raises:
            AgentStartError: `("session_leased", key, {"pid", "host"})`, `("store_corrupt",
                key, detail)`, `("store_failed", kind)`, or the backend's start failure.
        """
        try:
            self.lease = self.store.acquire(self.key)
        except LeaseHeld as exc:
            holder = {"pid": exc.holder.pid, "host": exc.holder.host}
            raise AgentStartError(("session_leased", self.key, holder)) from None
        except StoreError as exc:
            raise AgentStartError(("store_failed", exc.reason)) from None
        bind_owner(self.lease, self._alive)
        try:
            record = self.store.load(self.key)
            self.persist_state = bool(getattr(impl, "persist_state", False))
            return self._resume(impl, record, backend_opts, state, start_session)
        except CorruptRecord as exc:
            self.close()
            raise AgentStartError(("store_corrupt", self.key, exc.detail)) from None
        except StoreError as exc:
            self.close()
            raise AgentStartError(("store_failed", exc.reason)) from None
        except BaseException:
            self.close()
            raise

    def _resume(self, impl: Any, record: SessionRecord | None, backend_opts: dict[str, Any],
                state: Any, start_session: Any) -> tuple[Any, Any]:
        if record is None:
            return start_session(backend_opts), state
        self.resumed = True
        self.totals = record.totals
        if self.persist_state and record.state is not None:
            decode = getattr(impl, "decode_state", None) or msgspec.msgpack.decode
            try:
                state = decode(record.state)
            except Exception:  # noqa: BLE001 - a state that does not decode is a corrupt record
                raise CorruptRecord(self.key, "the agent state does not decode") from None
            self._state_blob = record.state
        if record.in_flight is not None:
            flight = record.in_flight
            self.interrupted = InterruptedTurn(
                key=self.key, ref=flight.ref, origin=flight.origin, attempt=flight.attempt,
                started_at=flight.started_at, detected_at=time.time())
            self._write("begin", in_flight=None, interrupted=self.interrupted)
        restore = getattr(self.backend, "restore_session", None)
        if record.conversation is not None and restore is not None:
            try:
                return restore(record.conversation, backend_opts), state
            except SessionStartError:
                raise
            except Exception as exc:  # noqa: BLE001 - an unusable record is a corrupt one
                raise CorruptRecord(
                    self.key, f"the backend refused the stored session ({type(exc).__name__})"
                ) from None
        return start_session(backend_opts), state

    # ------------------------------------------------------------------ per turn
    def turn_started(self, request: Any, attempt: int, options: Any = None) -> None:
        """Write the in-flight marker (a failure is reported, the turn still runs)."""
        self._ended_task = None
        marker = InFlightTurn(ref=ref_text(request.ref), origin=request.origin,
                              attempt=attempt, started_at=time.time(), pid=os.getpid())
        self._write("begin", sync=False, in_flight=marker)

    def turn_ended(self, task_id: int, ref: Any, session: Any, response: Any,
                   reason: Any = None) -> str | None:
        """Write the conversation record of a finished turn (once per turn task).

        Returns:
            None when written (or already written for `task_id`), else the failure kind.
        """
        if self._ended_task == task_id:
            return None
        self._ended_task = task_id
        fields: dict[str, Any] = {"in_flight": None, "backend": self._backend_name}
        if response is not None:
            fields["totals"] = self.totals.add(response)
            outcome = TurnOutcome(ref=ref_text(ref), ok=True, ended_at=time.time())
        else:
            outcome = TurnOutcome(ref=ref_text(ref), ok=False, reason=to_portable(reason),
                                  ended_at=time.time())
        fields["last_outcome"] = outcome
        if self._export is not None:
            try:
                fields["conversation"] = self._export(session)
            except Exception as exc:  # noqa: BLE001 - reported as ("store_failed", kind)
                self.log.error("gen_agent export_session raised {}", type(exc).__name__)
                self._failed("conversation", "export_failed")
                return "export_failed"
        # With a state write to follow, that one fsyncs (FULL): one fsync per turn.
        kind = self._write("conversation", sync=not self.persist_state, **fields)
        self._unsynced = self.persist_state
        if kind is None and response is not None:
            self.totals = fields["totals"]
        return kind

    def session_replaced(self, session: Any) -> None:
        """Write the conversation of a session replaced outside a turn (`reset_session`);
        a failure is reported, the reset stands."""
        if self._export is None:
            return
        try:
            data = self._export(session)
        except Exception as exc:  # noqa: BLE001 - reported; the reset stands
            self.log.error("gen_agent export_session raised {}", type(exc).__name__)
            self._failed("conversation", "export_failed")
            return
        self._write("conversation", conversation=data)

    def save_state(self, impl: Any, state: Any) -> None:
        """Write the agent state if it opted in and it changed; failures are reported and
        retried with the next turn."""
        if not self.persist_state:
            return
        encode = getattr(impl, "encode_state", None) or msgspec.msgpack.encode
        try:
            blob = encode(state)
            if not isinstance(blob, bytes):
                raise TypeError(f"encode_state must return bytes, got {type(blob).__name__}")
        except Exception as exc:  # noqa: BLE001 - reported; the outcome is unchanged
            self.log.error("gen_agent encode_state raised {}", type(exc).__name__)
            self.state_pending = True
            self._failed("state", "encode_error")
            return
        if blob == self._state_blob and not self.state_pending and not self._unsynced:
            return
        self._unsynced = False
        if self._write("state", state=blob) is None:
            self._state_blob = blob
            self.state_pending = False
        else:
            self.state_pending = True

    # ------------------------------------------------------------------ helpers
    def _write(self, operation: str, *, sync: bool = True, **fields: Any) -> str | None:
        try:
            self.store.update(self.lease, sync=sync, **fields)
        except StoreError as exc:
            self._failed(operation, str(exc.reason))
            return str(exc.reason)
        if self.last_error is not None and self.last_error[0] == operation:
            self.last_error = None
        return None

    def _failed(self, operation: str, kind: str) -> None:
        self.last_error = (operation, kind)
        self.log.error("gen_agent session store {} write failed ({})", operation, kind)
        telemetry.execute(STORE_ERROR, {"system_time": time.time_ns()},
                          {"agent": self.name, "key": self.key, "operation": operation,
                           "kind": kind})

    def status(self) -> StoreStatus:
        """The `Status.store` record."""
        return StoreStatus(key=self.key, resumed=self.resumed,
                           interrupted_turn=self.interrupted, last_error=self.last_error,
                           state_pending=self.state_pending)

    def close(self) -> None:
        """Release the lease (idempotent; a failure is reported, never raised)."""
        lease, self.lease = self.lease, None
        if lease is None:
            return
        try:
            self.store.release(lease)
        except StoreError as exc:
            self._failed("release", str(exc.reason))


class NoDurability:
    """The durability of an agent without a store: every write is a no-op, so the agent
    calls its durability at each step without asking whether it has one (a null object)."""

    resumed = False
    interrupted: InterruptedTurn | None = None
    totals = Totals()

    def open(self, impl: Any, backend_opts: dict[str, Any], state: Any,
             start_session: Any) -> tuple[Any, Any]:
        return start_session(backend_opts), state

    def turn_started(self, request: Any, attempt: int, options: Any = None) -> None:
        return None

    def turn_ended(self, task_id: int, ref: Any, session: Any, response: Any,
                   reason: Any = None) -> str | None:
        return None

    def session_replaced(self, session: Any) -> None:
        return None

    def save_state(self, impl: Any, state: Any) -> None:
        return None

    def status(self) -> StoreStatus | None:
        return None

    def close(self) -> None:
        return None


NO_DURABILITY = NoDurability()
