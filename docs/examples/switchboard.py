"""Switchboard: a manager drives a fleet of long-lived, named agent sessions (contract §10).

A `Session` agent never self-chains and never halts on its own: every turn appends an entry
to its history and the agent goes idle again. Manager commands arrive as notifications
(update the summary, acknowledge the inbox up to a cursor, halt). The `Switchboard` facade
starts sessions, submits prompts with `tell` (a busy session simply queues), broadcasts,
polls, reads each session's inbox, and controls the sessions. Calls on a missing name return
`("error", "not_found")`; casts on a missing name do nothing.

Run it: `python docs/examples/switchboard.py [--backend NAME]`.
"""

from __future__ import annotations

import queue
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from choose_backend import chosen_backend

import gen_agent
from gen_agent import GenAgent, Halt, NoReply


# --8<-- [start:agent]
@dataclass(frozen=True)
class Entry:
    """One finished turn in a session's history."""

    seq: int                     # 1, 2, 3, ... in completion order
    ref: Any                     # the RequestRef the turn answered
    text: str | None             # the reply, or None when the turn failed
    error: Any                   # the failure reason, or None
    usage: dict[str, Any] | None
    duration_ms: int
    completed_at: float          # time.time() when the outcome arrived


@dataclass(frozen=True)
class SessionState:
    history: tuple[Entry, ...] = ()
    summary: str = ""
    acked: int = 0               # inbox cursor: entries with seq <= acked are read


class Session(GenAgent):
    """A long-lived session: records every turn, obeys the manager's notifications."""

    def init_agent(self, opts):
        return opts["backend_opts"], SessionState(summary=opts.get("summary", ""))

    def handle_response(self, ref, response, state):
        return NoReply(self._record(state, ref, response.text, None, response.usage,
                                    response.duration_ms))

    def handle_error(self, ref, reason, state):
        return NoReply(self._record(state, ref, None, reason, None, 0))

    def handle_event(self, event, state):
        match event:
            case ("summary", str(text)):
                return NoReply(replace(state, summary=text))
            case ("ack", int(cursor)):
                # An old acknowledgement never moves the cursor backwards.
                cursor = min(cursor, len(state.history))
                return NoReply(replace(state, acked=max(state.acked, cursor)))
            case ("halt",):
                return Halt(state)
            case _:
                return NoReply(state)

    @staticmethod
    def _record(state, ref, text, error, usage, duration_ms):
        entry = Entry(seq=len(state.history) + 1, ref=ref, text=text, error=error,
                      usage=usage, duration_ms=duration_ms, completed_at=time.time())
        return replace(state, history=(*state.history, entry))
# --8<-- [end:agent]


# --8<-- [start:facade]
NOT_FOUND = ("error", "not_found")


