"""The agent side of a durable session (`gen_agent.store`): resume at start, write per turn.

One `Durable` per agent with a store; every method runs in the agent's actor thread, except
`write_entry` / `write_marker`, which the turn's `TurnJournal` calls from the turn task and
tool threads (the store is thread-safe). The actor calls it at five points: `open` in
`on_start`, `turn_started` at dispatch (it returns the turn's journal), `turn_ended` after
the terminal event (before the decision callback), `save_state` after the decision callback
(before the reply), and `close` when the agent exits. The write order and failure rules are
documented in `gen_agent.store` and on the durable-sessions page.
"""

from __future__ import annotations

import os
import time
from typing import Any

import msgspec

from gen_agent import telemetry
from gen_agent._errors import AgentStartError
from gen_agent._portable import to_portable
from gen_agent._reap import owner_marker, reap_marked
from gen_agent._runtime.journal import TurnJournal
from gen_agent._runtime.repair import (
    CUT_REASONS,
    MemoryJournal,
    cut_session,
    end_session,
    kept_of,
    preamble,
    repaired,
    report_of,
)
from gen_agent.backend import SessionStartError
from gen_agent.store import (
    INTERRUPTED_NOTE,
    OUTCOME_UNKNOWN,
    STORE_ERROR,
    CorruptRecord,
    InFlightTurn,
    InterruptedTurn,
    LeaseHeld,
    SessionRecord,
    StoreError,
    StoreStatus,
    ToolCallEntry,
    ToolJournal,
    Totals,
    TurnOutcome,
    bind_owner,
)
from gen_agent.store._lease import _BOOT_ID, _HOST, taken_from

_REAP_WAIT_S = 10.0  # how long a new owner waits for the dead owner's processes to end (s)


def ref_text(ref: Any) -> str:
    """The text form of a request ref kept in records."""
    text = getattr(ref, "id", None)
    return text if isinstance(text, str) else repr(ref)




def _reap_dead_owner(holder: Any, log: Any) -> None:
    """The key's lease was taken over from `holder`, a dead owner: end the CLIs (and their
    tools) it started on this machine, if any outlived it, before the session resumes."""
    if holder.pid == os.getpid() or holder.host != _HOST or holder.boot_id != _BOOT_ID:
        return  # ours (the backend ends it: `end_other_holders`), or another machine's
    marker = owner_marker(holder.pid, holder.started_ticks)
    reaped = reap_marked(lambda env: marker in env, timeout=_REAP_WAIT_S)
    if reaped:
        log.warning("gen_agent ended {} processes left by the session's dead owner (pid {})",
                    reaped, holder.pid)


def _backend_name(backend: Any) -> str:
    return backend.__name__ if isinstance(backend, type) else type(backend).__name__


def _tool_names(backend_opts: dict[str, Any]) -> tuple[str, ...]:
    tools = backend_opts.get("tools")
    if not isinstance(tools, list | tuple):
        return ()
    names = (getattr(item, "name", None) or getattr(item, "__name__", None) for item in tools)
    return tuple(name for name in names if isinstance(name, str))


def _type_name(output: Any) -> str | None:
    if output is None:
        return None
    name = getattr(output, "__name__", None)
    return name if isinstance(name, str) else repr(output)


