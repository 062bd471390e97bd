"""Crash trials of the tool journal on the real Claude Code CLI (issue 35, item 7): an agent on
`ClaudeCLI` in a child process (`_child.py`, a `SQLiteStore`) asks for one Bash call that
touches a file; the child and its CLI are SIGKILLed at one of four moments of that call; a new
child on the same key reports the interrupted turn. The CLI's own tools are journalled from
its events: reported, not guarded (docs/pages/durable-sessions.md).

The Bash command is `sleep 1 && touch FILE && sleep 1`, so the call has a before and an after
its effect. The moments, each driven by what the parent observes, not by a delay alone:

- `started`: the store's journal shows the call started (polled from this process);
- `touched`: the file exists (polled), the command still sleeping;
- `answered`: the CLI sent the tool result back (the model server's second request, held);
- `random`: a random delay in [0, 4) s after the model server sent the tool call.

After the restart, every trial is classified by what the file and the reported
`InterruptedTurn` say, and checked: a touched file is always reported (finished or in
doubt), a call reported finished touched the file and did not fail, every reported call
carries the command asked for, and the interrupted turn's prompt is reported once. A
violation is counted, never hidden (`violations`).

`run_claude_trials` is the bench's (`tests/benchmarks/crash_journal.py`, param
`claude_trials`); `make test` runs the single trial of `test_claude_journal.py` instead.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

MOMENTS = ("started", "touched", "answered", "random")
_ROOT = Path(__file__).resolve().parents[2]
_INSTALLED = _ROOT / ".venv" / "npm" / "node_modules" / ".bin" / "claude"
_POLL_S = 0.02  # how often the parent looks at the store and the file (s)


def claude_cli() -> str | None:
    """The real CLI to use (`GEN_AGENT_CLAUDE_CLI`, else the one `make test` installs), or
    None when it is not installed."""
    explicit = os.environ.get("GEN_AGENT_CLAUDE_CLI")
    if explicit:
        return explicit
    return str(_INSTALLED) if _INSTALLED.exists() else None


def _journal(db: Path) -> list[Any]:
    from gen_agent.store import SQLiteStore

    store = SQLiteStore(db)
    try:
        return store.journal("claude")
    finally:
        store.close()


def _until(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout} s")
        time.sleep(_POLL_S)  # bounded poll of another process's effects


def one_trial(cli: str, workdir: Path, moment: str, rng: random.Random) -> dict[str, Any]:
    """One kill at `moment` and the restart; the classified outcome (see the docstring)."""
    from gen_agent.testing._model_server import Reply, ScriptedModelServer

    from .test_claude_crash import _kill_with_cli, _options
    from .test_crash import Child

    touched = workdir / "work" / "touched.txt"
    command = {"command": f"sleep 1 && touch {touched} && sleep 1",
               "description": "touch a file"}
    db = workdir / "s.db"
    with ScriptedModelServer(handler_timeout=120.0) as server:
        server.enqueue(Reply.tool_use("Bash", command, id="toolu_bash"),
                       Reply.text("never seen", delay=120.0))
        opts = {**_options(cli, server, workdir), "allowed_tools": ["Bash"]}
        config = {"db": str(db), "key": "claude", "backend": "claude", "opts": opts}
        first = Child({**config, "prompts": ["Touch the file."]})
        try:
            assert first.line()["resumed"] is False
            server.wait_model_requests(1, timeout=120)  # the tool call is on its way
            if moment == "started":
                _until(lambda: _journal(db), 60, "no started entry")
            elif moment == "touched":
                _until(touched.exists, 60, "the file was not touched")
            elif moment == "answered":
                server.wait_model_requests(2, timeout=120)
            else:
                time.sleep(rng.uniform(0.0, 4.0))  # a random moment (the outcome is observed)
        finally:
            _kill_with_cli(first)
        existed = touched.exists()
        second = Child({**config, "prompts": []})
        lines = second.finish()
        requests = len(server.model_requests())
    infos = [line["info"] for line in lines if "info" in line]
    return {"moment": moment, "file": existed, "infos": infos, "requests": requests,
            "command": command}


def classify(trial: dict[str, Any]) -> tuple[str, list[str]]:
    """`(outcome, violations)` of one trial: outcome `finished`, `in_doubt_touched`,
    `in_doubt_untouched` or `not_reported_untouched` (else `not_reported_touched`, a
    violation)."""
    violations: list[str] = []
    infos = trial["infos"]
    if len(infos) != 1:
        violations.append(f"{len(infos)} interrupted turns reported")
    info = infos[0] if infos else {"prompt": None, "finished": [], "in_doubt": []}
    if infos and info["prompt"] != "Touch the file.":
        violations.append("the interrupted turn's prompt is not reported")
    finished, in_doubt = info["finished"], info["in_doubt"]
    for entry in [*finished, *in_doubt]:
        if (entry["tool"], entry["input"], entry["source"]) != ("Bash", trial["command"],
                                                                "event"):
            violations.append(f"a reported call is not the Bash call: {entry['tool']}")
    if len(finished) + len(in_doubt) > 1:
        violations.append("the call is reported more than once")
    if finished:
        outcome = "finished"
        if not trial["file"]:
            violations.append("reported finished, but the file was not touched")
        if finished[0]["is_error"]:
            violations.append("reported finished with an error")
    elif in_doubt:
        outcome = "in_doubt_touched" if trial["file"] else "in_doubt_untouched"
    elif trial["file"]:
        outcome = "not_reported_touched"
        violations.append("the file was touched, but the call is not reported")
    else:
        outcome = "not_reported_untouched"
    return outcome, violations


def run_claude_trials(workdir: Path, trials: int, seed: int = 0) -> dict[str, Any]:
    """Run `trials` real-claude kills, the moments in turn (`MOMENTS`); returns the counts:
    `hits` per moment, `outcomes` (`classify`), `by_moment` (moment -> outcome -> count),
    `violations` (texts, with the trial index), `seconds`, `cli` (its path)."""
    cli = claude_cli()
    if cli is None:
        return {"skipped": "the real Claude Code CLI is not installed"}
    rng = random.Random(seed)
    hits: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    by_moment: dict[str, Counter[str]] = {}
    violations: list[str] = []
    started = time.monotonic()
    for index in range(trials):
        moment = MOMENTS[index % len(MOMENTS)]
        trial_dir = workdir / f"claude-{index}"
        trial_dir.mkdir()
        trial = one_trial(cli, trial_dir, moment, rng)
        outcome, found = classify(trial)
        hits[moment] += 1
        outcomes[outcome] += 1
        by_moment.setdefault(moment, Counter())[outcome] += 1
        violations += [f"trial {index} ({moment}): {text}" for text in found]
    return {"trials": trials, "hits": dict(hits), "outcomes": dict(outcomes),
            "by_moment": {m: dict(c) for m, c in by_moment.items()},
            "violations": violations, "seconds": round(time.monotonic() - started, 1),
            "cli": cli}
