"""11. Warm Claude Code sessions: a gen_agent turn on a warm `claude` process, against a bare
stream-json round trip on a process of our own (the limit), and a per-turn-process turn
(issue 17). All three against the same loopback `ScriptedModelServer` (a one-line text reply).

- `bare_round_trip`: our own `claude -p --input-format stream-json --output-format stream-json
  --verbose` process (subprocess, no gen_agent): write one `user` line, read stdout lines until
  the `result` line. p50 of `calls` round trips on one process.
- `warm_turn`: `ask` on an agent with `ClaudeCLI` in warm mode (the default), one process kept
  across turns. p50 of `calls` asks. Target: within 1.3x of the bare round trip.
- `per_turn_turn`: `ask` on an agent with `ClaudeCLI(mode="per_turn")`: a new `claude` process
  per turn, resuming with `--resume`. p50 of `per_turn_calls` asks. Target: warm is at least
  20x faster.

Needs the real CLI (`make test` installs it into `.venv/npm`, or set GEN_AGENT_CLAUDE_CLI);
without it every figure is n/a with the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import gen_agent
from gen_agent.backends.claude import ClaudeCLI
from gen_agent.testing._model_server import Reply, ScriptedModelServer

from ._common import BenchAgent
from ._harness import Measured, Ratio, Target, figure, latency_us

NAME = "warm_cli"
TITLE = "11. Warm Claude Code sessions (warm turn vs bare stream-json vs per-turn process)"
ORDER = 110
README = ("bare_round_trip", "warm_turn", "per_turn_turn", "warm_turn_vs_bare_round_trip",
          "per_turn_turn_vs_warm_turn")
FULL: dict[str, Any] = {"calls": 20, "per_turn_calls": 3, "rounds": 3}
SMOKE: dict[str, Any] = {"calls": 2, "per_turn_calls": 1, "rounds": 1, "warmup_rounds": 0}

ROOT = Path(__file__).resolve().parents[2]
_INSTALLED = ROOT / ".venv" / "npm" / "node_modules" / ".bin" / "claude"
_MODEL = "claude-sonnet-4-5"
_TIMEOUT_S = 120.0

RATIOS = [Ratio("per_turn_turn", "warm_turn", Target.parse(">= 20"),
                label="per-turn turn / warm turn")]


def _cli() -> str | None:
    return os.environ.get("GEN_AGENT_CLAUDE_CLI") or (
        str(_INSTALLED) if _INSTALLED.exists() else None)


def missing() -> str | None:
    """Why this measurement cannot run here (the runner's smoke test skips with it), or None."""
    if _cli() is None:
        return ("the claude CLI is not installed (`make test` installs it into .venv/npm; or "
                "set GEN_AGENT_CLAUDE_CLI)")
    return None


@contextmanager
def setup(params: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The loopback server, a private HOME and work folder, the bare process and both agents."""
    cli = _cli()
    if cli is None:
        yield {"cli": None, "notes": {key: "the claude CLI is not installed" for key in
                                      ("bare_round_trip", "warm_turn", "per_turn_turn")}}
        return
    with tempfile.TemporaryDirectory() as tmp, ScriptedModelServer(
            default=Reply.text("ok", input_tokens=5, output_tokens=1)) as server, \
            gen_agent.AgentSystem():
        home, work = Path(tmp, "home"), Path(tmp, "work")
        home.mkdir()
        work.mkdir()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
               "ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "sk-ant-bench",
               "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
               "DISABLE_AUTOUPDATER": "1"}
        options = {"cli_path": cli, "cwd": str(work), "env": env, "inherit_env": False,
                   "model": _MODEL}
        warm = gen_agent.start_agent(BenchAgent, name="bench-warm", backend=ClaudeCLI,
                                     backend_opts=options)
        cold = gen_agent.start_agent(BenchAgent, name="bench-per-turn", backend=ClaudeCLI,
                                     backend_opts={**options, "mode": "per_turn"})
        bare = subprocess.Popen(
            [cli, "-p", "--input-format", "stream-json", "--output-format", "stream-json",
             "--verbose", "--model", _MODEL],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            cwd=str(work), env={**env, "CLAUDE_CODE_EAGER_FLUSH": "1"})
        try:
            yield {"cli": cli, "warm": warm, "cold": cold, "bare": bare, "notes": {}}
        finally:
            assert bare.stdin is not None and bare.stdout is not None
            bare.stdin.close()
            try:
                bare.wait(10)
            except subprocess.TimeoutExpired:
                bare.kill()
                bare.wait(10)
            bare.stdout.close()
            warm.stop()
            cold.stop()


def _bare_turn(bare: subprocess.Popen[bytes]) -> None:
    assert bare.stdin is not None and bare.stdout is not None
    line = {"type": "user", "message": {"role": "user", "content": "hi"},
            "parent_tool_use_id": None, "session_id": "default"}
    bare.stdin.write(json.dumps(line).encode() + b"\n")
    bare.stdin.flush()
    while True:
        raw = bare.stdout.readline()
        if not raw:
            raise RuntimeError("the bare claude process exited")
        if raw.startswith(b'{"type":"result"'):
            return


def _timed(fn: Any, calls: int) -> Measured:
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1e6)
    return latency_us(samples)


@figure(unit="us", label="bare stream-json round trip (own process)")
def bare_round_trip(env: dict[str, Any], params: dict[str, Any]) -> Measured | None:
    """p50 of one user line written and read to its result on our own process."""
    if env["cli"] is None:
        return None
    return _timed(lambda: _bare_turn(env["bare"]), params["calls"])


@figure(unit="us", label="gen_agent warm turn", peer="bare_round_trip", target="<= 1.3")
def warm_turn(env: dict[str, Any], params: dict[str, Any]) -> Measured | None:
    """p50 of `ask` on a warm ClaudeCLI agent."""
    if env["cli"] is None:
        return None
    agent = env["warm"]
    return _timed(lambda: agent.ask("hi", timeout=_TIMEOUT_S), params["calls"])


@figure(unit="us", label="gen_agent per-turn-process turn")
def per_turn_turn(env: dict[str, Any], params: dict[str, Any]) -> Measured | None:
    """p50 of `ask` on a ClaudeCLI agent in per-turn mode (a new process per turn)."""
    if env["cli"] is None:
        return None
    agent = env["cold"]
    return _timed(lambda: agent.ask("hi", timeout=_TIMEOUT_S), params["per_turn_calls"])
