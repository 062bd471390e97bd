"""A fake `claude` in streaming-input mode (`--input-format stream-json`), for the warm-mode
fault tests the real CLI cannot be made to show (a turn that never settles, a crash mid-turn,
output between turns).

Reads stdin lines; answers `initialize` and `interrupt` control requests; plays one turn per
`user` line, chosen by the prompt's first word:

- `hello ...`: init, an assistant text "echo: <prompt>", a `result` whose `total_cost_usd`
  is the running total (+0.25 per turn);
- `tool ...`: a `can_use_tool` request for Bash (its answer appended to
  `$FAKE_CLAUDE_DIR/answers.jsonl`); then a tool_result saying "allowed" or the denial
  message, and a result (with `interrupt`, a result error_during_execution instead);
- `slow ...`: init, then waits; an `interrupt` ends it with `error_during_execution`;
- `stuck ...`: like slow, but acknowledges the interrupt and never ends the turn;
- `die ...`: init, then exits with status 3 mid-turn;
- `stray ...`: like hello, then one more `system` line after the result (no turn running).
- `background ...`: like hello, then a turn of its own (a background task's: a
  `task_notification`, init, an assistant text "background done", a result).
- `race ...`: like hello, then a `task_notification`; the turn of its own that follows is
  played only once the next prompt arrived (before that prompt's turn): the order the real
  CLI shows when a prompt is written just as a background task's turn starts.
- `sneak ...`: like `race`, without the notification (a turn of its own nobody announced).
- `steer ...`: init, a Bash tool_use, then waits for the next `user` line (a steer) and
  joins it to the turn as the real CLI does with `"priority": "next"` at the tool boundary:
  its replay (`isReplay`, its uuid), the tool_result, an assistant text "joined: <steer>",
  one result (`num_turns: 2`); `steerlate ...`: the same, but the tool boundary has passed
  when the line comes: the turn ends ("done early") and the line then runs as a turn of its
  own (init, its replay, "echo: <steer>", a result).
- `garbled ...`: two lines of plain text on stdout, then exits 1 without a result.
- `surrogate ...`: an assistant text and result holding an escaped lone surrogate
  (`"\ud800"`, as the CLI's JSON.stringify writes one).
- `/cost`: a local command: no echo, a synthetic assistant line, a result with
  `num_turns: 0`.

With `--replay-user-messages` (as the backend starts it), each `user` line is echoed right
after the turn's init line, with its `uuid` and `isReplay: true`, as the real CLI does.
- `pytool NAME ...`: init, a tool_use of `mcp__gen_agent__NAME` and an `mcp_message`
  `tools/call` of NAME (no arguments); the answer's text becomes the tool_result; an answer
  "cancelled" then waits for the interrupt (as `slow`), any other ends "tool said TEXT".
- `late NAME ...`: like slow, but after acknowledging the interrupt sends a `tools/call` of
  NAME, writes the answer to `$FAKE_CLAUDE_DIR/late.json`, then ends the turn.
- `bash ...`: init, a Bash tool_use whose command (a `sleep`) runs in a session of its own,
  as the real CLI's Bash tool does (its pid in `$FAKE_CLAUDE_DIR/helper.pid`); an `interrupt`
  kills it and ends the turn (as the real CLI does); `bashstuck ...`: the same, but the
  interrupt is acknowledged only: the command runs on and the turn never ends; `bashleave
  ...`: the interrupt ends the turn but leaves the command running (as codex 0.171's
  app-server sometimes does).

Exits at EOF on stdin. Each control request read between turns appends `{"pid", "subtype"}`
to `$FAKE_CLAUDE_DIR/controls.jsonl`. Every start appends `{"argv", "pid", "alive_at_start"}` to
`$FAKE_CLAUDE_DIR/calls.jsonl` (the pids of earlier starts still running then: /proc).

With `FAKE_CLAUDE_REPLAY` naming a recorded session (tests/fixtures/claude-cli/warm/*.jsonl),
it replays that instead: prints each recorded stdout line (its `"raw"` text when the record
has one, byte for byte), and at each recorded stdin line reads one line and appends
`{"expected", "got"}` (the line's type and its subtype, behavior or content; or, for a record
holding `"raw"`, the whole line as written, byte for byte, our prompt uuid read as the
recorded one) to `$FAKE_CLAUDE_DIR/replay.jsonl`; the uuid of each prompt read replaces the
recorded one in the stdout lines that follow (the echo). A stdin record marked `undelivered`
(the real CLI had exited) is skipped; an `exit` record writes its `stderr` and exits with its
`code` (negative: killed by that signal). A recording of several processes numbers its
records (`process`): invocation N replays process N. At the end of its records a process
waits for EOF.
Only the standard library.
"""

