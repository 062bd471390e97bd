"""15. A warm fleet: first turns without a spawn, and many concurrent Claude Code sessions
against the Claude Agent SDK's `ClaudeSDKClient` (Python) on the same CLI.

Everything runs the real `claude` against one loopback `ScriptedModelServer` (a one-line text
reply), with the same environment, model and system prompt for both libraries.

- `warm_turn`: `ask` on an agent whose process is warm (the reference of the first turns).
- `first_turn_cold`: the first `ask` of a just-started agent without pre-warm (the process
  starts in that turn). `first_turn_prewarmed`: the first `ask` of an agent started with
  `prewarm=True`, once its process is ready (an agent started ahead of its first message).
  `first_turn_spare`: the same with `fleet=WarmFleet(1)`, the process a spare. Target: a
  pre-warmed first turn <= 1.5x a warm turn. `first_turn_prewarmed_context` /
  `first_turn_spare_context`: the same with `prewarm_context=True` (the process built its
  tool schemas before it counted as ready; it sends `count_tokens` requests for that).
- `codex_warm_turn`, `codex_first_turn_cold`, `codex_first_turn_prewarmed`,
  `codex_first_turn_spare`: the same four for `CodexCLI(mode="app_server")` on the real `codex
  app-server` against the same server (its own CODEX_HOME pointing there); pre-warmed and
  spare processes have answered `initialize` and started their thread.
- `start_plain` / `start_prewarm`: `start_agent` itself without and with `prewarm=True`
  (the spawn runs in the background; target <= 1.5x, i.e. no slower beyond noise).
- `gen_agent_N` / `sdk_N` (N concurrent sessions, each `turns` turns in a row, all sessions
  warm before the clock starts): value turns per minute; extras the p50 and p99 of every
  turn's latency (us), `p99_over_p50`, host CPU seconds per turn (this process plus every
  descendant, from /proc), and RSS per session (MiB; the resident size of every descendant
  process, summed, over N: the CLI, and for gen_agent its launcher). Target: gen_agent's
  turns per minute >= the SDK's.

Needs the real CLI (`make test` installs it into `.venv/npm`, or set GEN_AGENT_CLAUDE_CLI;
GEN_AGENT_CODEX_CLI for the `codex_*` rows) and, for the `sdk_N` rows, `claude-agent-sdk`
(`make bench` installs it); without one the rows that need it are n/a with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import gen_agent
from gen_agent.backends.claude import ClaudeCLI, WarmFleet
from gen_agent.backends.codex import CodexCLI
from gen_agent.testing._model_server import Reply, ScriptedModelServer
from gen_agent.testing._openai_protocol import codex_loopback_config

from ._common import MIB, BenchAgent, percentile
from ._harness import Measured, figure, latency_us

NAME = "warm_fleet"
TITLE = "15. Warm fleet (first turns cold / pre-warmed / spare; N sessions vs the Agent SDK)"
ORDER = 150
LEVELS = (5, 10, 20)
README = ("first_turn_cold", "first_turn_prewarmed", "first_turn_spare",
          "first_turn_prewarmed_vs_warm_turn", "first_turn_spare_vs_warm_turn",
          "codex_first_turn_cold", "codex_first_turn_prewarmed",
          "codex_first_turn_prewarmed_vs_codex_warm_turn",
          "first_turn_prewarmed_context", "first_turn_spare_context",
          "first_turn_prewarmed_context_vs_warm_turn", "first_turn_spare_context_vs_warm_turn",
          "start_prewarm_vs_start_plain", "gen_agent_*", "sdk_*")
FULL: dict[str, Any] = {"levels": list(LEVELS), "turns": 30, "calls": 5, "rounds": 2}
# `make test` measures the headline and its peer only, once (the rest is n/a there).
CHILD_TIMEOUT_S = 1800.0  # one placement of the full size: real CLIs, up to 20 x 2 sessions
SMOKE: dict[str, Any] = {"levels": [], "turns": 2, "calls": 1, "rounds": 1,
                         "warmup_rounds": 0, "only": ["warm_turn", "first_turn_prewarmed"]}

ROOT = Path(__file__).resolve().parents[2]
_INSTALLED = ROOT / ".venv" / "npm" / "node_modules" / ".bin" / "claude"
_CODEX_INSTALLED = _INSTALLED.with_name("codex")
_CODEX_KEYS = ("codex_warm_turn", "codex_first_turn_cold", "codex_first_turn_prewarmed",
               "codex_first_turn_spare")
_MODEL = "claude-sonnet-4-5"
_SYSTEM = "You are a benchmark; answer briefly."
_TIMEOUT_S = 120.0
_NAMES = itertools.count()
_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _cli() -> str | None:
    return os.environ.get("GEN_AGENT_CLAUDE_CLI") or (
        str(_INSTALLED) if _INSTALLED.exists() else None)


def _codex_cli() -> str | None:
    return os.environ.get("GEN_AGENT_CODEX_CLI") or (
        str(_CODEX_INSTALLED) if _CODEX_INSTALLED.exists() else None)


def _sdk() -> Any:
    try:
        import claude_agent_sdk
    except ImportError:
        return None
    return claude_agent_sdk


@contextmanager
def setup(params: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The loopback server, a private HOME and work folder, one warm agent, a fleet (and
    the same for codex, started by the first `codex_*` figure)."""
    cli, codex = _cli(), _codex_cli()
    sdk = _sdk()
    notes = {} if sdk is not None else {
        f"sdk_{n}": "claude-agent-sdk is not installed (make bench installs it)"
        for n in LEVELS}
    if codex is None:
        notes.update({key: "the codex CLI is not installed" for key in _CODEX_KEYS})
    if cli is None:
        notes.update({key: "the claude CLI is not installed" for key in _keys()})
    with tempfile.TemporaryDirectory() as tmp, ScriptedModelServer(
            default=Reply.text("ok", input_tokens=5, output_tokens=1)) as server, \
            gen_agent.AgentSystem(), contextlib.ExitStack() as stack:
        home, work = Path(tmp, "home"), Path(tmp, "work")
        home.mkdir()
        work.mkdir()
        codex_env = {"cli": codex, "stack": stack, "server": server, "tmp": tmp}
        if cli is None:
            yield {"cli": None, "codex": codex_env, "notes": notes}
            return
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
               "ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "sk-ant-bench",
               "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
               "DISABLE_AUTOUPDATER": "1"}
        options = {"cli_path": cli, "cwd": str(work), "env": env, "inherit_env": False,
                   "model": _MODEL, "system_prompt": _SYSTEM}
        fleet, fleet_context = WarmFleet(1), WarmFleet(1)
        warm = gen_agent.start_agent(BenchAgent, name="bench-fleet-warm", backend=ClaudeCLI,
                                     backend_opts={**options, "fleet": fleet})
        # The first agent of a configuration starts the fleet's spares of it.
        only = params.get("only")
        seed = None if only is not None and "first_turn_spare_context" not in only else (
            gen_agent.start_agent(BenchAgent, name="bench-fleet-seed", backend=ClaudeCLI,
                                  backend_opts={**options, "fleet": fleet_context,
                                                "prewarm_context": True}))
        try:
            yield {"cli": cli, "sdk": sdk, "options": options, "fleet": fleet,
                   "fleet_context": fleet_context, "warm": warm, "work": str(work), "env": env,
                   "codex": codex_env, "notes": notes}
        finally:
            warm.stop()
            if seed is not None:
                seed.stop()
            fleet.close()
            fleet_context.close()