class CutRepair:
    """The opt-in repair of a turn cut short in process (an interrupt, the watchdog) that
    `Durable` and `InProcessRepair` share: an agent class with `repair_interrupted_turns =
    True` keeps what a resume would give it (`repair.cut_session`), not the session from
    before the turn (docs/pages/contract.md#s4-13). Actor thread."""

    key: str
    backend: Any
    log: Any
    journal: TurnJournal | None
    _unknown: str
    _note: str
    _preamble: str | None
    _rollback_task: int | None
    repair_turns = False

    def _wording(self, impl: Any) -> None:
        """Read the agent class's wording and opt-in (`outcome_unknown`, `interrupted_note`,
        `repair_interrupted_turns`)."""
        unknown = getattr(impl, "outcome_unknown", None)
        self._unknown = unknown if isinstance(unknown, str) and unknown else OUTCOME_UNKNOWN
        note = getattr(impl, "interrupted_note", None)
        self._note = note if isinstance(note, str) and note else INTERRUPTED_NOTE
        self.repair_turns = getattr(impl, "repair_interrupted_turns", False) is True

    def cut_short(self, task_id: int, session: Any, backend_opts: dict[str, Any],
                  reason: Any) -> Any:
        """The session to keep after the running turn `task_id` was cut by `reason`:
        `session` (the one from before the turn) unless the agent opted in and `reason` is
        an interrupt or the watchdog's; then the repaired one (or `session`, with the
        preamble for the next prompt). A rolled-back turn (`busy="rollback"`) keeps
        `session`."""
        journal = self.journal
        if (not self.repair_turns or journal is None or self._rollback_task == task_id
                or not isinstance(reason, str) or reason not in CUT_REASONS):
            return session
        cut = report_of(self.key, journal.marker, journal.snapshot())
        kept, text = cut_session(self.backend, session, backend_opts, cut, self._unknown,
                                 self._note, self.log)
        if text is not None:
            self._preamble = text
        return kept

    def prefixed(self, prompt: str) -> str:
        """`prompt` with the cut turn's preamble before it, once (an agent that sets
        `interrupted_preamble = True` after a resume, or `repair_interrupted_turns = True`
        after an in-process cut, on a backend whose transcript gen_agent cannot repair,
        e.g. a CLI's)."""
        text, self._preamble = self._preamble, None
        return prompt if text is None else f"{text}\n\n{prompt}"


def flight_of(request: Any, attempt: int, options: Any,
              tools: tuple[str, ...]) -> InFlightTurn:
    """The in-flight marker of a turn about to start."""
    output = getattr(options if options is not None else request.options, "output", None)
    return InFlightTurn(ref=ref_text(request.ref), origin=request.origin, attempt=attempt,
                        started_at=time.time(), pid=os.getpid(), prompt=request.prompt,
                        output=_type_name(output), tools=tools)


