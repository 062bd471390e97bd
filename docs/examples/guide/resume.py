"""Resuming durable sessions after a restart: list the stored keys, start each agent, act on
the turn it had in hand (re-send it, guarded by its tool journal, or report it). Runs offline:
`AnthropicAPI` against the loopback `ScriptedModelServer`, and a turn cut short by stopping
the agent while its side-effecting tool hangs (a process death is reported the same way).

Run it: `python docs/examples/guide/resume.py`.
"""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path
from typing import Any

import gen_agent
from gen_agent import GenAgent, NoReply
from gen_agent.store import InterruptedTurn, SQLiteStore
from gen_agent.testing._model_server import Reply, ScriptedModelServer
from gen_agent.tools import ToolContext, tool


class Gateway:
    """A stand-in payment API that refuses a repeated idempotency key; its first call hangs
    (as if the process died there)."""

    def __init__(self) -> None:
        self.refunds: dict[str, tuple[str, int]] = {}
        self.hang = threading.Event()
        self.entered = threading.Event()
        self.release = threading.Event()

    def refund(self, order_id: str, cents: int, idempotency_key: str) -> None:
        self.refunds.setdefault(idempotency_key, (order_id, cents))
        if not self.hang.is_set():
            self.hang.set()
            self.entered.set()
            self.release.wait(10)  # "dies" here: the agent is stopped meanwhile


GATEWAY = Gateway()


# --8<-- [start:tool]
@tool(side_effects=True)
def refund(order_id: str, cents: int, ctx: ToolContext) -> str:
    """Refund an order.

    Args:
        order_id: the order. cents: the amount.
    """
    # The key is the same for every run of this call: the gateway refuses a duplicate.
    GATEWAY.refund(order_id, cents, idempotency_key=ctx.idempotency_key)
    return f"refunded {cents} cents on {order_id}"
# --8<-- [end:tool]


# --8<-- [start:agent]
class Support(GenAgent):
    """Counts its answered turns, stored with the session."""

    persist_state = True

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {**opts["backend_opts"], "tools": [refund]}, {"answered": 0}

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return NoReply({"answered": state["answered"] + 1})

    def handle_info(self, message: Any, state: Any) -> Any:
        if isinstance(message, InterruptedTurn) and message.phase == "after_response":
            # The reply was stored, the decision's state was not: make them agree.
            return NoReply({"answered": state["answered"] + 1})
        return NoReply(state)
# --8<-- [end:agent]


# --8<-- [start:resume]
def resume_all(store: SQLiteStore, backend: Any, backend_opts: dict[str, Any]) -> list[str]:
    """Start an agent for every stored key and act on the turn each had in hand."""
    report = []
    for key in store.list_keys():
        gen_agent.start_agent(Support, name=key, backend=backend, store=store,
                              session_key=key, backend_opts=backend_opts)
        cut = gen_agent.status(key).store.interrupted_turn
        if cut is None:
            continue
        if cut.phase == "after_response":  # answered; handle_info reconciled the state
            report.append(f"{key}: answered before the restart: {cut.response}")
        elif cut.prompt is None:  # written by a gen_agent before the journal
            report.append(f"{key}: a turn was lost; ask the user again")
        else:
            for call in cut.in_doubt:  # started, no result: it may have taken effect
                report.append(f"{key}: {call.tool} {call.input} may have run; check it")
            # Finished calls answer from the journal; in-doubt ones get "outcome unknown".
            answer = gen_agent.resend(key, cut, timeout=60)
            report.append(f"{key}: re-sent, answered: {answer.text}")
    return report
# --8<-- [end:resume]


def demo() -> tuple[list[str], list[tuple[str, int]], int]:
    """A turn cut short inside `refund`, then a restart: the report, the refunds made and
    the number of model requests."""
    from gen_agent.backends.anthropic import AnthropicAPI

    with tempfile.TemporaryDirectory() as tmp, ScriptedModelServer() as server, \
            gen_agent.AgentSystem():
        store = SQLiteStore(Path(tmp) / "support.db")
        opts = {"api_key": "test-key", "base_url": server.url, "model": "claude-test"}
        server.enqueue(Reply.tool_use("refund", {"order_id": "A-17", "cents": 1250}))
        gen_agent.start_agent(Support, name="chat-42", backend=AnthropicAPI, store=store,
                              session_key="chat-42", backend_opts=opts, shutdown_ms=50)
        gen_agent.tell("chat-42", "Please refund order A-17 (12.50).")
        GATEWAY.entered.wait(10)
        gen_agent.stop("chat-42")  # the turn never finished
        GATEWAY.release.set()
        # ... the process restarts; the model asks for the same refund again (a new call id):
        server.enqueue(Reply.tool_use("refund", {"order_id": "A-17", "cents": 1250}),
                       Reply.text("I could not confirm the refund; please check order A-17."))
        report = resume_all(store, AnthropicAPI, opts)
        gen_agent.stop("chat-42")
        store.close()
        requests = len(server.model_requests())
    return report, list(GATEWAY.refunds.values()), requests


if __name__ == "__main__":
    lines, refunds, _ = demo()
    print("\n".join(lines))
    print(f"refunds made: {refunds}")