def _off(env: dict[str, Any], params: dict[str, Any], key: str) -> bool:
    """True when figure `key` is not measured: no CLI, or left out by the `only` param."""
    only = params.get("only")
    cli = env["codex"]["cli"] if key.startswith("codex_") else env["cli"]
    return cli is None or (only is not None and key not in only)


def _keys() -> list[str]:
    return ["warm_turn", "first_turn_cold", "first_turn_prewarmed", "first_turn_spare",
            *_CODEX_KEYS, "first_turn_prewarmed_context", "first_turn_spare_context",
            "start_plain", "start_prewarm",
            *(f"{lib}_{n}" for n in LEVELS for lib in ("gen_agent", "sdk"))]


def _start(env: dict[str, Any], **extra: Any) -> Any:
    return gen_agent.start_agent(BenchAgent, name=f"bench-fleet-{next(_NAMES)}",
                                 backend=env.get("backend", ClaudeCLI),
                                 backend_opts={**env["options"], **extra})


def _codex(env: dict[str, Any]) -> dict[str, Any]:
    """The codex part of `env`, started on first use: its CODEX_HOME and work folder, a
    warm app-server agent and a fleet (closed when `setup` exits)."""
    codex = env["codex"]
    if "options" not in codex:
        root = Path(codex["tmp"], "codex")
        home, work = root / "codex-home", root / "work"
        home.mkdir(parents=True)
        work.mkdir()
        (home / "config.toml").write_text(codex_loopback_config(codex["server"]))
        codex["backend"] = CodexCLI
        codex["options"] = {
            "cli_path": codex["cli"], "mode": "app_server", "codex_home": str(home),
            "cwd": str(work), "model": "gpt-test", "inherit_env": False,
            "env": {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(root),
                    "GEN_AGENT_LOOP_KEY": "bench-key"}}
        codex["fleet"] = fleet = WarmFleet(1)
        codex["stack"].callback(fleet.close)
        codex["warm"] = warm = _start(codex, fleet=fleet)  # (it starts the spares)
        codex["stack"].callback(warm.stop)
        warm.ask("hi", timeout=_TIMEOUT_S)
    return codex


