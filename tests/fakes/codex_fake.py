"""A fake `codex` CLI for the backend's robustness tests: writes byte-exact `exec --json` lines.

Run through a wrapper made by the `FakeCodex` helper in tests/backends/conftest.py.
Configured by the directory named in `FAKE_CODEX_DIR` (see `_fake_cli`); each call records
`{"argv", "pid", "pgid", "env", "cwd"}`, `env` being the variables named `CODEX*`/`FAKE*`/`TRACE*`.

The line shapes are those of the real `codex exec --json` (0.171.0). Only the standard
library; never imports gen_agent.
"""

from __future__ import annotations

import os
import sys

from _fake_cli import (
    ERR,
    flooding_stderr,
    hang,
    ignoring_term,
    line,
    pause,
    plain_then_exit,
    run,
    start_helper,
    write,
)

THREAD = "0199a000-0000-7000-8000-00000000fake"
USAGE = {
    "input_tokens": 20,
    "cached_input_tokens": 4,
    "cache_write_input_tokens": 0,
    "output_tokens": 6,
    "reasoning_output_tokens": 2,
}


def thread_id(argv: list[str]) -> str:
    if "resume" in argv:
        return argv[argv.index("resume") + 2]  # resume -- THREAD PROMPT
    return THREAD


def prompt_of(argv: list[str]) -> str:
    return argv[-1]


def started(tid: str) -> bytes:
    return line({"type": "thread.started", "thread_id": tid}) + line({"type": "turn.started"})


def message(text: str, item_id: str = "item_1") -> bytes:
    item = {"id": item_id, "type": "agent_message", "text": text}
    return line({"type": "item.completed", "item": item})


def completed(**usage: int) -> bytes:
    return line({"type": "turn.completed", "usage": {**USAGE, **usage}})


def failed(text: str) -> bytes:
    return line({"type": "turn.failed", "error": {"message": text}})


def notification(text: str) -> bytes:
    return line({"type": "error", "message": text})


def echo(argv: list[str]) -> None:
    warning = {"id": "item_0", "type": "error", "message": "Model metadata not found."}
    write(line({"type": "thread.started", "thread_id": thread_id(argv)}))
    write(line({"type": "item.completed", "item": warning}))
    write(line({"type": "turn.started"}))
    write(message(f"you said: {prompt_of(argv)}") + completed())


def schema_echo(argv: list[str]) -> None:
    """The reply is the content of the `--output-schema` file (or `{}` without one); the
    usage is the thread's running totals, as the real CLI reports them: 20/6 tokens per
    turn, the Nth invocation of this fake reporting 20*N/6*N (use it on one thread)."""
    text = "{}"
    if "--output-schema" in argv:
        with open(argv[argv.index("--output-schema") + 1]) as f:
            text = f.read()
    with open(os.path.join(os.environ["FAKE_CODEX_DIR"], "calls.jsonl")) as f:
        turns = sum(1 for _ in f)
    write(started(thread_id(argv)) + message(text)
          + completed(input_tokens=20 * turns, output_tokens=6 * turns))


def rich_turn(argv: list[str]) -> None:
    tid = thread_id(argv)
    command = {
        "id": "item_2",
        "type": "command_execution",
        "command": "/bin/bash -lc 'echo hi'",
        "aggregated_output": "hi\n",
        "exit_code": 0,
        "status": "completed",
    }
    reasoning = {"id": "item_1", "type": "reasoning", "text": "**Thinking**"}
    change = {
        "id": "item_4",
        "type": "file_change",
        "changes": [{"path": "a.txt", "kind": "add"}],
        "status": "completed",
    }
    write(started(tid))
    write(line({"type": "item.completed", "item": reasoning}))
    write(line({"type": "item.started", "item": {**command, "status": "in_progress"}}))
    write(line({"type": "item.completed", "item": command}))
    write(message("Ran it.", "item_3"))
    write(line({"type": "item.updated", "item": change}))
    write(line({"type": "item.completed", "item": change}))
    write(message("Second message.", "item_5") + completed())


