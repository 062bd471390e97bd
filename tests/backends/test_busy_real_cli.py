"""What the pinned `claude` (2.1.197) does with a user message written while a turn runs, on
its stream-json input, against ScriptedModelServer on loopback: the protocol facts the busy
policies' docs rest on (docs/pages/busy.md, "steer"). A CLI upgrade that changes them fails
here first.

- `priority: "next"` while a tool runs: delivered into the running turn at the tool
  boundary (a system-reminder in the tool_result's user message), replayed with its uuid,
  and the turn ends with one result.
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

from gen_agent.testing._model_server import Reply, ScriptedModelServer

from .test_claude_real_cli import MODEL, claude_cli, cli_options  # noqa: F401 - fixtures

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