def _first_turn(env: dict[str, Any], params: dict[str, Any], **extra: Any) -> Measured:
    samples = []
    for _ in range(params["calls"]):
        if "fleet" in extra and not extra["fleet"].wait_spares(1, _TIMEOUT_S):
            raise RuntimeError("no spare became ready")
        agent = _start(env, **extra)
        try:
            if extra and not agent.backend_session(_TIMEOUT_S).wait_warm(_TIMEOUT_S):
                raise RuntimeError("the pre-warmed process did not become ready")
            started = time.perf_counter()
            agent.ask("hi", timeout=_TIMEOUT_S)
            samples.append((time.perf_counter() - started) * 1e6)
        finally:
            agent.stop()
    return latency_us(samples)


@figure(unit="us", label="warm turn (reference)")
def warm_turn(env: dict[str, Any], params: dict[str, Any]) -> Measured | None:
    """p50 of `ask` on an agent whose process is warm."""
    return None if _off(env, params, "warm_turn") else _warm_turn(env, params)


def _warm_turn(env: dict[str, Any], params: dict[str, Any]) -> Measured:
    agent = env["warm"]
    samples = []
    for _ in range(params["calls"]):
        started = time.perf_counter()
        agent.ask("hi", timeout=_TIMEOUT_S)
        samples.append((time.perf_counter() - started) * 1e6)
    return latency_us(samples)


@figure(unit="us", label="first turn, cold (the process starts in it)")
def first_turn_cold(env: dict[str, Any], params: dict[str, Any]) -> Measured | None:
    """The first `ask` of a just-started agent without pre-warm."""
    return None if _off(env, params, "first_turn_cold") else _first_turn(env, params)


@figure(unit="us", label="first turn, pre-warmed", peer="warm_turn", target="<= 1.5")
def first_turn_prewarmed(env: dict[str, Any], params: dict[str, Any]) -> Measured | None:
    """The first `ask` of an agent started with `prewarm=True`, its process ready."""
    if _off(env, params, "first_turn_prewarmed"):
        return None
    return _first_turn(env, params, prewarm=True)


@figure(unit="us", label="first turn, from a spare", peer="warm_turn", target="<= 1.5")
def first_turn_spare(env: dict[str, Any], params: dict[str, Any]) -> Measured | None:
    """The first `ask` of an agent started with the shared `WarmFleet(1)`."""
    if _off(env, params, "first_turn_spare"):
        return None
    return _first_turn(env, params, fleet=env["fleet"])