class Durable(CutRepair):
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
        self._journals = isinstance(store, ToolJournal)
        self._tools: tuple[str, ...] = ()
        self.journal: TurnJournal | None = None
        self._unknown = OUTCOME_UNKNOWN
        self._note = INTERRUPTED_NOTE
        self._preamble: str | None = None  # for a CLI's next prompt (opt-in)
        self._marker: InFlightTurn | None = None  # the phase marker awaiting the state write
        self._flight: InFlightTurn | None = None  # the running turn's marker
        self._rollback_task: int | None = None  # a turn a busy="rollback" request cuts
        self._rollback_report: InterruptedTurn | None = None

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
        previous = taken_from(self.lease)
        if previous is not None:
            _reap_dead_owner(previous, self.log)
        self._tools = _tool_names(backend_opts)
        self._wording(impl)
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
        conversation = record.conversation
        if record.in_flight is not None:
            self._interrupted(record.in_flight)
            if getattr(impl, "repair_interrupted_history", True):
                if conversation is None:  # the first turn was cut: a fresh session's record
                    fresh = self._fresh_record(backend_opts, start_session)
                    repaired = self._repaired(fresh)
                    conversation = None if repaired is fresh else repaired
                else:
                    conversation = self._repaired(conversation)
            if (conversation is record.conversation and self.interrupted is not None
                    and getattr(impl, "interrupted_preamble", False)):
                self._preamble = preamble(self.interrupted, self._unknown,
                                          kept=kept_of(self.backend, conversation))
        elif self._journals:
            self._clear_journal()  # a finished turn's entries its owner had no time to clear
        restore = getattr(self.backend, "restore_session", None)
        if conversation is not None and restore is not None:
            try:
                return restore(conversation, backend_opts), state
            except SessionStartError:
                raise
            except Exception as exc:  # noqa: BLE001 - an unusable record is a corrupt one
                raise CorruptRecord(
                    self.key, f"the backend refused the stored session ({type(exc).__name__})"
                ) from None
        return start_session(backend_opts), state

    def _interrupted(self, flight: InFlightTurn) -> None:
        """Report the turn the last owner did not finish: its journal, usage and phase."""
        entries: list[ToolCallEntry] = []
        if self._journals:
            entries = [e for e in self.store.journal(self.key) if e.ref == flight.ref]
        self.interrupted = report_of(self.key, flight, entries)
        fields: dict[str, Any] = {"in_flight": None, "interrupted": self.interrupted}
        if flight.phase == "turn":  # an answered turn is in the totals already
            self.totals = self.totals.add_interrupted(flight.usage)
            fields["totals"] = self.totals
        if self._write("begin", **fields) is None and self._journals:
            self._clear_journal()

    def _fresh_record(self, backend_opts: dict[str, Any], start_session: Any) -> Any:
        """The `export_session` data of a fresh session (then ended), or None."""
        if self._export is None or getattr(self.backend, "restore_session", None) is None:
            return None
        session = start_session(backend_opts)
        try:
            return self._export(session)
        except Exception:  # noqa: BLE001 - no record to repair: start as without one
            return None
        finally:
            end_session(self.backend, session, self.log)

    def _repaired(self, conversation: Any) -> Any:
        """`repair.repaired` of the interrupted turn, in this agent's wording."""
        return repaired(conversation, self.interrupted, self._unknown, self._note)

    def _clear_journal(self) -> None:
        try:
            self.store.journal_clear(self.lease)
        except StoreError as exc:
            self._failed("journal", str(exc.reason))

    # ------------------------------------------------------------------ per turn
    def turn_started(self, request: Any, attempt: int,
                     options: Any = None) -> TurnJournal | None:
        """Write the in-flight marker (a failure is reported, the turn still runs).

        Returns:
            The turn's `TurnJournal` (None when the store keeps no journal, unless the
            agent repairs cut turns: then a `MemoryJournal`).
        """
        self._ended_task = None
        self._marker = None
        marker = flight_of(request, attempt, options, self._tools)
        ref = marker.ref
        self._flight = marker
        self._write("begin", sync=False, in_flight=marker)
        if not self._journals:
            self.journal = (MemoryJournal(self, ref, marker, frozenset(self._tools), None,
                                          self._unknown) if self.repair_turns else None)
            return self.journal
        prior = getattr(request.options, "resend_of", None)
        self.journal = TurnJournal(self, ref, marker, frozenset(self._tools),
                                   prior if isinstance(prior, InterruptedTurn) else None,
                                   self._unknown)
        return self.journal

    def write_entry(self, entry: ToolCallEntry, marker: InFlightTurn | None, *,
                    sync: bool) -> str | None:
        """Journal `entry` (and `marker`); the failure kind, reported, or None. Any thread."""
        lease = self.lease
        if lease is None:  # the agent is gone (a tool that outlived it): nothing to fence
            return "closed"
        try:
            self.store.journal_write(lease, entry, in_flight=marker, sync=sync)
        except StoreError as exc:
            self._failed("journal", str(exc.reason))
            return str(exc.reason)
        return None

    def write_marker(self, marker: InFlightTurn) -> None:
        """Rewrite the in-flight marker (its usage so far); failures reported. Any thread."""
        if self.lease is not None:
            self._write("begin", sync=False, in_flight=marker)

    def rolled_back(self, task_id: int) -> InterruptedTurn | None:
        """The running turn `task_id` is being rolled back (`busy="rollback"`): its journal
        is kept when it ends and, if a side-effecting call of it finished or is in doubt,
        the returned `InterruptedTurn` reports it (written as the record's interrupted turn,
        `Status.store.interrupted_turn`, usable with `resend`; the agent gives it to
        `handle_info`, as at a resume) and the next prompt gets the interrupted turn's
        preamble, since the dropped exchange no longer tells the model. None: no such call."""
        self._rollback_task = task_id
        report = self._rolled_back_report(self.journal)
        self._rollback_report = report
        if report is not None:
            self.interrupted = report
            self._preamble = preamble(report, self._unknown)
        return report

    def _rolled_back_report(self, journal: Any) -> InterruptedTurn | None:
        if journal is None or not self._journals:
            return None
        try:
            entries = [e for e in self.store.journal(self.key) if e.ref == journal.ref]
        except StoreError as exc:
            self._failed("journal", str(exc.reason))
            return None
        if not any(e.side_effects for e in entries):
            return None
        return report_of(self.key, journal.marker, entries)

    def turn_ended(self, task_id: int, ref: Any, session: Any, response: Any,
                   reason: Any = None) -> str | None:
        """Write the conversation record of a finished turn (once per turn task).

        Returns:
            None when written (or already written for `task_id`), else the failure kind.
        """
        if self._ended_task == task_id:
            return None
        self._ended_task = task_id
        journal, self.journal = self.journal, None
        fields: dict[str, Any] = {"in_flight": None, "backend": self._backend_name}
        rolled = self._rollback_task == task_id
        report, self._rollback_task, self._rollback_report = (
            self._rollback_report if rolled else None), None, None
        if report is not None:
            fields["interrupted"] = report
        if response is not None and self.persist_state and self._flight is not None:
            # Until the decision's state is stored, the marker says so (phase
            # "after_response"): a death in between is reported, with the stored reply.
            text = getattr(response, "text", None)
            flight = self._flight if journal is None else journal.marker
            self._marker = msgspec.structs.replace(
                flight, phase="after_response",
                response=text if isinstance(text, str) else None)
            fields["in_flight"] = self._marker
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
        if (kind is None and journal is not None and journal.written and not rolled
                and self._journals):
            self._clear_journal()  # a rolled-back turn's calls stay journalled
        if kind is not None:
            self._marker = None
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
        marker, self._marker = self._marker, None
        if (blob == self._state_blob and not self.state_pending and not self._unsynced
                and marker is None):
            return
        self._unsynced = False
        fields: dict[str, Any] = {"state": blob}
        if marker is not None:
            fields["in_flight"] = None  # the decision is stored: the turn is over
        if self._write("state", **fields) is None:
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
    calls its durability at each step without asking whether it has one (a null object;
    `InProcessRepair` overrides some steps for an agent without a store)."""

    resumed = False
    interrupted: InterruptedTurn | None = None
    totals = Totals()

    def open(self, impl: Any, backend_opts: dict[str, Any], state: Any,
             start_session: Any) -> tuple[Any, Any]:
        return start_session(backend_opts), state

    def prefixed(self, prompt: str) -> str:
        return prompt

    def turn_started(self, request: Any, attempt: int,
                     options: Any = None) -> TurnJournal | None:
        return None

    def turn_ended(self, task_id: int, ref: Any, session: Any, response: Any,
                   reason: Any = None) -> str | None:
        return None

    def rolled_back(self, task_id: int) -> None:
        return None  # no store, no journal: nothing to keep or report

    def cut_short(self, task_id: int, session: Any, backend_opts: dict[str, Any],
                  reason: Any) -> Any:
        return session  # the contract's rule: the session from before the turn

    def session_replaced(self, session: Any) -> None:
        return None

    def save_state(self, impl: Any, state: Any) -> None:
        return None

    def status(self) -> StoreStatus | None:
        return None

    def close(self) -> None:
        return None


class InProcessRepair(CutRepair, NoDurability):
    """The durability of an agent without a store whose class sets
    `repair_interrupted_turns = True`: nothing is written, but each turn's tool calls are
    journalled in memory (`MemoryJournal`) so that a turn cut in process is repaired as a
    resumed one would be (`CutRepair.cut_short`)."""

    def __init__(self, name: Any, backend: Any, log: Any) -> None:
        self.key = repr(name)
        self.backend = backend
        self.log = log
        self.journal: TurnJournal | None = None
        self._unknown = OUTCOME_UNKNOWN
        self._note = INTERRUPTED_NOTE
        self._preamble: str | None = None
        self._rollback_task: int | None = None
        self._tools: tuple[str, ...] = ()

    def open(self, impl: Any, backend_opts: dict[str, Any], state: Any,
             start_session: Any) -> tuple[Any, Any]:
        self._wording(impl)
        self._tools = _tool_names(backend_opts)
        return start_session(backend_opts), state

    def turn_started(self, request: Any, attempt: int,
                     options: Any = None) -> TurnJournal | None:
        marker = flight_of(request, attempt, options, self._tools)
        self.journal = MemoryJournal(self, marker.ref, marker, frozenset(self._tools), None,
                                     self._unknown)
        return self.journal

    def rolled_back(self, task_id: int) -> None:
        self._rollback_task = task_id  # its exchange is dropped: nothing to repair
        return None

    def turn_ended(self, task_id: int, ref: Any, session: Any, response: Any,
                   reason: Any = None) -> str | None:
        self.journal, self._rollback_task = None, None
        return None


NO_DURABILITY = NoDurability()
