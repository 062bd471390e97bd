"""A fake `codex app-server` that replays a recorded session (`$FAKE_CODEX_REPLAY`, e.g.
tests/fixtures/codex-cli/app_server/two_turns.jsonl): it prints each recorded stdout line and,
at each recorded stdin line, reads one line and appends `{"expected", "got"}` (method and id)
and the `params` it got to `$FAKE_CODEX_DIR/replay.jsonl`. At the end of the recording it
waits for EOF. Only the standard library."""

from __future__ import annotations

import json
import os
import sys


def shape(message: dict) -> list[object]:
    return [message.get("method"), message.get("id")]


def main() -> None:
    directory = os.environ["FAKE_CODEX_DIR"]
    with open(os.environ["FAKE_CODEX_REPLAY"]) as recording:
        records = [json.loads(x) for x in recording if x.strip()]
    for record in records:
        if record["dir"] == "stdout":
            sys.stdout.write(json.dumps(record["line"]) + "\n")
            sys.stdout.flush()
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


if __name__ == "__main__":
    main()
