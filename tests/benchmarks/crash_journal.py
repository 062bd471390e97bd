"""13. Crash hunt of the tool journal: agents SIGKILLed at 200 log-driven moments over the five
phases of a tool-using turn (before the side-effecting tool, inside it, after the tools,
inside `handle_response`, during the reply), each hit 40 times, then restarted until every
turn is answered (`tests/store/_crash_journal.py` says how the trials run and what they
check). A figure is a count from the trials' own logs and the effects file; the targets are
the issue's: no side effect repeated, no turn lost or duplicated, every phase hit >= 30."""

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
FULL: dict[str, Any] = {"trials": 200, "keys": 10, "seed": 35}
SMOKE: dict[str, Any] = {"trials": 5, "keys": 1, "seed": 35}


def run_once(params: dict[str, Any]) -> dict[str, Any]:
    """Run the trials in a fresh directory; returns `run_trials`' counts.

    Raises:
        AssertionError: an invariant failed (the message names the order and phase).
    """
    tests = str(Path(__file__).resolve().parents[1])
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from store._crash_journal import run_trials

    with tempfile.TemporaryDirectory(prefix="gen_agent-crash-") as tmp:
        return run_trials(Path(tmp), trials=params["trials"], keys=params["keys"],
                          seed=params["seed"])


def summarize(reps: list[dict[str, Any]], params: dict[str, Any]) -> list[Figure]:
    """The counts of the (one) repetition."""
    rep = reps[0]
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