class Switchboard:
    """The manager's facade over named `Session` agents.

    Calls return `("ok", value)` or `("error", reason)`; casts return None.
    """

    def __init__(self, backend: Any, backend_opts: dict[str, Any]) -> None:
        self.backend = backend
        self.backend_opts = backend_opts

    def start(self, name: Any, *, summary: str = "", **backend_opts: Any):
        """Start a session; extra keywords (e.g. `cwd`) go to the backend."""
        try:
            gen_agent.start_agent(Session, name=name, backend=self.backend, summary=summary,
                                  backend_opts={**self.backend_opts, **backend_opts})
        except gen_agent.AlreadyStarted:
            return ("error", "already_started")
        except gen_agent.AgentStartError as exc:
            return ("error", exc.reason)
        return ("ok", name)

    def submit(self, name: Any, prompt: str, on_done: Any = None):
        """Queue a prompt; a busy session queues it behind its current turn.

        `on_done` (e.g. a `queue.Queue`) also gets the completion message, for a manager
        that would rather wait than poll.
        """
        try:
            if on_done is not None:
                return ("ok", gen_agent.tell_with_completion(name, prompt, on_done))
            return ("ok", gen_agent.tell(name, prompt))
        except gen_agent.AgentNotFound:
            return NOT_FOUND
        except gen_agent.TurnError as exc:
            return ("error", exc.reason)        # ("overloaded", info) or "draining"

    def broadcast(self, names: Sequence[Any], prompt: str, on_done: Any = None) -> dict:
        """Submit to each name; the outcome per name (overload and not_found included)."""
        return {name: self.submit(name, prompt, on_done) for name in names}

    def poll(self, name: Any, ref: Any):
        result = gen_agent.poll(name, ref)
        if result.status == "completed":
            return ("ok", result.response.text)
        if result.status == "pending":
            return ("ok", "pending")
        return ("error", result.reason)

    def inbox(self, name: Any, *, ack: bool = True):
        """Entries finished since the last acknowledgement; acknowledge them if `ack`.

        Returns `("ok", (entries, acknowledged))`. A rejected acknowledgement (the session is
        overloaded or draining) leaves the entries unread, to be returned again next time.
        """
        state = self._state(name)
        if state is None:
            return NOT_FOUND
        unread = tuple(e for e in state.history if e.seq > state.acked)
        acknowledged = False
        if ack and unread:
            try:
                gen_agent.notify_ack(name, ("ack", unread[-1].seq))
                acknowledged = True
            except gen_agent.TurnError:
                pass                            # stays unread
            except gen_agent.AgentNotFound:
                return NOT_FOUND
        return ("ok", (unread, acknowledged))

    def summary(self, name: Any):
        state = self._state(name)
        return NOT_FOUND if state is None else ("ok", state.summary)

    def update_summary(self, name: Any, text: str):
        try:
            gen_agent.notify_ack(name, ("summary", text))
        except gen_agent.AgentNotFound:
            return NOT_FOUND
        except gen_agent.TurnError as exc:
            return ("error", exc.reason)
        return ("ok", text)

    def transcript(self, name: Any, last: int | None = None):
        state = self._state(name)
        if state is None:
            return NOT_FOUND
        history = state.history if last is None else state.history[-last:] if last else ()
        return ("ok", history)

    # Casts: never fail, also for a missing name.
    def interrupt(self, name: Any) -> None:
        gen_agent.interrupt(name)

    def halt(self, name: Any) -> None:
        gen_agent.notify(name, ("halt",))      # via the session's own handle_event

    def resume(self, name: Any) -> None:
        gen_agent.resume(name)

    def stop(self, name: Any):
        try:
            gen_agent.stop(name)
        except gen_agent.AgentNotFound:
            return NOT_FOUND
        return ("ok", name)

    @staticmethod
    def _state(name: Any) -> SessionState | None:
        try:
            return gen_agent.status(name).agent_state
        except (gen_agent.AgentNotFound, gen_agent.AgentDown):
            return None
# --8<-- [end:facade]


def fake_model(prompt: str) -> str:
    """The stand-in model: a short acknowledgement of the prompt."""
    return f"Done: {prompt}"


def run(backend: Any, backend_opts: dict[str, Any]) -> dict[str, Any]:
    """Two sessions, a broadcast, and each inbox read twice (the second read is empty)."""
    board = Switchboard(backend, backend_opts)
    board.start("alice", summary="frontend work")
    board.start("bob", summary="backend work")
    done: queue.Queue = queue.Queue()
    outcomes = board.broadcast(["alice", "bob", "carol"], "Report your status in one line.",
                               on_done=done)
    for _ in ("alice", "bob"):
        done.get(timeout=120)                   # one completion message per session
    inboxes = {name: board.inbox(name)[1] for name in ("alice", "bob")}
    again = {name: board.inbox(name)[1][0] for name in ("alice", "bob")}
    return {"outcomes": outcomes, "inboxes": inboxes, "second_read": again}


def main(argv: Sequence[str] | None = None) -> None:
    with (chosen_backend(argv, fake_model, description=__doc__) as (backend, opts),
          gen_agent.AgentSystem()):
        result = run(backend, opts)
    print("carol:", result["outcomes"]["carol"])
    for name, (entries, acknowledged) in result["inboxes"].items():
        for entry in entries:
            print(f"{name} #{entry.seq}: {entry.text or entry.error}")
        print(f"{name}: acknowledged={acknowledged}, unread after ack="
              f"{len(result['second_read'][name])}")


if __name__ == "__main__":
    main(sys.argv[1:])
