"""The `gen-agent` command line (typer + rich).

`gen-agent demo` runs the embedded default: supervised agents taking turns on the scripted
backend, with a summary table. (The demo on real clients lands with the demo issue.)
"""

from __future__ import annotations

import time
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

import gen_agent
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Run long-lived LLM agents as supervised actors.")
console = Console()


class DemoAgent(gen_agent.GenAgent):
    """Counts its turns; the demo's agent."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": opts["scripts"], "session_id": opts["session_id"]}, {"turns": 0}

    def handle_response(self, ref: Any, response: Any, state: Any) -> gen_agent.NoReply:
        return gen_agent.NoReply({"turns": state["turns"] + 1})


_PROMPTS = ("Summarise the release notes.", "List three risks.", "Draft the announcement.")


@app.command()
def demo(agents: int = typer.Option(3, min=1, max=50, help="How many agents to run.")) -> None:
    """Run agents on the embedded scripted backend and print every turn."""
    table = Table(title="gen_agent demo (scripted backend)")
    for column in ("agent", "turn", "text", "tokens", "ms"):
        table.add_column(column)
    with gen_agent.AgentSystem():
        refs = []
        for i in range(agents):
            scripts = [mock.text_turn(f"agent {i} answers: {p.lower()}",
                                      usage={"input_tokens": 12 + i, "output_tokens": 7})
                       for p in _PROMPTS]
            refs.append(gen_agent.start_agent(
                DemoAgent, name=f"agent-{i}", backend=MockBackend, scripts=scripts,
                session_id=f"demo-{i}"))
        for ref in refs:
            for turn, prompt in enumerate(_PROMPTS, 1):
                started = time.perf_counter()
                response = ref.ask(prompt, timeout=30)
                elapsed_ms = (time.perf_counter() - started) * 1000
                usage = response.usage or {}
                tokens = usage.get("input_tokens", 0) + usage.get("output_tokens", 0)
                table.add_row(str(ref.name), str(turn), response.text, str(tokens),
                              f"{elapsed_ms:.2f}")
    console.print(table)


@app.command()
def version() -> None:
    """Print the gen_agent version."""
    console.print(gen_agent.__version__)


def main() -> None:
    """Entry point of the `gen-agent` console script."""
    app()