@figure(unit="us", label="codex app-server: warm turn (reference)")
def codex_warm_turn(env: dict[str, Any], params: dict[str, Any]) -> Measured | None:
    """p50 of `ask` on a `CodexCLI` app-server agent whose process is warm."""
    return None if _off(env, params, "codex_warm_turn") else _warm_turn(_codex(env), params)


@figure(unit="us", label="codex app-server: first turn, cold")
def codex_first_turn_cold(env: dict[str, Any], params: dict[str, Any]) -> Measured | None:
    """The first `ask` of a just-started app-server agent without pre-warm."""
    return None if _off(env, params, "codex_first_turn_cold") else _first_turn(
        _codex(env), params)


@figure(unit="us", label="codex app-server: first turn, pre-warmed", peer="codex_warm_turn",
        target="<= 1.5")
def codex_first_turn_prewarmed(env: dict[str, Any], params: dict[str, Any]) -> Measured | None:
    """The first `ask` of an app-server agent started with `prewarm=True`, its process
    ready (initialized, its thread started)."""
    return None if _off(env, params, "codex_first_turn_prewarmed") else _first_turn(
        _codex(env), params, prewarm=True)


@figure(unit="us", label="codex app-server: first turn, from a spare",
        peer="codex_warm_turn", target="<= 1.5")
def codex_first_turn_spare(env: dict[str, Any], params: dict[str, Any]) -> Measured | None:
    """The first `ask` of an app-server agent started with the shared `WarmFleet(1)`."""
    if _off(env, params, "codex_first_turn_spare"):
        return None
    codex = _codex(env)
    return _first_turn(codex, params, fleet=codex["fleet"])


@figure(unit="us", label="first turn, pre-warmed, prewarm_context", peer="warm_turn",
        target="<= 1.5")
def first_turn_prewarmed_context(env: dict[str, Any], params: dict[str, Any]) -> Measured | None:
    """The first `ask` of an agent started with `prewarm=True, prewarm_context=True`."""
    if _off(env, params, "first_turn_prewarmed_context"):
        return None
    return _first_turn(env, params, prewarm=True, prewarm_context=True)


@figure(unit="us", label="first turn, from a spare, prewarm_context", peer="warm_turn",
        target="<= 1.5")
def first_turn_spare_context(env: dict[str, Any], params: dict[str, Any]) -> Measured | None:
    """The first `ask` of an agent started with a shared `WarmFleet(1)` and
    `prewarm_context=True` (its spares warmed so)."""
    if _off(env, params, "first_turn_spare_context"):
        return None
    return _first_turn(env, params, fleet=env["fleet_context"], prewarm_context=True)


def _start_time(env: dict[str, Any], params: dict[str, Any], **extra: Any) -> Measured:
    samples = []
    for _ in range(params["calls"]):
        started = time.perf_counter()
        agent = _start(env, **extra)
        samples.append((time.perf_counter() - started) * 1e6)
        agent.stop()
    return latency_us(samples)


@figure(unit="us", label="start_agent, no pre-warm")
def start_plain(env: dict[str, Any], params: dict[str, Any]) -> Measured | None:
    """`start_agent` of a warm-mode agent without pre-warm."""
    return None if _off(env, params, "start_plain") else _start_time(env, params)


@figure(unit="us", label="start_agent, prewarm=True", peer="start_plain", target="<= 1.5")
def start_prewarm(env: dict[str, Any], params: dict[str, Any]) -> Measured | None:
    """`start_agent` with `prewarm=True` (the spawn runs in the background)."""
    return None if _off(env, params, "start_prewarm") else _start_time(env, params, prewarm=True)


# -- N concurrent sessions -----------------------------------------------------------------


def _tree() -> list[int]:
    """Every live descendant of this process (from /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [os.getpid()]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _cpu_ticks(pids: list[int]) -> dict[int, int]:
    ticks = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
            ticks[pid] = int(fields[11]) + int(fields[12])  # utime + stime
        except (OSError, IndexError, ValueError):
            continue
    return ticks


def _rss_bytes(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as statm:
                total += int(statm.read().split()[1]) * _PAGE
        except (OSError, IndexError, ValueError):
            continue
    return total


class _Meter:
    """Host CPU (this process and every descendant) and the descendants' RSS over a phase."""

    def __enter__(self) -> _Meter:
        self.pids = _tree()
        self.before = _cpu_ticks(self.pids)
        times = os.times()
        self.own = times.user + times.system
        self.started = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall_s = time.perf_counter() - self.started
        times = os.times()
        after = _cpu_ticks(self.pids)
        children = sum(after[p] - self.before[p] for p in after if p in self.before)
        self.cpu_s = times.user + times.system - self.own + children / _TICK
        self.rss = _rss_bytes(_tree())


