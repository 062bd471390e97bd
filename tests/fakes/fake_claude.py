"""A fake `claude` CLI for the backend's robustness tests: writes byte-exact stream-json.

Run through a wrapper made by the `fake_claude` fixture. Configured by the directory named in
`FAKE_CLAUDE_DIR` (see `_fake_cli`); each call records
`{"argv", "pid", "pgid", "env_keys", "cwd"}`.

Only the standard library; never imports gen_agent.
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

SESSION = "fake-session-0001"


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
    hang()


def slow(argv: list[str]) -> None:
    sid = session_id(argv)
    start_helper("FAKE_CLAUDE_DIR")
    write(init(sid))
    hang()


def slow_tool(argv: list[str]) -> None:
    sid = session_id(argv)
    start_helper("FAKE_CLAUDE_DIR", own_session=True)
    write(init(sid))
    hang()


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


def dead_resume(argv: list[str]) -> None:
    # What the real CLI does when --resume names a session it has no transcript of.
    write(f"No conversation found with session ID: {session_id(argv)}\n".encode(), ERR)
    sys.exit(1)


def usage_split(argv: list[str]) -> None:
    # One API message written as two lines repeating its usage (the output count growing),
    # then a second message; the result line carries no usage.
    sid = session_id(argv)

    def part(msg_id: str, content: list[object], usage: dict[str, int]) -> bytes:
        message = {"id": msg_id, "type": "message", "role": "assistant", "model": "fake-model",
                   "content": content, "usage": usage}
        return line({"type": "assistant", "message": message, "parent_tool_use_id": None,
                     "session_id": sid})

    first = {"input_tokens": 10, "cache_read_input_tokens": 100}
    write(init(sid))
    write(part("msg_a", [{"type": "thinking", "thinking": "hm"}], {**first, "output_tokens": 1}))
    write(part("msg_a", [{"type": "text", "text": "Two "}], {**first, "output_tokens": 7}))
    write(part("msg_b", [{"type": "text", "text": "parts."}],
               {"input_tokens": 3, "output_tokens": 2, "cache_read_input_tokens": 0}))
    obj = {"type": "result", "subtype": "success", "is_error": False, "result": "Two parts.",
           "session_id": sid, "num_turns": 1}
    write(line(obj))


def linger_until_released(argv: list[str]) -> None:
    # Answers, then stays alive (as the real CLI may, saving its session) until the test
    # creates the `release` file.
    sid = session_id(argv)
    write(init(sid) + assistant(sid, "answered early") + result(sid, "answered early"))
    marker = os.path.join(os.environ["FAKE_CLAUDE_DIR"], "release")
    while not os.path.exists(marker):
        pause()


def _cut(argv: list[str], at: bytes, offset: int) -> bytes:
    sid = session_id(argv)
    data = init(sid) + assistant(sid, "before the cut") + assistant(sid, "café cut", "msg_2")
    cut = data.rindex(at) + offset
    return data[:cut]


def cut_mid_line(argv: list[str]) -> None:
    # The process dies in the middle of a line: the rest never comes.
    write(_cut(argv, b'"content"', 3))
    sys.exit(1)


def cut_mid_utf8(argv: list[str]) -> None:
    write(_cut(argv, "é".encode(), 1))  # inside the two bytes of the é
    sys.exit(1)


def killed_mid_stream(argv: list[str]) -> None:
    write(_cut(argv, b'"content"', 3))
    os.kill(os.getpid(), 9)


def hang_with_output(argv: list[str]) -> None:
    # Keeps writing (as the CLI's retry and hook notices do) but never answers.
    sid = session_id(argv)
    write(init(sid) + assistant(sid, "thinking..."))
    while True:
        write(line({"type": "system", "subtype": "status", "status": "waiting",
                    "session_id": sid}))
        pause()


def hang_silent(argv: list[str]) -> None:
    sid = session_id(argv)
    write(init(sid) + assistant(sid, "thinking..."))
    hang()


def malformed_lines(argv: list[str]) -> None:
    sid = session_id(argv)
    write(init(sid) + b'{"type": "assistant", "message": {"id": \n' + b"\n" + b"\r\n"
          + b"\xff\xfe not utf-8\n" + assistant(sid, "still fine") + result(sid, "still fine"))


def recorded(argv: list[str]) -> None:
    # Replays a recorded per-turn session (`$FAKE_CLAUDE_RECORDING`, from
    # tests/fixtures/recorder/record.py): this invocation's stdout lines, stderr and exit.
    import json

    directory = os.environ["FAKE_CLAUDE_DIR"]
    with open(os.path.join(directory, "calls.jsonl")) as calls:
        invocation = sum(1 for _ in calls) - 1
    with open(os.environ["FAKE_CLAUDE_RECORDING"]) as recording:
        records = [json.loads(x) for x in recording if x.strip()]
    for record in records:
        if record.get("process") != invocation:
            continue
        if record["dir"] == "stdout":
            write(line(record["line"]))
        elif record["dir"] == "exit":
            write(record["stderr"].encode(), ERR)
            sys.exit(record["code"])


SCENARIOS = {
    "echo": echo,
    "split_line": split_line,
    "utf8_split": utf8_split,
    "oversize": oversize,
    "unknown_lines": unknown_lines,
    "is_error_success": is_error_success,
    "api_error_401": api_error_401,
    "api_retry_then_ok": api_retry_then_ok,
    "error_result": error_result,
    "error_line": error_line,
    "result_then_more": result_then_more,
    "result_then_nonzero": result_then_nonzero,
    "eof_no_result": eof_no_result,
    "linger": linger,
    "linger_ignore_term": ignoring_term(linger),
    "stderr_flood": flooding_stderr(echo, "FAKE_CLAUDE_STDERR_BYTES"),
    "slow": slow,
    "slow_tool": slow_tool,
    "tool_turn": tool_turn,
    "dead_resume": dead_resume,
    "usage_split": usage_split,
    "linger_until_released": linger_until_released,
    "cut_mid_line": cut_mid_line,
    "cut_mid_utf8": cut_mid_utf8,
    "killed_mid_stream": killed_mid_stream,
    "hang_with_output": hang_with_output,
    "hang_silent": hang_silent,
    "malformed_lines": malformed_lines,
    "plain_then_exit": plain_then_exit,
    "recorded": recorded,
}


def main() -> None:
    run(SCENARIOS, "FAKE_CLAUDE_DIR", lambda: {"env_keys": sorted(os.environ)})


if __name__ == "__main__":
    main()
