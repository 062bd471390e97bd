"""`gen-agent demo` end to end (fast mode): a supervised pool on a real client against the
scripted model on 127.0.0.1, with the summary table's figures asserted.

The figures are the script's: tokens per turn come from `gen_agent.cli._demo_script.TASKS`, the
overloaded task is retried once, the crashed worker is restarted once. Only latencies and
session ids vary between runs.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
from typer.testing import CliRunner

import gen_agent.cli._demo as demo_module
from gen_agent.cli._app import app
from gen_agent.cli._demo import DemoOptions, DemoReport, run_demo
from gen_agent.cli._demo_script import NOTES, TASKS, TOOL_ID, DemoModel, count_words
from gen_agent.testing._model_server import RecordedRequest

ROOT = Path(__file__).resolve().parents[2]
INSTALLED_CLAUDE = ROOT / ".venv" / "npm" / "node_modules" / ".bin" / "claude"
runner = CliRunner()

WORDS = count_words(NOTES)

# (task, label, worker, outcome, in tokens, out tokens, tools, retries, restarts)
ANTHROPIC_ROWS = [
    ("1", "summary", "demo-0", "ok", "412", "58", "-", "0", "0"),
    ("2", "word count", "demo-1", "ok", "380", "31", "word_count", "0", "0"),
    ("2.1", "↳ result", "demo-1", "ok", "452", "12", "-", "0", "0"),
    ("3", "risks", "demo-2", "ok", "395", "64", "-", "1", "0"),
    ("4", "one-liner", "demo-0", "ok", "498", "24", "-", "0", "0"),
    ("5", "recount", "demo-1", "crashed", "470", "11", "-", "0", "0"),
    ("6", "blog post", "demo-2", "ok", "430", "96", "-", "0", "0"),
    ("7", "codename", "demo-0", "ok", "510", "18", "-", "0", "0"),
    ("8", "recall", "demo-1", "ok", "60", "22", "-", "0", "1"),
]
# One letter per provider session: each worker keeps its conversation, demo-1 gets a new
# one (D) after its restart.
ANTHROPIC_SESSIONS = ["A", "B", "B", "C", "A", "B", "C", "A", "D"]


def row_figures(report: DemoReport) -> list[tuple[str, ...]]:
    return [
        (str(r.task) if r.step == 0 else f"{r.task}.{r.step}", r.label, r.worker, r.outcome,
         str(r.input_tokens), str(r.output_tokens), ", ".join(r.tools) or "-", str(r.retries),
         str(r.restarts))
        for r in report.rows
    ]


def sessions(report: DemoReport, worker: str, restarts: int) -> set[str | None]:
    return {r.session_id for r in report.rows if r.worker == worker and r.restarts == restarts}


def test_demo_on_the_anthropic_sdk_gives_the_scripted_figures():
    report = run_demo(DemoOptions(fast=True))

    assert report.problems() == []
    assert row_figures(report) == ANTHROPIC_ROWS
    assert report.outcomes == {
        **{t.number: "ok" for t in TASKS if not t.crash},
        5: "worker down: callback failed: error: DemoCrash",
    }
    assert report.restarts == {"demo-0": 0, "demo-1": 1, "demo-2": 0}
    assert all(row.latency_ms >= 0 for row in report.rows)
    # Each worker keeps one conversation; the restarted one got a new session, since
    # AnthropicAPI has no resume_session.
    assert (report.resume_supported, report.resumed) == (False, False)
    for worker in ("demo-0", "demo-1", "demo-2"):
        (session,) = sessions(report, worker, 0)
        assert session is not None and session.startswith("anthropic-")
    assert sessions(report, "demo-1", 1).isdisjoint(sessions(report, "demo-1", 0))
    texts = {(r.task, r.step): r.text for r in report.rows}
    assert texts[(2, 1)] == f"notes.md has {WORDS} words."  # the tool really counted
    assert texts[(4, 0)].startswith("Orbit 2.0: an event-driven scheduler")  # remembered task 1
    assert texts[(5, 0)] == f"Checked again: still {WORDS} words."
    assert texts[(8, 0)].startswith("I have no earlier answer in this conversation")
    assert (report.words, report.unmatched_requests) == (WORDS, 0)


def table_rows(output: str) -> list[list[str]]:
    """The body rows of the summary table, split into cells (columns are 2+ spaces apart)."""
    return [re.split(r"\s{2,}", line.strip()) for line in output.splitlines()
            if re.match(r"^\s*\d+(\.\d+)? \S", line)]


def test_demo_command_prints_the_summary_table():
    # 80 columns: the table must fit a default terminal.
    result = runner.invoke(app, ["demo", "--fast"], env={"COLUMNS": "80"})

    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "every turn (anthropic backend)" in out
    assert max(len(line) for line in out.splitlines()) <= 80
    rows = table_rows(out)
    # Columns: task, worker, outcome, ms, tokens in/out, tools, retries, restarts, session.
    assert [(r[0], *r[1:3], r[4], *r[5:]) for r in rows] == [
        (f"{n} {label}", worker, outcome, f"{i}/{o}", tools, retries, restarts, session)
        for (n, label, worker, outcome, i, o, tools, retries, restarts), session
        in zip(ANTHROPIC_ROWS, ANTHROPIC_SESSIONS, strict=True)]
    assert all(r[3].isdigit() for r in rows)
    total = next(line for line in out.splitlines() if line.strip().startswith("total"))
    assert re.split(r"\s{2,}", total.strip()) == ["total", "3607/336", "1", "1"]
    flat = " ".join(out.split())
    assert "task 3 got HTTP 529 Overloaded; the agent's handle_error retried it 1x" in flat
    assert "its supervisor restarted it 1x" in flat
    assert "Session: new. AnthropicAPI has no resume_session" in flat
    assert f"notes.md has {WORDS} words" in flat


def test_demo_json_lines():
    result = runner.invoke(app, ["demo", "--fast", "--json"])

    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    *turns, last = records
    assert [(t["task"], t["step"], t["input_tokens"], t["output_tokens"], t["retries"],
             t["restarts"]) for t in turns] == [
        (int(r[0].split(".")[0]), int("." in r[0]), int(r[4]), int(r[5]), int(r[7]), int(r[8]))
        for r in ANTHROPIC_ROWS]
    summary = last["summary"]
    assert summary["restarts"] == {"demo-0": 0, "demo-1": 1, "demo-2": 0}
    assert summary["problems"] == []
    assert summary["outcomes"]["3"] == "ok"


def test_demo_exits_1_when_it_does_not_go_as_scripted(monkeypatch: pytest.MonkeyPatch):
    real = run_demo

    def broken(options: DemoOptions, on_progress: Any = None) -> DemoReport:
        report = real(options, on_progress)
        return msgspec.structs.replace(report, restarts={**report.restarts, "demo-1": 0})

    monkeypatch.setattr(demo_module, "run_demo", broken)
    result = runner.invoke(app, ["demo", "--fast"], env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert "error: the demo did not go as scripted: restarts" in result.stderr


def test_demo_refuses_another_backend():
    result = runner.invoke(app, ["demo", "--backend", "codex"])
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: the demo runs on anthropic or claude, not 'codex'"


def test_demo_on_claude_without_the_cli_names_what_to_install(tmp_path: Path):
    result = runner.invoke(app, ["demo", "--backend", "claude", "--cli-path",
                                 str(tmp_path / "claude")], env={"COLUMNS": "300"})
    assert result.exit_code == 2
    assert "npm install -g @anthropic-ai/claude-code" in result.stderr
    assert "Traceback" not in result.output


# -- the scripted model -------------------------------------------------------------------


def request(*messages: dict[str, Any]) -> RecordedRequest:
    body = {"model": "m", "messages": list(messages), "stream": True}
    return RecordedRequest(method="POST", path="/v1/messages", query={}, headers={}, body=body,
                           raw_body=json.dumps(body).encode(), received_ms=0)


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def test_the_model_answers_by_prompt_not_by_arrival_order():
    model = DemoModel(tool="word_count", fast=True)
    task = {t.number: t for t in TASKS}
    overloaded = model(request(user(task[3].prompt)))
    summary = model(request(user([{"type": "text", "text": "<reminder/>"},
                                  {"type": "text", "text": task[1].prompt}])))
    retried = model(request(user(task[3].prompt)))

    assert (overloaded.kind, overloaded.status) == ("http_error", 529)
    assert (summary.input_tokens, summary.output_tokens) == (412, 58)
    assert len(summary.blocks) == 2  # a two-part answer
    assert (retried.kind, retried.input_tokens) == ("message", 395)
    assert model.unmatched == 0
    model(request(user("something else")))
    assert model.unmatched == 1


def test_the_model_reads_a_claude_tool_result():
    model = DemoModel(tool="Bash", fast=True)
    call = model(request(user(TASKS[1].prompt)))
    assert call.blocks[-1].name == "Bash"
    assert call.blocks[-1].input["command"] == "wc -w < notes.md"
    answer = model(request(user(TASKS[1].prompt), {"role": "assistant", "content": []},
                           user([{"type": "tool_result", "tool_use_id": TOOL_ID,
                                  "content": "58\n"}])))
    assert answer.blocks[0].text == "notes.md has 58 words."


# -- the real Claude Code CLI ---------------------------------------------------------------


def claude_cli() -> str | None:
    explicit = os.environ.get("GEN_AGENT_CLAUDE_CLI")
    if explicit:
        return explicit
    return str(INSTALLED_CLAUDE) if INSTALLED_CLAUDE.exists() else None


@pytest.mark.real_cli
def test_demo_on_the_real_claude_cli_resumes_the_crashed_worker():
    cli = claude_cli()
    if cli is None:
        pytest.skip("the real Claude Code CLI is not installed (install node and npm, then run "
                    "`make test` or `make demo DEMO_BACKEND=claude`)")
    report = run_demo(DemoOptions(backend="claude", fast=True, cli_path=cli))

    assert report.problems() == []
    figures = row_figures(report)
    # The CLI runs the tool inside the turn: one row, usage of both requests summed.
    assert figures[1] == ("2", "word count", "demo-1", "ok", "832", "43", "Bash", "0", "0")
    assert figures[2] == ("3", "risks", "demo-2", "ok", "395", "64", "-", "1", "0")
    assert figures[-1] == ("8", "recall", "demo-1", "ok", "505", "19", "-", "0", "1")
    assert (report.resume_supported, report.resumed) == (True, True)
    assert sessions(report, "demo-1", 1) == sessions(report, "demo-1", 0)
    texts = {r.task: r.text for r in report.rows}
    assert texts[2] == f"notes.md has {WORDS} words."  # Bash really ran wc on the file
    assert texts[8].startswith(f"Before the restart I reported {WORDS} words")