def _summary(samples: list[float], meter: _Meter, sessions: int) -> Measured:
    turns = len(samples)
    p50 = percentile(samples, 0.5)
    p99 = percentile(samples, 0.99)
    return Measured(turns / meter.wall_s * 60, {
        "p50_us": p50, "p99_us": p99, "p99_over_p50": p99 / p50,
        "cpu_s_per_turn": meter.cpu_s / turns, "rss_mib_per_session": meter.rss / MIB / sessions})


def _gen_agent_round(env: dict[str, Any], sessions: int, turns: int) -> Measured:
    agents = [_start(env, prewarm=True) for _ in range(sessions)]
    try:
        for agent in agents:
            if not agent.backend_session(_TIMEOUT_S).wait_warm(_TIMEOUT_S):
                raise RuntimeError("a pre-warmed process did not become ready")
        samples: list[float] = []
        errors: list[BaseException] = []
        lock = threading.Lock()

        def client(agent: Any) -> None:
            mine = []
            try:
                for _ in range(turns):
                    started = time.perf_counter()
                    agent.ask("hi", timeout=_TIMEOUT_S)
                    mine.append((time.perf_counter() - started) * 1e6)
            except BaseException as exc:  # reported by the round
                errors.append(exc)
            with lock:
                samples.extend(mine)

        threads = [threading.Thread(target=client, args=(a,)) for a in agents]
        with _Meter() as meter:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(_TIMEOUT_S * turns)
        if errors:
            raise errors[0]
        return _summary(samples, meter, sessions)
    finally:
        for agent in agents:
            agent.stop()


def _sdk_round(env: dict[str, Any], sessions: int, turns: int) -> Measured:
    sdk = env["sdk"]
    options = sdk.ClaudeAgentOptions(cli_path=env["cli"], cwd=env["work"], env=env["env"],
                                     model=_MODEL, system_prompt=_SYSTEM)
    samples: list[float] = []
    meter = _Meter()

    async def one(client: Any) -> None:
        for _ in range(turns):
            started = time.perf_counter()
            await client.query("hi")
            async for message in client.receive_response():
                if isinstance(message, sdk.ResultMessage):
                    break
            samples.append((time.perf_counter() - started) * 1e6)

    async def run() -> None:
        clients = [sdk.ClaudeSDKClient(options=options) for _ in range(sessions)]
        await asyncio.gather(*(c.connect() for c in clients))  # every session warm first
        try:
            with meter:
                await asyncio.gather(*(one(c) for c in clients))
        finally:
            for c in clients:
                await c.disconnect()

    asyncio.run(run())
    return _summary(samples, meter, sessions)


def _register(level: int) -> None:
    def ours(env: dict[str, Any], params: dict[str, Any]) -> Measured | None:
        if _off(env, params, f"gen_agent_{level}") or level not in params["levels"]:
            return None
        return _gen_agent_round(env, level, params["turns"])

    def peer(env: dict[str, Any], params: dict[str, Any]) -> Measured | None:
        if (_off(env, params, f"sdk_{level}") or env.get("sdk") is None
                or level not in params["levels"]):
            return None
        return _sdk_round(env, level, params["turns"])

    note = ("value: turns per minute, every session warm first; one thread (gen_agent) or "
            "asyncio task (SDK) per session")
    figure(key=f"sdk_{level}", unit="turns/min", label=f"Agent SDK, {level} sessions",
           note=note)(peer)
    figure(key=f"gen_agent_{level}", unit="turns/min", label=f"gen_agent, {level} sessions",
           peer=f"sdk_{level}", target=">= 1")(ours)


for _level in LEVELS:
    _register(_level)
