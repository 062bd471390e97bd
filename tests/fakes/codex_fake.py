"""A fake `codex` CLI for the backend's robustness tests: writes byte-exact `exec --json` lines.

Run through a wrapper made by the `FakeCodex` helper in tests/backends/test_codex.py.
Configured by the directory named in `FAKE_CODEX_DIR`:

- `scenarios`: one scenario name per line; invocation N (0-based) plays line N (the last line
  repeats when there are more invocations than lines);
- `calls.jsonl`: appended by every invocation: `{"argv", "pid", "pgid", "env", "cwd"}`;
- `helper.pid`: written by the `slow` scenario (the pid of a helper it started).

The line shapes are those of the real `codex exec --json` (0.171.0). Only the standard
library; never imports gen_agent.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

OUT = 1
ERR = 2
THREAD = "0199a000-0000-7000-8000-00000000fake"
USAGE = {
    "input_tokens": 20,
    "cached_input_tokens": 4,
    "cache_write_input_tokens": 0,
    "output_tokens": 6,
    "reasoning_output_tokens": 2,
}


def write(data: bytes, fd: int = OUT) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def line(obj: object) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode() + b"\n"


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


def pause() -> None:
    # Gives the reader a chance to consume what was written, so the next write lands in a
    # separate read (the exact split is also covered by LineBuffer's own tests).
    time.sleep(0.05)


def echo(argv: list[str]) -> None:
    warning = {"id": "item_0", "type": "error", "message": "Model metadata not found."}
    write(line({"type": "thread.started", "thread_id": thread_id(argv)}))
    write(line({"type": "item.completed", "item": warning}))
    write(line({"type": "turn.started"}))
    write(message(f"you said: {prompt_of(argv)}") + completed())


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
    while True:
        time.sleep(3600)


def linger_ignore_term(argv: list[str]) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    linger(argv)


def stderr_flood(argv: list[str]) -> None:
    size = int(os.environ.get("FAKE_CODEX_STDERR_BYTES", str(200 * 1024)))
    chunk = b"e" * 1023 + b"\n"
    written = 0
    while written < size:
        write(chunk, ERR)
        written += len(chunk)
    write(b"END-OF-STDERR\n", ERR)
    echo(argv)


def slow(argv: list[str]) -> None:
    helper = subprocess.Popen(["sleep", "1000"])  # same process group as us
    with open(os.path.join(os.environ["FAKE_CODEX_DIR"], "helper.pid"), "w") as f:
        f.write(str(helper.pid))
    write(started(thread_id(argv)))
    while True:
        time.sleep(3600)


SCENARIOS = {
    "echo": echo,
    "rich_turn": rich_turn,
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
    "linger_ignore_term": linger_ignore_term,
    "stderr_flood": stderr_flood,
    "slow": slow,
}


def main() -> None:
    argv = sys.argv[1:]
    directory = os.environ["FAKE_CODEX_DIR"]
    with open(os.path.join(directory, "scenarios")) as f:
        scenarios = [s.strip() for s in f if s.strip()]
    with open(os.path.join(directory, "calls.jsonl"), "a+") as f:
        f.seek(0)
        index = sum(1 for _ in f)
        call = {
            "argv": argv,
            "pid": os.getpid(),
            "pgid": os.getpgid(0),
            "env": {k: v for k, v in os.environ.items() if k.startswith(("CODEX", "FAKE"))},
            "cwd": os.getcwd(),
        }
        f.write(json.dumps(call) + "\n")
    SCENARIOS[scenarios[min(index, len(scenarios) - 1)]](argv)


if __name__ == "__main__":
    main()