from __future__ import annotations

import json
import os
import sys
import time

SESSION = "warm-session-0001"
cost = 0.0
current: dict[str, object] = {}  # the user line whose turn is playing


def out(obj: object) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def session_id() -> str:
    argv = sys.argv
    return argv[argv.index("--resume") + 1] if "--resume" in argv else SESSION


def init() -> None:
    out({"type": "system", "subtype": "init", "session_id": session_id(),
         "model": "fake-model", "tools": ["Bash"], "permissionMode": "default"})
    if "--replay-user-messages" in sys.argv and current:
        out({**current, "session_id": session_id(), "isReplay": True})


def assistant(content: list[dict[str, object]]) -> None:
    out({"type": "assistant", "session_id": session_id(), "parent_tool_use_id": None,
         "message": {"id": f"msg_{time.monotonic_ns()}", "model": "fake-model",
                     "role": "assistant", "content": content}})


def result(text: str, *, subtype: str = "success", add: float = 0.25, turns: int = 1) -> None:
    global cost
    cost += add
    out({"type": "result", "subtype": subtype, "is_error": subtype != "success",
         "result": text, "session_id": session_id(), "total_cost_usd": cost, "num_turns": turns,
         "usage": {"input_tokens": 10, "output_tokens": 5}})


def own_turn() -> None:
    """A turn of its own (a background task finished): no user line, no echo."""
    global current
    current = {}
    init()
    assistant([{"type": "text", "text": "background done"}])
    result("background done", add=0.5)


def notification() -> None:
    out({"type": "system", "subtype": "task_notification", "task_id": "bg1",
         "status": "completed", "session_id": session_id()})


def read() -> dict[str, object] | None:
    raw = sys.stdin.readline()
    if not raw:
        sys.exit(0)
    return json.loads(raw)


def ack(message: dict[str, object]) -> None:
    out({"type": "control_response",
         "response": {"subtype": "success", "request_id": message["request_id"]}})


def wait_interrupt(*, settle: bool) -> None:
    while True:
        message = read()
        assert message is not None
        if message.get("type") == "control_request":
            ack(message)
            request = message["request"]
            if isinstance(request, dict) and request.get("subtype") == "interrupt":
                if settle:
                    out({"type": "user", "session_id": session_id(), "message": {
                        "role": "user", "content": [{"type": "text", "text": "[interrupted]"}]}})
                    result("", subtype="error_during_execution", add=0.0)
                    return
                while True:  # stuck: never settles, still reads (until EOF or a kill)
                    read()


def tool_turn() -> None:
    init()
    tool_input = {"command": "echo hi"}
    assistant([{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": tool_input}])
    out({"type": "control_request", "request_id": "perm-1", "request": {
        "subtype": "can_use_tool", "tool_name": "Bash", "input": tool_input,
        "tool_use_id": "toolu_1", "blocked_path": "/tmp"}})
    while True:
        message = read()
        assert message is not None
        if message.get("type") == "control_response":
            break
        if message.get("type") == "control_request":
            ack(message)
    answer = message["response"]["response"]  # type: ignore[index]
    with open(os.path.join(os.environ["FAKE_CLAUDE_DIR"], "answers.jsonl"), "a") as log:
        log.write(json.dumps(answer) + "\n")  # what the permission request was answered
    if answer["behavior"] == "allow":
        content, is_error = f"allowed: {answer['updatedInput']['command']}", False
    else:
        content, is_error = answer["message"], True
    out({"type": "user", "session_id": session_id(), "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": content,
         "is_error": is_error}]}})
    if answer.get("interrupt"):
        result("", subtype="error_during_execution", add=0.0)
        return
    assistant([{"type": "text", "text": f"tool said {content}"}])
    result(f"tool said {content}")


