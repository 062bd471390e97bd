"""A chat service on an `AgentHost`: one agent per conversation key, started on the first
message, resumed from SQLite, deactivated when idle, with streams a client can rejoin.

Run it: `python docs/examples/guide/chat_host.py`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import gen_agent
from gen_agent import AgentHost, GenAgent, NoReply
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.store import SQLiteStore


# --8<-- [start:agent]
class Chat(GenAgent):
    """One conversation. Its state (the number of replies) is stored after every turn, so a
    deactivated conversation picks up where it stopped."""

    persist_state = True

    def init_agent(self, opts):
        self.user = opts["key"]  # the host passes the conversation's key
        return {"fallback": opts["model"]}, {"replies": 0}

    def handle_response(self, ref, response, state):
        return NoReply({"replies": state["replies"] + 1})
# --8<-- [end:agent]


def fake_model(prompt: str) -> list[gen_agent.Event]:
    """A stand-in for a model: answers in three chunks."""
    return mock.text_turn(["You ", "said: ", prompt])


def make_host(db: Path, **options) -> AgentHost:
    # --8<-- [start:host]
    host = AgentHost(Chat, backend=MockBackend, store=SQLiteStore(db),
                     deactivate_after_ms=30_000,  # idle conversations leave memory
                     max_live=1_000,              # at most this many agents at once
                     model=fake_model, **options)
    # --8<-- [end:host]
    return host


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, make_host(Path(tmp) / "chats.db") as host:
        # --8<-- [start:ask]
        print(host.ask("alice", "hello").text)        # starts alice's agent
        print(host.ask("alice", "again").text)        # the same agent
        host.deactivate("alice")                      # as the idle timer would
        print(host.status("alice").totals.turns)      # the stored record: 2 turns
        print(host.ask("alice", "back").text)         # resumed from the store
        # --8<-- [end:ask]

        # --8<-- [start:rejoin]
        with host.stream("bob", "a long answer", interrupt_on_exit=False) as turn:
            for event in turn:
                if event.kind == "text":
                    break                 # the client's connection drops after one event
            ref, seen = turn.ref, turn.seq
        # the client reconnects with the ref and the last sequence number it saw
        with host.attach("bob", ref, after=seen) as rejoined:
            rest = [e.data["text"] for e in rejoined if e.kind == "text"]
            print(rest, rejoined.response.text)
        # --8<-- [end:rejoin]
        host.forget("bob")                           # delete bob's conversation


if __name__ == "__main__":
    main()
