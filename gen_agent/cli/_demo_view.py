"""How `gen-agent demo` looks: the live view while it runs and the summary at the end (rich).

Pure rendering: every function takes the demo's records (`DemoProgress`, `DemoReport`) and
returns rich renderables or plain lines; nothing here talks to agents.
"""

from __future__ import annotations

from typing import Any

import msgspec
from rich import box
from rich.console import Group
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from gen_agent.cli._demo import MAX_RETRIES, DemoProgress, DemoReport, TurnRow
from gen_agent.cli._demo_script import TASKS

__all__ = ["live_view", "report_json", "summary_notes", "summary_table"]

_CLIENTS = {
    "anthropic": "the official Anthropic SDK (AnthropicAPI)",
    "claude": "the Claude Code CLI (ClaudeCLI)",
}


def live_view(progress: DemoProgress) -> Group:
    """The live view: a progress bar of tasks, then one line per worker."""
    bar = Table.grid(padding=(0, 1))
    bar.add_row(Text("tasks", style="bold"),
                ProgressBar(total=progress.total, completed=progress.done, width=40),
                Text(f"{progress.done}/{progress.total}"))
    workers = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
    # The names and counts keep their width; "now" (the latest text) is the one that shrinks
    # on a narrow terminal (80 columns cut the worker names to "dem…" when it was fixed).
    workers.add_column("worker", no_wrap=True, min_width=6)
    workers.add_column("restarts", justify="right", no_wrap=True, min_width=8)
    workers.add_column("doing", no_wrap=True, min_width=10)
    workers.add_column("now", overflow="ellipsis", no_wrap=True, max_width=56)
    for worker in progress.workers:
        style = "bold red" if worker.label in ("crashed", "restarted") else ""
        workers.add_row(worker.name, str(worker.restarts), Text(worker.label, style=style),
                        worker.activity)
    return Group(bar, workers)


def _session_letters(rows: tuple[TurnRow, ...]) -> dict[str | None, str]:
    """A letter per distinct session id, in order of first appearance (ids are long)."""
    letters: dict[str | None, str] = {None: "-"}
    for row in rows:
        if row.session_id not in letters:
            letters[row.session_id] = chr(ord("A") + len(letters) - 1)
    return letters


def _outcome(row: TurnRow) -> Text:
    if row.outcome == "ok":
        return Text("ok", style="green")
    if row.outcome == "crashed":
        return Text("crashed", style="bold red")
    return Text(row.outcome, style="red")


def summary_table(report: DemoReport) -> Table:
    """The table of every turn: task, worker, outcome, latency (ms, from the first dispatch
    to the outcome, retries included), tokens in/out, tools,
    retries, restarts, session (a letter per provider session). Fits 80 columns."""
    rows = report.rows
    table = Table(title=f"every turn ({report.backend} backend)", box=box.SIMPLE_HEAD,
                  show_footer=True, header_style="bold", footer_style="bold", pad_edge=False,
                  collapse_padding=True)
    tokens_in, tokens_out = sum(r.input_tokens for r in rows), sum(r.output_tokens for r in rows)
    table.add_column("task", footer="total", no_wrap=True)
    table.add_column("worker", no_wrap=True)
    table.add_column("outcome", no_wrap=True)
    table.add_column("ms", justify="right")
    table.add_column("tokens\nin/out", justify="right", footer=f"{tokens_in}/{tokens_out}",
                     no_wrap=True)
    table.add_column("tools", no_wrap=True)
    table.add_column("re-\ntries", justify="right", footer=str(sum(r.retries for r in rows)))
    table.add_column("re-\nstarts", justify="right",
                     footer=str(sum(report.restarts.values())))
    table.add_column("ses-\nsion", justify="center")
    letters = _session_letters(rows)
    for row in rows:
        number = str(row.task) if row.step == 0 else f"{row.task}.{row.step}"
        table.add_row(f"{number} {row.label}", row.worker, _outcome(row), str(row.latency_ms),
                      f"{row.input_tokens}/{row.output_tokens}", ", ".join(row.tools) or "-",
                      str(row.retries), str(row.restarts), letters[row.session_id])
    return table


def summary_notes(report: DemoReport) -> list[str]:
    """What the table shows, in sentences (rich markup)."""
    crash = next(t for t in TASKS if t.crash)
    worker = f"demo-{crash.worker}"
    overloaded = next(t for t in TASKS if t.overloaded)
    retried = [r for r in report.rows if r.task == overloaded.number and r.step == 0]
    retries = retried[0].retries if retried else 0
    notes = [
        f"Client: {_CLIENTS.get(report.backend, report.backend)}, against ScriptedModelServer "
        f"on 127.0.0.1; {len(report.rows)} turns in {report.elapsed_ms} ms.",
        f"Retry: task {overloaded.number} got HTTP 529 Overloaded; the agent's handle_error "
        f"retried it {retries}x (caller-owned retry, at most {MAX_RETRIES}); the pool's caller "
        "saw only the answer.",
        f"Crash: {worker} raised in handle_response after task {crash.number} on purpose; "
        f"its supervisor restarted it {report.restarts.get(worker, 0)}x "
        f"(task {crash.number} was reported as failed: {report.outcomes.get(crash.number)}).",
    ]
    sessions = len({r.session_id for r in report.rows if r.session_id is not None})
    if report.resume_supported:
        resumed = "resumed" if report.resumed else "NOT resumed"
        notes.append(f"Session: {resumed}. The restarted {worker} continued the same Claude "
                     "Code session (resume_session), so it recalled its earlier answer "
                     f"({sessions} sessions in all, one letter each).")
    else:
        notes.append(f"Session: new. AnthropicAPI has no resume_session, so the restarted "
                     f"{worker} started a new conversation (session {chr(ord('A') + sessions - 1)}"
                     ") and could not recall its earlier answer; --backend claude resumes.")
    tool = "Bash ran `wc -w < notes.md`" if report.backend == "claude" else (
        "the agent ran the word_count tool")
    notes.append(f"Tool: {tool} on a real file: notes.md has {report.words} words.")
    return notes


def report_json(report: DemoReport) -> list[dict[str, Any]]:
    """The report as JSON objects: one per turn, then `{"summary": ...}`."""
    lines: list[dict[str, Any]] = [msgspec.to_builtins(row) for row in report.rows]
    summary = msgspec.to_builtins(report)
    del summary["rows"]
    summary["outcomes"] = {str(k): v for k, v in report.outcomes.items()}
    summary["problems"] = report.problems()
    lines.append({"summary": summary})
    return lines