def commands_then_hang(argv: list[str]) -> None:
    """A command that prints, one that fails (exit 1), a file change reported only once
    done, an MCP call, then a command still running: the CLI hangs in it until killed."""
    def command(item_id: str, cmd: str, output: str | None, code: int | None) -> dict:
        status = "in_progress" if code is None else "completed" if code == 0 else "failed"
        return {"id": item_id, "type": "command_execution", "command": cmd,
                "aggregated_output": output or "", "exit_code": code, "status": status}

    def run_item(done: dict) -> bytes:
        start = {**done, "status": "in_progress"}
        for key in ("aggregated_output", "exit_code", "result"):
            if key in done:
                start[key] = "" if key == "aggregated_output" else None
        return (line({"type": "item.started", "item": start})
                + line({"type": "item.completed", "item": done}))

    change = {"id": "item_3", "type": "file_change",
              "changes": [{"path": "a.txt", "kind": "add"}], "status": "completed"}
    mcp = {"id": "item_4", "type": "mcp_tool_call", "server": "docs", "tool": "search",
           "arguments": {"q": "refund"}, "result": {"content": [{"type": "text", "text":
           "found"}]}, "error": None, "status": "completed"}
    write(started(thread_id(argv)))
    write(run_item(command("item_1", "/bin/bash -lc 'echo tool-ran'", "tool-ran\n", 0)))
    write(run_item(command("item_2", "/bin/bash -lc 'false'", "boom\n", 1)))
    write(line({"type": "item.completed", "item": change}))
    write(run_item(mcp))
    running = command("item_5", "/bin/bash -lc 'sleep 30'", None, None)
    write(line({"type": "item.started", "item": running}))
    hang()


def split_line(argv: list[str]) -> None:
    data = started(thread_id(argv)) + message("split across reads") + completed()
    cut = len(started(thread_id(argv))) + 30
    write(data[:cut])
    pause()
    write(data[cut:])


def utf8_split(argv: list[str]) -> None:
    data = started(thread_id(argv)) + message("héllo ✓ 😀 done") + completed()
    cut = data.index("😀".encode()) + 2  # inside the 4-byte character
    write(data[:cut])
    pause()
    write(data[cut:])


def oversize(argv: list[str]) -> None:
    size = int(os.environ.get("FAKE_CODEX_SIZE", "5000"))
    write(started(thread_id(argv)))
    write(message("x" * size))
    write(completed())


def unknown_lines(argv: list[str]) -> None:
    write(started(thread_id(argv)))
    write(line({"type": "mystery.event", "payload": {"n": 1}}))
    write(b"this is not json at all\n")
    write(b"\n")
    write(line([1, 2, 3]))
    write(line({"type": "item.completed", "item": {"id": "i9", "type": "todo_list", "items": []}}))
    write(message("still fine") + completed())


def turn_failed(argv: list[str]) -> None:
    write(started(thread_id(argv)) + message("partial "))
    text = "stream disconnected before completion: boom"
    write(notification(text) + failed(text))


def failed_then_completed(argv: list[str]) -> None:
    write(started(thread_id(argv)) + failed("first outcome wins"))
    write(message("late") + completed())


def http_401(argv: list[str]) -> None:
    text = "unexpected status 401 Unauthorized: bad key, url: http://127.0.0.1:9/v1/responses"
    write(started(thread_id(argv)) + notification(text) + failed(text))
    sys.exit(1)


def rate_limited(argv: list[str]) -> None:
    text = "exceeded retry limit, last status: 429 Too Many Requests"
    write(started(thread_id(argv)) + notification(text) + line({"type": "turn.failed"}))
    sys.exit(1)


def retry_then_ok(argv: list[str]) -> None:
    write(started(thread_id(argv)))
    write(notification("Reconnecting... 1/5 (stream disconnected before completion)"))
    write(message("recovered") + completed())


def completed_then_more(argv: list[str]) -> None:
    write(started(thread_id(argv)) + message("first") + completed())
    write(message("late text") + failed("second outcome"))
    sys.exit(3)


def completed_then_nonzero(argv: list[str]) -> None:
    write(started(thread_id(argv)) + message("fine") + completed())
    write(b"crash after the outcome\n", ERR)
    sys.exit(1)


def eof_no_result(argv: list[str]) -> None:
    write(started(thread_id(argv)) + message("partial answer"))
    write(b"fatal: the model connection broke\n", ERR)
    sys.exit(2)


def eof_after_error(argv: list[str]) -> None:
    write(started(thread_id(argv)))
    write(notification("stream disconnected before completion: reset by peer"))
    sys.exit(1)


def linger(argv: list[str]) -> None:
    write(started(thread_id(argv)) + message("done but lingering") + completed())
    hang()


def slow(argv: list[str]) -> None:
    start_helper("FAKE_CODEX_DIR")
    write(started(thread_id(argv)))
    hang()


def slow_tool(argv: list[str]) -> None:
    start_helper("FAKE_CODEX_DIR", own_session=True)
    write(started(thread_id(argv)))
    hang()


def dead_resume(argv: list[str]) -> None:
    # What codex exec resume writes when the thread's rollout is gone (codex-cli 0.130).
    tid = thread_id(argv)
    message = f"Error: thread/resume: thread/resume failed: no rollout found for thread id {tid}"
    write((message + " (code -32600)\n").encode(), ERR)
    sys.exit(1)


def usage_limit(argv: list[str]) -> None:
    text = ("You've hit your usage limit. To get more access now, send a request to your admin"
            " or try again at 12:16 PM.")
    write(started(thread_id(argv)) + notification(text) + failed(text))
    sys.exit(1)


