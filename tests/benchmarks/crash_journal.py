"""13. Crash hunt of the tool journal: agents SIGKILLed at 200 log-driven moments over the five
phases of a tool-using turn (before the side-effecting tool, inside it, after the tools,
inside `handle_response`, during the reply), each hit 40 times, then restarted until every
turn is answered (`tests/store/_crash_journal.py` says how the trials run and what they
check). A figure is a count from the trials' own logs and the effects file; the targets are
the issue's: no side effect repeated, no turn lost or duplicated, every phase hit >= 30.

With `claude_trials` > 0 (default 8 in the full run, 0 at smoke size: `make test` keeps its one
trial in `tests/store/test_claude_journal.py`), as many kills of an agent on the real Claude
Code CLI mid-Bash follow (`tests/store/_claude_trials.py`): every call the file shows ran is
reported after the restart, finished or in doubt. `--param trials=0` runs only those."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from ._common import Figure

NAME = "crash_journal"
TITLE = "13. Crash hunt: the tool journal under SIGKILL"
ORDER = 130
REPS = 1
CHILD_TIMEOUT_S = 1800.0  # 200 API trials, then the real-claude ones (~25-40 s each, loaded)
FULL: dict[str, Any] = {"trials": 200, "keys": 10, "seed": 35, "claude_trials": 8}
SMOKE: dict[str, Any] = {"trials": 5, "keys": 1, "seed": 35, "claude_trials": 0}


def run_once(params: dict[str, Any]) -> dict[str, Any]:
    """Run the trials in a fresh directory; returns `run_trials`' counts (none with
    `trials=0`) and, under `"claude"`, `run_claude_trials`' (with `claude_trials` > 0).

    Raises:
        AssertionError: an invariant failed (the message names the order and phase).
    """
    tests = str(Path(__file__).resolve().parents[1])
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from store._claude_trials import run_claude_trials
    from store._crash_journal import run_trials

    counts: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="gen_agent-crash-") as tmp:
        if params["trials"]:
            counts = run_trials(Path(tmp), trials=params["trials"], keys=params["keys"],
                                seed=params["seed"])
    claude_trials = params.get("claude_trials", 0)
    if claude_trials:
        with tempfile.TemporaryDirectory(prefix="gen_agent-crash-claude-") as tmp:
            counts["claude"] = run_claude_trials(Path(tmp), trials=claude_trials,
                                                 seed=params["seed"])
    return counts


def summarize(reps: list[dict[str, Any]], params: dict[str, Any]) -> list[Figure]:
    """The counts of the (one) repetition."""
    rep = reps[0]
    figures = _api_figures(rep, params) if params["trials"] else []
    if "claude" in rep:
        figures += _claude_figures(rep["claude"])
    return figures


def _api_figures(rep: dict[str, Any], params: dict[str, Any]) -> list[Figure]:
    least = 30 if params["trials"] >= 150 else 1
    figures = [Figure(key=f"hits_{phase}", label=f"kills {phase.replace('_', ' ')}",
                      unit="kills", value=float(count), target=f">= {least}",
                      met=count >= least, note="counted from the child's / server's log line")
               for phase, count in sorted(rep["hits"].items())]
    for key, label in (("double_refunds", "side effects run twice"),
                       ("lost_turns", "turns lost"), ("duplicated_turns", "turns duplicated")):
        figures.append(Figure(key=key, label=label, unit="count", value=float(rep[key]),
                              target="== 0", met=rep[key] == 0))
    figures += [
        Figure(key="in_doubt_reported", label="in-doubt refunds reported", unit="count",
               value=float(rep["in_doubt_reported"]),
               note="kills before or inside the refund, each reported at the next start"),
        Figure(key="refund_lines", label="refunds executed", unit="count",
               value=float(rep["refund_lines"]),
               note="lines of the effects file (none for a kill before the effect)"),
        Figure(key="seconds", label="wall time", unit="s", value=float(rep["seconds"]),
               note=f"{rep['trials']} trials, forked from one pre-imported zygote"),
    ]
    return figures


def _claude_figures(rep: dict[str, Any]) -> list[Figure]:
    """The real-claude trials' counts: kills per moment, outcomes, violations."""
    if "skipped" in rep:
        return [Figure(key="claude_violations", label="claude: calls not reported",
                       unit="count", value=None, note=rep["skipped"])]
    figures = [Figure(key=f"claude_hits_{moment}", label=f"claude: kills at {moment}",
                      unit="kills", value=float(count), note=_outcomes(rep, moment))
               for moment, count in sorted(rep["hits"].items())]
    figures += [Figure(key=f"claude_{outcome}", label=f"claude: {outcome.replace('_', ' ')}",
                       unit="trials", value=float(count))
                for outcome, count in sorted(rep["outcomes"].items())]
    violations = rep["violations"]
    figures += [
        Figure(key="claude_violations", label="claude: calls not reported or misreported",
               unit="count", value=float(len(violations)), target="== 0",
               met=not violations, note="; ".join(violations)[:300]),
        Figure(key="claude_seconds", label="claude: wall time", unit="s",
               value=float(rep["seconds"]), note=f"{rep['trials']} trials on {rep['cli']}"),
    ]
    return figures


def _outcomes(rep: dict[str, Any], moment: str) -> str:
    counts = rep["by_moment"].get(moment, {})
    return ", ".join(f"{outcome} {count}" for outcome, count in sorted(counts.items()))