def python_tool_turn(name: str) -> None:
    init()
    assistant([{"type": "tool_use", "id": "toolu_py", "name": f"mcp__gen_agent__{name}",
                "input": {}}])
    out({"type": "control_request", "request_id": "mcp-call-1", "request": {
        "subtype": "mcp_message", "server_name": "gen_agent", "message": {
            "method": "tools/call", "jsonrpc": "2.0", "id": 5, "params": {
                "name": name, "arguments": {}, "_meta": {"claudecode/toolUseId": "toolu_py"}}}}})
    while True:
        message = read()
        assert message is not None
        if message.get("type") == "control_response":
            break
        if message.get("type") == "control_request":
            ack(message)
    answer = message["response"]["response"]["mcp_response"]["result"]  # type: ignore[index]
    text = answer["content"][0]["text"]
    out({"type": "user", "session_id": session_id(), "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_py", "content": text,
         "is_error": bool(answer.get("isError"))}]}})
    if text == "cancelled":
        wait_interrupt(settle=True)
        return
    assistant([{"type": "text", "text": f"tool said {text}"}])
    result(f"tool said {text}")


def late_tool_turn(name: str) -> None:
    init()
    assistant([{"type": "text", "text": "partial "}])
    while True:
        message = read()
        assert message is not None
        if message.get("type") == "control_request":
            ack(message)
            if message["request"].get("subtype") == "interrupt":  # type: ignore[union-attr]
                break
    out({"type": "control_request", "request_id": "mcp-late-1", "request": {
        "subtype": "mcp_message", "server_name": "gen_agent", "message": {
            "method": "tools/call", "jsonrpc": "2.0", "id": 9, "params": {
                "name": name, "arguments": {}, "_meta": {"claudecode/toolUseId": "toolu_late"}}}}})
    message = read()
    with open(os.path.join(os.environ["FAKE_CLAUDE_DIR"], "late.json"), "w") as log:
        json.dump(message, log)
    result("", subtype="error_during_execution", add=0.0)


def bash_turn(*, settle: bool, leave: bool = False) -> None:
    import signal
    import subprocess

    init()
    assistant([{"type": "tool_use", "id": "toolu_bash", "name": "Bash",
                "input": {"command": "sleep 1000"}}])
    tool = subprocess.Popen(["sleep", "1000"], start_new_session=True)
    with open(os.path.join(os.environ["FAKE_CLAUDE_DIR"], "helper.pid"), "w") as f:
        f.write(str(tool.pid))
    if settle:
        while True:
            message = read()
            assert message is not None
            if message.get("type") == "control_request":
                ack(message)
                if message["request"].get("subtype") == "interrupt":  # type: ignore[union-attr]
                    if not leave:
                        os.kill(tool.pid, signal.SIGKILL)
                        tool.wait()
                    result("", subtype="error_during_execution", add=0.0)
                    return
    wait_interrupt(settle=False)


def steer_turn(*, join: bool) -> None:
    global current
    init()
    assistant([{"type": "tool_use", "id": "toolu_steer", "name": "Bash",
                "input": {"command": "sleep 1"}}])
    while True:
        message = read()
        assert message is not None
        if message.get("type") == "control_request":
            ack(message)
            if message["request"].get("subtype") == "interrupt":  # type: ignore[union-attr]
                result("", subtype="error_during_execution", add=0.0)
                return
        elif message.get("type") == "user":
            break
    content = message["message"]["content"]  # type: ignore[index]
    text = content if isinstance(content, str) else ""
    if join:
        out({**message, "session_id": session_id(), "isReplay": True})
    out({"type": "user", "session_id": session_id(), "parent_tool_use_id": None, "message": {
        "role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_steer",
                                     "content": "done"}]}})
    answer = f"joined: {text[:40]}" if join else "done early"
    assistant([{"type": "text", "text": answer}])
    result(answer, turns=2)
    if not join:
        current = message
        init()
        assistant([{"type": "text", "text": f"echo: {text[:40]}"}])
        result(f"echo: {text[:40]}")