def quota_exceeded(argv: list[str]) -> None:
    text = "Quota exceeded. Check your plan and billing details."
    write(started(thread_id(argv)) + notification(text) + line({"type": "turn.failed"}))
    sys.exit(1)


def rate_limit_text(argv: list[str]) -> None:
    text = "Rate limit reached for gpt-5 in organization org-x on tokens. Try again in 20s."
    write(started(thread_id(argv)) + message("half ") + failed(text))


def failed_exit_zero(argv: list[str]) -> None:
    # The in-band outcome decides, whatever the exit status and stderr say.
    write(started(thread_id(argv)) + message("so far ") + failed("shared rollout token budget"))
    write(b"all good, exiting 0\n", ERR)


def older_items(argv: list[str]) -> None:
    # The transitional --experimental-json shapes: `item_type` instead of `type`,
    # `assistant_message`, item.started / item.updated, a to-do list, an unreadable item.
    tid = thread_id(argv)
    tool = {"id": "item_1", "item_type": "mcp_tool_call", "server": "github",
            "tool": "search_issues"}
    todo = {"id": "item_2", "item_type": "todo_list",
            "items": [{"text": "look", "completed": True}, {"text": "answer", "completed": False}]}
    write(started(tid))
    write(line({"type": "item.completed",
                "item": {"id": "item_0", "item_type": "reasoning", "text": "**Plan**"}}))
    write(line({"type": "item.started", "item": {**tool, "status": "in_progress"}}))
    write(line({"type": "item.completed", "item": {**tool, "status": "completed"}}))
    write(line({"type": "item.started", "item": todo}))
    write(line({"type": "item.updated", "item": todo}))
    write(line({"type": "item.completed", "item": {"id": "item_3", "payload": [1]}}))
    write(line({"type": "item.completed",
                "item": {"id": "item_4", "item_type": "assistant_message", "text": "Found 2."}}))
    write(completed())


def _cut(argv: list[str], at: bytes, offset: int) -> bytes:
    data = started(thread_id(argv)) + message("before the cut") + message("café cut", "item_2")
    cut = data.rindex(at) + offset
    return data[:cut]


def cut_mid_line(argv: list[str]) -> None:
    write(_cut(argv, b'"text"', 3))
    sys.exit(1)


def cut_mid_utf8(argv: list[str]) -> None:
    write(_cut(argv, "é".encode(), 1))
    sys.exit(1)


def killed_mid_stream(argv: list[str]) -> None:
    write(_cut(argv, b'"text"', 3))
    os.kill(os.getpid(), 9)


def hang_with_output(argv: list[str]) -> None:
    write(started(thread_id(argv)) + message("thinking..."))
    while True:
        write(notification("Reconnecting... 1/5"))
        pause()


def hang_silent(argv: list[str]) -> None:
    write(started(thread_id(argv)) + message("thinking..."))
    hang()


def malformed_lines(argv: list[str]) -> None:
    write(started(thread_id(argv)) + b'{"type": "item.completed", "item": \n' + b"\n"
          + b"\r\n" + b"\xff\xfe not utf-8\n" + message("still fine") + completed())


SCENARIOS = {
    "echo": echo,
    "plain_then_exit": plain_then_exit,
    "rich_turn": rich_turn,
    "commands_then_hang": commands_then_hang,
    "schema_echo": schema_echo,
    "split_line": split_line,
    "utf8_split": utf8_split,
    "oversize": oversize,
    "unknown_lines": unknown_lines,
    "turn_failed": turn_failed,
    "failed_then_completed": failed_then_completed,
    "http_401": http_401,
    "rate_limited": rate_limited,
    "retry_then_ok": retry_then_ok,
    "completed_then_more": completed_then_more,
    "completed_then_nonzero": completed_then_nonzero,
    "eof_no_result": eof_no_result,
    "eof_after_error": eof_after_error,
    "linger": linger,
    "linger_ignore_term": ignoring_term(linger),
    "stderr_flood": flooding_stderr(echo, "FAKE_CODEX_STDERR_BYTES"),
    "slow": slow,
    "slow_tool": slow_tool,
    "dead_resume": dead_resume,
    "usage_limit": usage_limit,
    "quota_exceeded": quota_exceeded,
    "rate_limit_text": rate_limit_text,
    "failed_exit_zero": failed_exit_zero,
    "older_items": older_items,
    "cut_mid_line": cut_mid_line,
    "cut_mid_utf8": cut_mid_utf8,
    "killed_mid_stream": killed_mid_stream,
    "hang_with_output": hang_with_output,
    "hang_silent": hang_silent,
    "malformed_lines": malformed_lines,
}


def main() -> None:
    run(SCENARIOS, "FAKE_CODEX_DIR", lambda: {"env": _codex_env()})


def _codex_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(("CODEX", "FAKE", "TRACE"))}


if __name__ == "__main__":
    main()
