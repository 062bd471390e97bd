"""Rejoinable turns and deactivation: the agent's replay buffer and its idle check.

Replay. With the start option `replay_turns=n` (n >= 1) an agent numbers every event of a turn
(`seq`, from 1, per request ref, counting on across its retries) and keeps them in a replay
buffer: the running turn's and those of the last `n` finished ones, each bounded by
`max_event_bytes_per_turn` bytes (`term_size`; the oldest events of a turn go first). A reader
attaches to a running or just-finished turn with `AttachMsg(ref, after, recipient)`: it gets
the events after `after` at once, then the live ones, then the outcome, as records
`("gen_agent", "replay", name, ref, seq, event)` and one `Completion`. Several readers of one
turn are allowed. The buffer is dropped when the agent hibernates, so a hibernated agent holds
no replay data. Readers hold no relay back (unlike `gen_agent.stream`): a reader whose
`lagging()` says it holds too much is detached with a `("gen_agent", "lagged", name, ref)`
record, and attaches again from its last event once it has read its buffer (the events
meanwhile wait in the replay buffer). Events after `after` that the byte bound already dropped
are announced first, as `("gen_agent", "missed", name, ref, count)`.

Deactivation. `DeactivateMsg` stops the agent as a drain does (`terminate_agent` sees
`"normal"`) but only when nothing is pending (`pending_work`); otherwise it answers what is
pending and the agent carries on. The check and the stop are one step of the actor, so no
message can slip in between.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Any

from gen_agent._delivered import Completion
from gen_agent._runtime.mailbox import Msg
from gen_agent._runtime.work import StopAgent, deliver_to


class AttachMsg(Msg, frozen=True):
    ref: Any
    after: int
    recipient: Any
    reply: Any


class DeactivateMsg(Msg, frozen=True):
    reply: Any


class _TurnLog:
    """The numbered events of one request, its outcome once known, and its live readers."""

    __slots__ = ("bytes", "events", "outcome", "readers", "seq")

    def __init__(self) -> None:
        self.events: deque[tuple[int, Any, int]] = deque()
        self.seq = 0  # the number of the last event (0: none yet)
        self.bytes = 0
        self.outcome: tuple[str, Any] | None = None
        self.readers: list[Any] = []


class ReplayBuffer:
    """The replay buffer of one agent (owned by its actor thread; no locking)."""

    __slots__ = ("_finished", "_logs", "keep", "max_bytes", "name")

    def __init__(self, name: Any, keep: int, max_bytes: int) -> None:
        self.name = name
        self.keep = keep  # finished turns kept
        self.max_bytes = max_bytes  # per turn
        self._logs: OrderedDict[Any, _TurnLog] = OrderedDict()
        self._finished = 0

    def _log(self, ref: Any) -> _TurnLog:
        log = self._logs.get(ref)
        if log is None:
            log = self._logs[ref] = _TurnLog()
        return log

    def event(self, ref: Any, event: Any, size: int) -> None:
        """Number and keep one event of `ref`'s turn; relay it to the turn's readers."""
        log = self._log(ref)
        log.seq += 1
        log.events.append((log.seq, event, size))
        log.bytes += size
        while log.bytes > self.max_bytes and len(log.events) > 1:
            log.bytes -= log.events.popleft()[2]
        lagging = None
        for reader in log.readers:
            deliver_to(reader, ("gen_agent", "replay", self.name, ref, log.seq, event))
            check = getattr(reader, "lagging", None)
            if check is not None and check():
                lagging = [*(lagging or ()), reader]
        for reader in lagging or ():
            log.readers.remove(reader)  # it attaches again when it has caught up
            deliver_to(reader, ("gen_agent", "lagged", self.name, ref))

    def finish(self, ref: Any, outcome: tuple[str, Any]) -> None:
        """`ref`'s request has its outcome: tell its readers, keep the last `keep` logs."""
        log = self._logs.get(ref)
        if log is None:
            log = self._log(ref)  # a turn without events (e.g. refused) can be attached to
        if log.outcome is not None:
            return
        log.outcome = outcome
        self._logs.move_to_end(ref)
        readers, log.readers = log.readers, []
        for reader in readers:
            deliver_to(reader, Completion.of(self.name, ref, outcome))
        self._finished += 1
        while self._finished > self.keep:
            oldest = next((r for r, entry in self._logs.items() if entry.outcome is not None),
                          None)
            if oldest is None:
                break
            del self._logs[oldest]
            self._finished -= 1

    def attach(self, ref: Any, after: int, recipient: Any, current: Any) -> tuple[str, Any]:
        """Send `recipient` the events of `ref` after `after`, and the rest as they come.

        `current` is the running turn's ref (or None): a running turn without events yet
        can be attached to. Returns `("ok", missed)` (`missed`: events after `after` that
        the byte bound already dropped) or `("error", "not_found")`.
        """
        log = self._logs.get(ref)
        if log is None:
            if ref != current:
                return ("error", "not_found")
            log = self._log(ref)
        first = log.events[0][0] if log.events else log.seq + 1
        missed = max(0, first - after - 1)
        if missed:
            deliver_to(recipient, ("gen_agent", "missed", self.name, ref, missed))
        lagging = getattr(recipient, "lagging", None)
        for seq, event, _size in log.events:
            if seq > after:
                deliver_to(recipient, ("gen_agent", "replay", self.name, ref, seq, event))
                if lagging is not None and lagging():
                    deliver_to(recipient, ("gen_agent", "lagged", self.name, ref))
                    return ("ok", missed)  # it attaches again once it has read these
        if log.outcome is not None:
            deliver_to(recipient, Completion.of(self.name, ref, log.outcome))
        else:
            log.readers.append(recipient)
        return ("ok", missed)

    def clear(self) -> None:
        """Drop every log (the agent hibernates; no turn runs, so no reader waits)."""
        self._logs.clear()
        self._finished = 0


def attach(actor: Any, msg: AttachMsg) -> None:
    """Answer `AttachMsg` for `actor` (an `AgentActor`)."""
    replay = actor.replay
    if replay is None:
        msg.reply.resolve(("error", "replay_off"))
        return
    turn = actor.turn
    current = None if turn is None else turn.request.ref
    msg.reply.resolve(replay.attach(msg.ref, msg.after, msg.recipient, current))


def pending_work(actor: Any) -> tuple[str, ...]:
    """What keeps `actor` from being deactivated now: the names of its pending work."""
    found = []
    if actor.turn is not None:
        found.append("turn")
    if len(actor.mailbox):
        found.append("queued_prompt")
    if actor.self_chain is not None or actor._retry_timer is not None:
        found.append("self_chain")
    if len(actor.pending):
        found.append("notification")
    if actor.draining or actor.stopping:
        found.append("stopping")
    return tuple(found)


def deactivate(actor: Any, msg: DeactivateMsg) -> None:
    """Stop `actor` like a drain if nothing is pending: answers `("ok", halted)` and stops,
    else `("busy", pending_work)` and carries on."""
    busy = pending_work(actor)
    if busy:
        msg.reply.resolve(("busy", busy))
        return
    msg.reply.resolve(("ok", actor.halted))
    raise StopAgent("normal")
