"""A fake `codex app-server`, in one of two modes. Only the standard library.

Replay (`$FAKE_CODEX_REPLAY`, a recorded session such as
tests/fixtures/codex-cli/app_server/two_turns.jsonl): prints each recorded stdout line and, at
each recorded stdin line, reads one line and appends `{"expected", "got"}` (method and id)
and the `params` it got to `$FAKE_CODEX_DIR/replay.jsonl`. A recording of several processes
numbers its records (`process`): invocation N replays process N (`start` records are
skipped, a stdin record marked `undelivered` too, an `exit` record ends the process with its
code). At the end of its records a process waits for EOF.

Scripted (`$FAKE_CODEX_SCENARIO`), for faults the real server cannot be made to show here;
the shapes are those of the recordings and of the app-server protocol:

- `overloaded`: `initialize` and `thread/start` answer as recorded; the first `turn/start`
  is refused with the backpressure error of codex-rs/app-server (`error_code.rs`:
  `OVERLOADED_ERROR_CODE = -32001`; README "Backpressure behavior": message "Server
  overloaded; retry later."), with `data.retryAfterMs` when `$FAKE_CODEX_RETRY_MS` is set;
  later turns answer "ok".
- `other_turn`: each turn's notifications are interleaved with those of another turn of the
  thread (turn id `other-turn`), which completes first with the text "not yours".
- `surrogate`: the turn's answer holds an escaped lone surrogate (`"\\ud800"`).

Scripted mode answers `thread/start` with the `thread/started` notification the real server
sends after it (with `$FAKE_CODEX_LATE_NOTICE` set: 0.2 s later, then it creates
`$FAKE_CODEX_DIR/notice.PID`), and appends every request it reads (`pid`, `method`, `params`) to
`$FAKE_CODEX_DIR/requests.jsonl`.

Every invocation appends `{"pid", "alive_at_start"}` (the pids of earlier invocations still
running then: /proc) to `$FAKE_CODEX_DIR/calls.jsonl`.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

THREAD = "01a230b0-eb20-7c52-92d3-a93103f7102f"


def shape(message: dict) -> list[object]:
    return [message.get("method"), message.get("id")]


def out(message: dict) -> None:
    with LOCK:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def replay(path: str, directory: str, invocation: int) -> None:
    with open(path) as recording:
        records = [json.loads(x) for x in recording if x.strip()]
    for record in records:
        if record.get("process", 0) != invocation:
            continue
        if record["dir"] == "stdout":
            out(record["line"])
            continue
        if record["dir"] == "exit":
            sys.stderr.write(record.get("stderr", ""))
            sys.stderr.flush()
            if record["code"] < 0:
                os.kill(os.getpid(), -record["code"])
            sys.exit(record["code"])
        if record["dir"] != "stdin" or record.get("undelivered"):
            continue
        raw = sys.stdin.readline()
        if not raw:
            return
        with open(os.path.join(directory, "replay.jsonl"), "a") as log:
            got = json.loads(raw)
            log.write(json.dumps({"expected": shape(record["line"]), "got": shape(got),
                                  "params": got.get("params")}) + "\n")
    while sys.stdin.readline():
        pass


def turn_lines(turn_id: str, text: str) -> list[dict]:
    params = {"threadId": THREAD, "turnId": turn_id}
    item = {"type": "agentMessage", "id": f"msg_{turn_id}", "text": text}
    return [
        {"method": "turn/started", "params": {"threadId": THREAD, "turn": {
            "id": turn_id, "status": "inProgress", "items": []}}},
        {"method": "item/completed", "params": {**params, "item": item}},
        {"method": "thread/tokenUsage/updated", "params": {**params, "tokenUsage": {
            "total": {"inputTokens": 20, "outputTokens": 6},
            "last": {"inputTokens": 20, "outputTokens": 6}}}},
        {"method": "turn/completed", "params": {"threadId": THREAD, "turn": {
            "id": turn_id, "status": "completed", "items": [item], "error": None}}},
    ]


STARTED = {"method": "thread/started", "params": {"thread": {"id": THREAD}}}
LOCK = threading.Lock()


def late_notice(directory: str) -> None:
    time.sleep(0.2)  # after the client read the answer: the client is idle by then
    out(STARTED)
    with open(os.path.join(directory, f"notice.{os.getpid()}"), "w"):
        pass


def scripted(scenario: str, directory: str) -> None:
    turns = 0
    for raw in sys.stdin:
        message = json.loads(raw)
        method, request_id = message.get("method"), message.get("id")
        if request_id is None:
            continue  # a notification (`initialized`) or an answer of ours
        with open(os.path.join(directory, "requests.jsonl"), "a") as log:
            log.write(json.dumps({"pid": os.getpid(), "method": method,
                                  "params": message.get("params")}) + "\n")
        if method == "initialize":
            out({"id": request_id, "result": {"userAgent": "fake/0.171.0"}})
        elif method in ("thread/start", "thread/resume"):
            out({"id": request_id, "result": {"thread": {"id": THREAD}}})
            if method == "thread/start" and os.environ.get("FAKE_CODEX_LATE_NOTICE"):
                threading.Thread(target=late_notice, args=(directory,), daemon=True).start()
            elif method == "thread/start":
                out(STARTED)
        elif method == "turn/interrupt":
            out({"id": request_id, "result": {}})
        elif method == "turn/start":
            turns += 1
            if scenario == "overloaded" and turns == 1:
                error: dict[str, object] = {"code": -32001,
                                            "message": "Server overloaded; retry later."}
                if os.environ.get("FAKE_CODEX_RETRY_MS"):
                    error["data"] = {"retryAfterMs": int(os.environ["FAKE_CODEX_RETRY_MS"])}
                out({"id": request_id, "error": error})
                continue
            turn_id = f"turn-{turns}"
            out({"id": request_id, "result": {"turn": {"id": turn_id, "status": "inProgress",
                                                       "items": []}}})
            ours = turn_lines(turn_id, "half \ud800 pair" if scenario == "surrogate" else "ok")
            if scenario == "other_turn":
                other = turn_lines("other-turn", "not yours")
                lines = [ours[0], other[0], other[1], ours[1], other[2], other[3], *ours[2:]]
            else:
                lines = ours
            for line in lines:
                out(line)
        else:
            out({"id": request_id, "error": {"code": -32601, "message": f"no {method}"}})


def alive(pid: int) -> bool:
    """Whether `pid` runs (not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def main() -> None:
    directory = os.environ["FAKE_CODEX_DIR"]
    with open(os.path.join(directory, "calls.jsonl"), "a+") as calls:
        calls.seek(0)
        earlier = [json.loads(x)["pid"] for x in calls if x.strip()]
        invocation = len(earlier)
        calls.write(json.dumps({"pid": os.getpid(),
                                "alive_at_start": [p for p in earlier if alive(p)]}) + "\n")
    recording = os.environ.get("FAKE_CODEX_REPLAY")
    if recording:
        replay(recording, directory, invocation)
    else:
        scripted(os.environ.get("FAKE_CODEX_SCENARIO", ""), directory)


if __name__ == "__main__":
    main()
