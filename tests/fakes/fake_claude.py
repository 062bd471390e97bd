"""A fake `claude` CLI for the backend's robustness tests: writes byte-exact stream-json.

Run through a wrapper made by the `fake_claude` fixture. Configured by the directory named in
`FAKE_CLAUDE_DIR`:

- `scenarios`: one scenario name per line; invocation N (0-based) plays line N (the last line
  repeats when there are more invocations than lines);
- `calls.jsonl`: appended by every invocation: `{"argv", "pid", "pgid", "env_keys", "cwd"}`;
- `helper.pid`: written by the `slow` scenario (the pid of a helper it started).

Only the standard library; never imports gen_agent.
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
SESSION = "fake-session-0001"


def write(data: bytes, fd: int = OUT) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def line(obj: dict) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode() + b"\n"


def session_id(argv: list[str]) -> str:
    if "--resume" in argv:
        return argv[argv.index("--resume") + 1]
    return SESSION


def prompt_of(argv: list[str]) -> str:
    return argv[argv.index("--") + 1] if "--" in argv else ""


def init(sid: str) -> bytes:
    return line(
        {
            "type": "system",
            "subtype": "init",
            "session_id": sid,
            "model": "fake-model",
            "cwd": os.getcwd(),
            "tools": ["Bash"],
            "claude_code_version": "0.0.0-fake",
        }
    )


def assistant(sid: str, text: str, msg_id: str = "msg_fake_1") -> bytes:
    message = {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": "fake-model",
        "content": [{"type": "text", "text": text}],
    }
    return line(
        {"type": "assistant", "message": message, "parent_tool_use_id": None, "session_id": sid}
    )


def result(sid: str, text: str, **fields: object) -> bytes:
    obj = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "duration_ms": 5,
        "duration_api_ms": 3,
        "num_turns": 1,
        "result": text,
        "stop_reason": "end_turn",
        "session_id": sid,
        "total_cost_usd": 0.25,
        "usage": {"input_tokens": 3, "output_tokens": 4},
        "terminal_reason": "completed",
    }
    obj.update(fields)
    return line(obj)


def pause() -> None:
    # Gives the reader a chance to consume what was written, so the next write lands in a
    # separate read (the exact split is also covered by LineBuffer's own tests).
    time.sleep(0.05)


def echo(argv: list[str]) -> None:
    sid = session_id(argv)
    text = f"you said: {prompt_of(argv)}"
    write(init(sid) + assistant(sid, text) + result(sid, text))


def split_line(argv: list[str]) -> None:
    sid = session_id(argv)
    data = init(sid) + assistant(sid, "split across reads") + result(sid, "split across reads")
    cut = len(init(sid)) + 40
    write(data[:cut])
    pause()
    write(data[cut:])


def utf8_split(argv: list[str]) -> None:
    sid = session_id(argv)
    text = "héllo ✓ 😀 done"
    data = init(sid) + assistant(sid, text) + result(sid, text)
    emoji = "😀".encode()
    cut = data.index(emoji) + 2  # inside the 4-byte character
    write(data[:cut])
    pause()
    write(data[cut:])


def oversize(argv: list[str]) -> None:
    sid = session_id(argv)
    size = int(os.environ.get("FAKE_CLAUDE_SIZE", "5000"))
    write(init(sid))
    big = assistant(sid, "x" * size)
    write(big)
    write(result(sid, "never read"))


def unknown_lines(argv: list[str]) -> None:
    sid = session_id(argv)
    write(init(sid))
    write(line({"type": "mystery", "payload": {"n": 1}}))
    write(b"this is not json at all\n")
    write(b"\n")
    write(line({"type": "system", "subtype": "hook_started", "hook": "x", "session_id": sid}))
    write(line([1, 2, 3]))
    write(assistant(sid, "still fine") + result(sid, "still fine"))


def is_error_success(argv: list[str]) -> None:
    sid = session_id(argv)
    write(init(sid) + assistant(sid, "Something went wrong"))
    write(result(sid, "Something went wrong", is_error=True, subtype="success"))


def api_error_401(argv: list[str]) -> None:
    sid = session_id(argv)
    write(init(sid))
    for attempt in (1, 2):
        write(
            line(
                {
                    "type": "system",
                    "subtype": "api_retry",
                    "attempt": attempt,
                    "max_retries": 2,
                    "retry_delay_ms": 5,
                    "error_status": 401,
                    "error": "authentication_failed",
                    "session_id": sid,
                }
            )
        )
    write(
        result(
            sid,
            "Invalid API key · Fix external API key",
            is_error=True,
            api_error_status=401,
            total_cost_usd=0,
            num_turns=1,
        )
    )


def api_retry_then_ok(argv: list[str]) -> None:
    sid = session_id(argv)
    write(init(sid))
    write(
        line(
            {
                "type": "system",
                "subtype": "api_retry",
                "attempt": 1,
                "max_retries": 10,
                "retry_delay_ms": 5,
                "error_status": 529,
                "error": "overloaded",
                "session_id": sid,
            }
        )
    )
    write(assistant(sid, "recovered") + result(sid, "recovered"))


def error_result(argv: list[str]) -> None:
    sid = session_id(argv)
    write(init(sid))
    write(result(sid, "", subtype="error_max_turns", is_error=False, errors=["reached max turns"]))


def error_line(argv: list[str]) -> None:
    sid = session_id(argv)
    write(init(sid))
    write(line({"type": "error", "error": "stream_truncated", "session_id": sid}))


def result_then_more(argv: list[str]) -> None:
    sid = session_id(argv)
    write(init(sid) + result(sid, "first result"))
    write(assistant(sid, "late text") + result(sid, "second result"))
    sys.exit(3)


def result_then_nonzero(argv: list[str]) -> None:
    sid = session_id(argv)
    write(init(sid) + result(sid, "fine"))
    write(b"crash after result\n", ERR)
    sys.exit(1)


def eof_no_result(argv: list[str]) -> None:
    sid = session_id(argv)
    write(init(sid) + assistant(sid, "partial answer"))
    write(b"fatal: the model connection broke\n", ERR)
    sys.exit(2)


def linger(argv: list[str]) -> None:
    sid = session_id(argv)
    write(init(sid) + result(sid, "done but lingering"))
    while True:
        time.sleep(3600)


def linger_ignore_term(argv: list[str]) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    linger(argv)


def stderr_flood(argv: list[str]) -> None:
    size = int(os.environ.get("FAKE_CLAUDE_STDERR_BYTES", str(200 * 1024)))
    chunk = b"e" * 1023 + b"\n"
    written = 0
    while written < size:
        write(chunk, ERR)
        written += len(chunk)
    write(b"END-OF-STDERR\n", ERR)
    echo(argv)


def slow(argv: list[str]) -> None:
    sid = session_id(argv)
    helper = subprocess.Popen(["sleep", "1000"])  # same process group as us
    with open(os.path.join(os.environ["FAKE_CLAUDE_DIR"], "helper.pid"), "w") as f:
        f.write(str(helper.pid))
    write(init(sid))
    while True:
        time.sleep(3600)


def tool_turn(argv: list[str]) -> None:
    sid = session_id(argv)
    call = {"type": "tool_use", "id": "toolu_fake", "name": "Bash", "input": {"command": "true"}}
    message = {
        "id": "msg_fake_2",
        "type": "message",
        "role": "assistant",
        "model": "fake-model",
        "content": [call],
    }
    tool_line = line(
        {"type": "assistant", "message": message, "parent_tool_use_id": None, "session_id": sid}
    )
    user = line(
        {
            "type": "user",
            "message": {
                "role": "user",
                "content": [
                    {
                        "tool_use_id": "toolu_fake",
                        "type": "tool_result",
                        "content": "",
                        "is_error": False,
                    }
                ],
            },
            "parent_tool_use_id": None,
            "session_id": sid,
        }
    )
    # The same tool_use and tool_result twice: the backend reports each id once.
    write(init(sid) + tool_line + tool_line + user + user + assistant(sid, "ran it", "msg_3"))
    write(result(sid, "ran it", num_turns=2))


SCENARIOS = {
    name: fn
    for name, fn in globals().items()
    if callable(fn)
    and not name.startswith("_")
    and name
    not in {"write", "line", "session_id", "prompt_of", "init", "assistant", "result", "pause"}
}


def main() -> None:
    argv = sys.argv[1:]
    directory = os.environ["FAKE_CLAUDE_DIR"]
    with open(os.path.join(directory, "scenarios")) as f:
        scenarios = [s.strip() for s in f if s.strip()]
    calls_path = os.path.join(directory, "calls.jsonl")
    with open(calls_path, "a+") as f:
        f.seek(0)
        index = sum(1 for _ in f)
        call = {
            "argv": argv,
            "pid": os.getpid(),
            "pgid": os.getpgid(0),
            "env_keys": sorted(os.environ),
            "cwd": os.getcwd(),
        }
        f.write(json.dumps(call) + "\n")
    SCENARIOS[scenarios[min(index, len(scenarios) - 1)]](argv)


if __name__ == "__main__":
    main()