def alive(pid: int) -> bool:
    """Whether an earlier fake (pid) still runs (not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def shape(message: dict) -> list[object]:
    """What a replay compares of a stdin line: its type and what it says."""
    kind = message.get("type")
    if kind == "control_request":
        return [kind, message["request"].get("subtype")]
    if kind == "control_response":
        return [kind, message["response"].get("response", {}).get("behavior")]
    if kind == "user":
        return [kind, message["message"]["content"]]
    return [kind]


def replay(path: str, directory: str, invocation: int) -> None:
    with open(path) as recording:
        records = [json.loads(x) for x in recording if x.strip()]
    records = [r for r in records if r.get("process", 0) == invocation]
    uuids: dict[str, str] = {}  # recorded prompt uuid -> the one we got

    def mapped(text: str) -> str:
        for recorded, got in uuids.items():
            text = text.replace(recorded, got)
        return text

    for record in records:
        if record["dir"] == "stdout":
            text = record["raw"] if "raw" in record else json.dumps(record["line"])
            sys.stdout.write(mapped(text) + "\n")
            sys.stdout.flush()
            continue
        if record["dir"] == "exit":
            sys.stderr.write(record.get("stderr", ""))
            sys.stderr.flush()
            code = record["code"]
            if code < 0:
                os.kill(os.getpid(), -code)
            sys.exit(code)
        if record["dir"] != "stdin" or record.get("undelivered"):
            continue  # a `start` record, or a line the real CLI never got
        raw = sys.stdin.readline()
        if not raw:
            sys.exit(0)
        got = json.loads(raw)
        recorded = record.get("line")
        if recorded is None:
            recorded = json.loads(record["raw"])
        expected_uuid = recorded.get("uuid") if isinstance(recorded, dict) else None
        if isinstance(expected_uuid, str) and isinstance(got.get("uuid"), str):
            uuids[expected_uuid] = got["uuid"]
        if "raw" in record:  # a byte-exact recording of what the client wrote
            as_recorded = raw.rstrip("\n")
            for recorded, ours in uuids.items():
                as_recorded = as_recorded.replace(ours, recorded)
            entry = {"expected": record["raw"], "got": as_recorded}
        else:
            entry = {"expected": shape(recorded), "got": shape(got)}
        with open(os.path.join(directory, "replay.jsonl"), "a") as log:
            log.write(json.dumps(entry) + "\n")
    while True:
        read()


def main() -> None:
    global current
    directory = os.environ.get("FAKE_CLAUDE_DIR")
    invocation = 0
    if directory:
        with open(os.path.join(directory, "calls.jsonl"), "a+") as calls:
            calls.seek(0)
            earlier = [json.loads(x)["pid"] for x in calls if x.strip()]
            invocation = len(earlier)
            calls.write(json.dumps({"argv": sys.argv[1:], "pid": os.getpid(),
                                    "alive_at_start": [p for p in earlier if alive(p)]}) + "\n")
    recording = os.environ.get("FAKE_CLAUDE_REPLAY")
    if recording and directory:
        replay(recording, directory, invocation)
    race = False
    while True:
        message = read()
        assert message is not None
        if message.get("type") == "control_request":
            if directory:  # the requests taken between turns, in order
                with open(os.path.join(directory, "controls.jsonl"), "a") as controls:
                    subtype = message["request"].get("subtype")  # type: ignore[union-attr]
                    controls.write(json.dumps({"pid": os.getpid(), "subtype": subtype}) + "\n")
            ack(message)
            continue
        if message.get("type") != "user":
            continue
        if race:  # the prompt arrived just as a turn of its own was starting
            race = False
            own_turn()
        current = message
        content = message["message"]["content"]  # type: ignore[index]
        prompt = content if isinstance(content, str) else ""
        word = prompt.split(" ", 1)[0]
        if word == "/cost":
            current = {}
            init()
            assistant([{"type": "text", "text": "Total cost: $0.0000"}])
            result("Total cost: $0.0000", add=0.0, turns=0)
            continue
        if word == "garbled":
            sys.stdout.write("Error: something is misconfigured\nsee the docs\n")
            sys.stdout.flush()
            sys.exit(1)
        if word == "tool":
            tool_turn()
            continue
        if word == "late":
            late_tool_turn(prompt.split(" ")[1])
            continue
        if word in ("bash", "bashstuck", "bashleave"):
            bash_turn(settle=word != "bashstuck", leave=word == "bashleave")
            continue
        if word in ("steer", "steerlate"):
            steer_turn(join=word == "steer")
            continue
        if word == "pytool":
            python_tool_turn(prompt.split(" ")[1])
            continue
        init()
        if word in ("slow", "stuck"):
            assistant([{"type": "text", "text": "partial "}])
            wait_interrupt(settle=word == "slow")
            continue
        if word == "die":
            sys.exit(3)
        if word == "surrogate":
            assistant([{"type": "text", "text": "half \ud800 pair"}])  # dumps escapes it
            result("half \ud800 pair")
            continue
        assistant([{"type": "text", "text": f"echo: {prompt[:40]}"}])
        result(f"echo: {prompt[:40]}")
        if word == "stray":
            out({"type": "system", "subtype": "task_notification", "session_id": session_id(),
                 "note": "background work finished"})
        elif word == "background":
            notification()
            own_turn()
        elif word == "race":
            notification()
            race = True
        elif word == "sneak":
            race = True


if __name__ == "__main__":
    main()
