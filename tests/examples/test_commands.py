"""Every recipe runs from the command documented in docs/examples/README.md, on the mock
backend and on a real client (`--backend scripted`: the Anthropic SDK against a loopback
`ScriptedModelServer`)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from ._loader import EXAMPLES, load_example

ROOT = EXAMPLES.parents[1]
RECIPES = sorted(p.stem for p in EXAMPLES.glob("*.py") if p.stem != "choose_backend")
# Recipes whose output is the same on both backends (retry's mock fails on purpose first;
# workspace prints a temporary path and commit ids).
SAME_OUTPUT = sorted(set(RECIPES) - {"retry", "workspace"})


def test_there_are_eleven_recipes_and_the_readme_gives_each_one_command() -> None:
    assert len(RECIPES) == 11
    readme = (EXAMPLES / "README.md").read_text(encoding="utf-8")
    commands = re.findall(r"`python docs/examples/(\w+)\.py`", readme)
    assert sorted(set(commands)) == RECIPES


needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


@pytest.mark.parametrize("name", [pytest.param(n, marks=needs_git) if n == "workspace" else n
                                  for n in RECIPES])
def test_the_documented_command_runs(name: str) -> None:
    done = subprocess.run([sys.executable, f"docs/examples/{name}.py"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.strip()


@pytest.mark.parametrize("name", SAME_OUTPUT)
def test_a_real_client_gives_the_same_outcome(name: str, capsys) -> None:
    module = load_example(name)
    module.main([])
    on_mock = capsys.readouterr().out
    module.main(["--backend", "scripted"])
    assert capsys.readouterr().out == on_mock


def test_retry_on_a_real_client(capsys) -> None:
    load_example("retry").main(["--backend", "scripted"])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "done after 1 attempts; backoff delays (ms): []"


@needs_git
def test_workspace_on_a_real_client(capsys) -> None:
    load_example("workspace").main(["--backend", "scripted"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("Wrote 3 paragraphs") and len(out) == 4
