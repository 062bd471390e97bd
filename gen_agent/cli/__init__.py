"""The `gen-agent` command line and its demo.

- `gen_agent.cli._app`: the typer app (`run`, `chat`, `pool`, `demo`, `version`) and `main`, the
  console-script entry point (`gen-agent`, `python -m gen_agent`).
- `gen_agent.cli._support`: backend resolution, argument checks and rendering helpers, kept apart
  from the typer app so they are testable without a terminal.
- `gen_agent.cli._demo`, `demo_script`, `demo_view`: the embedded demo (`make demo`).
"""

from __future__ import annotations

__all__ = ["main"]


def main() -> None:
    """Run the `gen-agent` command line (the `[project.scripts]` entry point).

    Imports the typer app lazily so `import gen_agent.cli` stays cheap. Exits the process with
    the command's exit code (0 ok, 1 a failed turn, 2 bad input, 130 on Ctrl-C).
    """
    from gen_agent.cli._app import main as _main

    _main()

