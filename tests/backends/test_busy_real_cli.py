"""What the pinned `claude` (2.1.197) does with a user message written while a turn runs, on
its stream-json input, against ScriptedModelServer on loopback: the protocol facts the busy
policies' docs rest on (docs/pages/busy.md, "steer"). A CLI upgrade that changes them fails
here first.

- `priority: "next"` while a tool runs: delivered into the running turn at the tool
  boundary (a system-reminder in the tool_result's user message), replayed with its uuid,
  and the turn ends with one result; through the agent (`busy="steer"`) the steered ask
  gets that turn's Response, listing its ref.
- no priority: delivered into the running turn or not, depending on timing (seen both ways
  on 2.1.197), so a steer must send `"next"`; not asserted here.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import uuid
from typing import Any

import pytest

import gen_agent
from gen_agent.backends.claude import ClaudeCLI
from gen_agent.telemetry import TURN_JOINED, TURN_STOP, TelemetryRecorder
from gen_agent.testing._model_server import Reply, ScriptedModelServer

from .test_claude_real_cli import (  # noqa: F401 - fixtures
    MODEL,
    TURN_TIMEOUT_S,
    claude_cli,
    cli_options,
)
from .test_claude_warm_real_cli import WarmAgent, warm_options  # noqa: F401

pytestmark = [pytest.mark.real_cli, pytest.mark.usefixtures("no_child_left")]

WAIT_S = 30.0


def user_line(text: str, priority: str | None) -> tuple[str, str]:
    """A stream-json user line (as the warm backend writes one) and its uuid."""
    line_id = str(uuid.uuid4())
    message: dict[str, Any] = {"type": "user", "message": {"role": "user", "content": text},
                               "parent_tool_use_id": None, "session_id": "default",
                               "uuid": line_id}
    if priority is not None:
        message["priority"] = priority
    return json.dumps(message) + "\n", line_id


def test_a_next_priority_message_joins_the_running_turn_at_the_tool_boundary(
        server: ScriptedModelServer, cli_options: Any) -> None:  # noqa: F811 - the fixture
    priority = "next"
    server.enqueue(Reply.tool_use("Bash", {"command": "sleep 1", "description": "wait"},
                                  id="toolu_1"), Reply.text("first answer"),
                   Reply.text("second answer"))
    opts = cli_options()
    argv = [opts["cli_path"], "-p", "--input-format", "stream-json", "--output-format",
            "stream-json", "--verbose", "--replay-user-messages", "--model", MODEL,
            "--allowedTools", "Bash"]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=opts["env"], cwd=opts["cwd"],
                            text=True, start_new_session=True)
    lines: queue.Queue[dict[str, Any]] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(json.loads(x)) for x in proc.stdout],
                              daemon=True)
    reader.start()
    try:
        first, _ = user_line("PROMPT ONE", None)
        proc.stdin.write(first)
        proc.stdin.flush()
        server.wait_requests(1, timeout=WAIT_S)  # the turn runs; its tool comes next
        second, second_id = user_line("PROMPT TWO", priority)
        proc.stdin.write(second)
        proc.stdin.flush()
        seen: list[dict[str, Any]] = []
        while not (seen and seen[-1].get("type") == "result"):
            seen.append(lines.get(timeout=WAIT_S))
    finally:
        proc.stdin.close()
        proc.kill()
        proc.wait(WAIT_S)
        reader.join(WAIT_S)
        proc.stdout.close()
    first_result = seen[-1]
    after_tool = json.dumps(server.model_requests()[1].body["messages"][-1]["content"])
    replayed = [x.get("uuid") for x in seen if x.get("type") == "user" and x.get("isReplay")]
    assert "The user sent a new message while you were working" in after_tool
    assert "PROMPT TWO" in after_tool
    assert second_id in replayed  # replayed inside the running turn, before its result
    assert first_result["subtype"] == "success" and first_result["num_turns"] == 2


class StreamingAgent(WarmAgent):
    """Puts the kind of every streamed event into `opts["kinds"]`."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        self.kinds = opts["kinds"]
        return super().init_agent(opts)

    def handle_stream_event(self, event: Any, state: Any) -> Any:
        self.kinds.put(event.kind)
        return state


def test_a_steered_ask_joins_the_running_warm_turn(
        server: ScriptedModelServer, warm_options: Any) -> None:  # noqa: F811 - the fixture
    """`busy="steer"` end to end: the steer is sent once the turn streamed its tool_use
    (the tool, a `sleep 3`, is then starting); the turn ends with one result, which both
    callers get and which lists the steered ref."""
    server.enqueue(Reply.tool_use("Bash", {"command": "sleep 3", "description": "wait"},
                                  id="toolu_1"), Reply.text("joined answer"))
    kinds: queue.Queue[str] = queue.Queue()
    gen_agent.start_agent(StreamingAgent, name="steer", backend=ClaudeCLI, kinds=kinds,
                          backend_opts=warm_options(allowed_tools=["Bash"]), busy="steer")
    first: queue.Queue[Any] = queue.Queue()
    caller = threading.Thread(target=lambda: first.put(
        gen_agent.ask("steer", "PROMPT ONE", timeout=TURN_TIMEOUT_S)))
    caller.start()
    try:
        while kinds.get(timeout=WAIT_S) != "tool_use":
            pass
        with TelemetryRecorder([TURN_JOINED, TURN_STOP]) as rec:
            answer = gen_agent.ask("steer", "PROMPT TWO", timeout=TURN_TIMEOUT_S)
            owner = first.get(timeout=TURN_TIMEOUT_S)
    finally:
        caller.join(TURN_TIMEOUT_S)
    assert answer.text == owner.text == "joined answer"
    assert answer.num_turns == 2 and len(answer.joined) == 1
    after_tool = json.dumps(server.model_requests()[1].body["messages"][-1]["content"])
    assert "PROMPT TWO" in after_tool and len(server.model_requests()) == 2
    mine = [r for r in rec.records if r.metadata.get("agent") == "steer"]
    assert [r.metadata["ref"] for r in mine if r.event_name == TURN_JOINED] == [
        answer.joined[0]]
    assert sum(r.event_name == TURN_STOP for r in mine) == 1
    gen_agent.stop("steer")
