"""15. HTTP agents: memory and start of `AnthropicAPI` and `OpenAIResponses` agents, and N
concurrent conversations against one bare `AsyncAnthropic` with `asyncio.gather` doing the
same.

The model server runs in its own process (`_sse_server.py`, both wire protocols): every
request is answered after `ttfb_s` (0.2 s) with `chunks` (20) text deltas `gap_s` (15 ms)
apart. Figures, in interleaved rounds:

- `sdk_import_s` / `sdk_import_openai_s`: `import anthropic` / `import openai` in a fresh
  interpreter, minus an empty interpreter's start (seconds; the start figures below run after
  both SDKs are imported);
- `start_http`: starting `agents` (1,000) `AnthropicAPI` agents, seconds (target <= 2 s);
  extra `mock_start_s`: the same count of mock agents, for the runtime's share; extras
  `cpu_s` / `mock_cpu_s`: the CPU seconds of the process during each start (all threads);
- `kib_idle_http`: resident memory per idle agent after one turn each (its client, pool and
  open connection), KiB (target <= 40), measured while the shared pool's turn threads are
  warm (they park 30 s for the next turn of any agent, then exit) and have run HTTP turns;
  extra `turn_threads_first_kib`: the same for the batch whose turns run first on them;
- `kib_hibernated_http`: the same with `hibernate_after_ms=0` (the agent drops its client and
  connection when it hibernates), KiB (target <= 8);
- `start_http_openai`, `kib_idle_http_openai`, `kib_hibernated_http_openai`: the same three
  for `OpenAIResponses` agents (`store=False`: each keeps its conversation, as the Anthropic
  agents do), same targets;
- `bare_N` / `agents_N` (N = 1,000 and 3,000): wall seconds of N conversations of 3 turns
  each, all at once: bare `AsyncAnthropic` + `gather` against N agents asked with
  `gen_agent.aio.ask` + `gather` (target: agents <= 1.0 x bare); extras `peak_mib` (the
  round's resident peak growth; ratio target <= 2 in the issue, shown as the extras' ratio)
  and `failed` (turns that did not answer).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import gen_agent
import gen_agent.aio
from gen_agent.backends.mock import MockBackend

from ._common import KIB, PeakRss, rss_bytes
from ._harness import Measured, figure

NAME = "http_agents"
TITLE = "15. HTTP agents: memory, start of 1,000, N conversations vs bare AsyncAnthropic"
ORDER = 150
LEVELS = (20, 1000, 3000)
FULL: dict[str, Any] = {"agents": 1000, "levels": [1000, 3000], "turns": 3, "ttfb_s": 0.2,
                        "chunks": 20, "gap_s": 0.015, "rounds": 2, "probe_import": True,
                        "cold_batch": True}
SMOKE: dict[str, Any] = {"agents": 10, "levels": [20], "turns": 2, "ttfb_s": 0.01,
                         "chunks": 2, "gap_s": 0.001, "rounds": 1, "warmup_rounds": 0,
                         "probe_import": False, "cold_batch": False}
README = ("sdk_import_s", "start_http", "kib_idle_http", "kib_hibernated_http",
          "sdk_import_openai_s", "start_http_openai", "kib_idle_http_openai",
          "kib_hibernated_http_openai", "agents_*", "bare_*")
CHILD_TIMEOUT_S = 1200.0  # 3,000 conversations x 2 variants x rounds, per placement
_SERVER = Path(__file__).with_name("_sse_server.py")


class HttpAgent(gen_agent.GenAgent):
    """Takes `opts["backend_opts"]` as its backend options; keeps nothing."""

    def init_agent(self, opts: dict[str, Any]) -> Any:
        return opts["backend_opts"], None

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return gen_agent.NoReply(state)


@contextmanager
def setup(params: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Start the model server process and import both SDKs."""
    import anthropic
    import openai  # noqa: F401 - imported before the start figures, as anthropic is

    server = subprocess.Popen(
        [sys.executable, str(_SERVER), str(params["ttfb_s"]), str(params["chunks"]),
         str(params["gap_s"])], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        yield {"url": f"http://127.0.0.1:{port}", "anthropic": anthropic, "notes": {}}
    finally:
        assert server.stdin is not None and server.stdout is not None
        server.stdin.close()
        server.wait(30)
        server.stdout.close()


def _opts(env: dict[str, Any], provider: str = "anthropic") -> dict[str, Any]:
    if provider == "openai":
        return {"api_key": "bench", "base_url": f"{env['url']}/v1", "model": "gpt-bench",
                "store": False, "max_output_tokens": 64, "timeout": 120.0}
    return {"api_key": "bench", "base_url": env["url"], "model": "claude-bench",
            "max_tokens": 64, "timeout": 120.0}


def _backend(provider: str) -> Any:
    if provider == "openai":
        from gen_agent.backends.openai import OpenAIResponses

        return OpenAIResponses
    return _AnthropicAPI()


def _import_s(env: dict[str, Any], params: dict[str, Any], module: str, key: str,
              ) -> float | None:
    """One fresh interpreter importing `module`, minus one that imports nothing."""
    if not params.get("probe_import", True):
        env["notes"][key] = "not measured at this size"
        return None
    def run(code: str) -> float:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        return time.perf_counter() - started
    return max(0.0, run(f"import {module}") - run("pass"))


@figure(unit="s", label="import anthropic (fresh interpreter, minus its start)")
def sdk_import_s(env: dict[str, Any], params: dict[str, Any]) -> float | None:
    """One fresh interpreter importing the Anthropic SDK, minus one that imports nothing."""
    return _import_s(env, params, "anthropic", "sdk_import_s")


@figure(unit="s", label="import openai (fresh interpreter, minus its start)")
def sdk_import_openai_s(env: dict[str, Any], params: dict[str, Any]) -> float | None:
    """One fresh interpreter importing the OpenAI SDK, minus one that imports nothing."""
    return _import_s(env, params, "openai", "sdk_import_openai_s")


def _start(count: int, backend: Any, opts: dict[str, Any], **extra: Any) -> tuple[float, list]:
    started = time.perf_counter()
    refs = [gen_agent.start_agent(HttpAgent, name=("h", i), backend=backend,
                                  backend_opts=opts, **extra) for i in range(count)]
    return time.perf_counter() - started, refs


def _start_figure(env: dict[str, Any], params: dict[str, Any], provider: str) -> Measured:
    """Seconds to start `agents` HTTP agents; extras: the same count of mock agents, and the
    CPU seconds of both starts (every thread of the process: what a loaded machine's wall
    hides)."""
    with gen_agent.AgentSystem():
        cpu = time.process_time()
        mock_s, _ = _start(params["agents"], MockBackend, {"scripts": []})
        mock_cpu = time.process_time() - cpu
    with gen_agent.AgentSystem():
        cpu = time.process_time()
        http_s, _ = _start(params["agents"], _backend(provider), _opts(env, provider))
        http_cpu = time.process_time() - cpu
    return Measured(http_s, {"mock_start_s": mock_s, "cpu_s": http_cpu,
                             "mock_cpu_s": mock_cpu})


@figure(unit="s", label="start of 1,000 AnthropicAPI agents (SDK imported)", target="<= 2")
def start_http(env: dict[str, Any], params: dict[str, Any]) -> Measured:
    """Seconds to start `agents` AnthropicAPI agents; extra: as many mock agents."""
    return _start_figure(env, params, "anthropic")


@figure(unit="s", label="start of 1,000 OpenAIResponses agents (SDK imported)",
        target="<= 2")
def start_http_openai(env: dict[str, Any], params: dict[str, Any]) -> Measured:
    """Seconds to start `agents` OpenAIResponses agents; extra: as many mock agents."""
    return _start_figure(env, params, "openai")


def _AnthropicAPI() -> Any:
    from gen_agent.backends.anthropic import AnthropicAPI

    return AnthropicAPI


def _turn_threads() -> set[threading.Thread]:
    return {thread for thread in threading.enumerate() if thread.name == "gen_agent-turn"}


def _kib_batch(env: dict[str, Any], count: int, prefix: str, provider: str, **extra: Any,
               ) -> tuple[float, int]:
    """(KiB per agent, turn threads started by the batch's turns)."""
    turn_threads = _turn_threads()
    before = rss_bytes()
    backend, opts = _backend(provider), _opts(env, provider)
    refs = [gen_agent.start_agent(HttpAgent, name=(prefix, i), backend=backend,
                                  backend_opts=opts, **extra) for i in range(count)]

    async def one_turn_each() -> None:
        await asyncio.gather(*(gen_agent.aio.ask(ref.name, "hi", timeout=300)
                               for ref in refs))

    asyncio.run(one_turn_each())
    if extra.get("hibernate_after_ms") == 0:  # wait (bounded) for the agents' threads to end
        deadline = time.monotonic() + 30
        pause = threading.Event()
        while (_agent_threads() > count // 100 + _agent_threads_before
               and time.monotonic() < deadline):
            pause.wait(0.01)
    return (rss_bytes() - before) / count / KIB, len(_turn_threads() - turn_threads)


_agent_threads_before = 0


def _agent_threads() -> int:
    # The agents' own threads (pykka names them after the actor class).
    return sum(1 for thread in threading.enumerate() if thread.name.startswith("AgentActor"))


def _hold_turn_threads(count: int) -> None:
    """Have `count` turns in flight at once (mock agents held at a gate), so the shared
    pool holds at least `count` parked turn threads afterwards."""
    from gen_agent.backends import mock

    gates = [mock.gate(mock.text_turn("w"), timeout=120) for _ in range(count)]
    refs = [gen_agent.start_agent(HttpAgent, name=("g", i), backend=MockBackend,
                                  backend_opts={"scripts": [gate]})
            for i, gate in enumerate(gates)]

    async def all_held() -> None:
        asks = [asyncio.ensure_future(gen_agent.aio.ask(ref.name, "w", timeout=300))
                for ref in refs]
        await asyncio.to_thread(lambda: [gate.wait_blocked(120) for gate in gates])
        for gate in gates:
            gate.release()
        await asyncio.gather(*asks)

    asyncio.run(all_held())


def _kib_after_a_turn(env: dict[str, Any], params: dict[str, Any], provider: str = "anthropic",
                      **extra: Any) -> Measured:
    """Up to two batches of `agents`, one turn each, every batch still running while the next
    is measured. First `agents` mock turns are held at once, so the shared pool of turn
    threads (each parks 30 s for the next turn of any agent, then exits) holds that many;
    the first batch's HTTP turns then run on them and grow their stacks (extra
    `turn_threads_first_kib`; not at the smoke size); the second batch reuses them, so its
    growth is the agents' own memory (the value; extra `new_turn_threads`: how many turn
    threads it started all the same)."""
    global _agent_threads_before
    count = params["agents"]
    extras: dict[str, float] = {}
    with gen_agent.AgentSystem():  # kept until the end: its memory is not reused
        _hold_turn_threads(count)
        if params.get("cold_batch", True):  # not at the smoke size: two more RSS readings
            _agent_threads_before = _agent_threads()
            extras["turn_threads_first_kib"], _ = _kib_batch(env, count, "c", provider,
                                                             **extra)
        with gen_agent.AgentSystem():
            _agent_threads_before = _agent_threads()
            warm, started = _kib_batch(env, count, "w", provider, **extra)
    return Measured(warm, {**extras, "new_turn_threads": float(started)})


@figure(unit="KiB", label="memory per idle AnthropicAPI agent (after a turn)", target="<= 40",
        note="resident growth; the shared turn threads are warm (extra: their first HTTP turns)")
def kib_idle_http(env: dict[str, Any], params: dict[str, Any]) -> Measured:
    """Resident growth per agent, each with its client, pool and connection."""
    return _kib_after_a_turn(env, params)


@figure(unit="KiB", label="memory per hibernated AnthropicAPI agent (after a turn)",
        target="<= 8")
def kib_hibernated_http(env: dict[str, Any], params: dict[str, Any]) -> Measured:
    """Resident growth per agent that hibernated after its turn (no client, no socket)."""
    return _kib_after_a_turn(env, params, hibernate_after_ms=0)


@figure(unit="KiB", label="memory per idle OpenAIResponses agent (after a turn)",
        target="<= 40",
        note="resident growth; the shared turn threads are warm (extra: their first HTTP turns)")
def kib_idle_http_openai(env: dict[str, Any], params: dict[str, Any]) -> Measured:
    """Resident growth per OpenAIResponses agent, with its client, pool and connection."""
    return _kib_after_a_turn(env, params, "openai")


@figure(unit="KiB", label="memory per hibernated OpenAIResponses agent (after a turn)",
        target="<= 8")
def kib_hibernated_http_openai(env: dict[str, Any], params: dict[str, Any]) -> Measured:
    """Resident growth per OpenAIResponses agent that hibernated after its turn."""
    return _kib_after_a_turn(env, params, "openai", hibernate_after_ms=0)


async def _bare(env: dict[str, Any], count: int, turns: int) -> int:
    anthropic = env["anthropic"]
    http = anthropic.DefaultAsyncHttpxClient(limits=__import__("httpx2").Limits(
        max_connections=count + 10, max_keepalive_connections=count + 10))
    client = anthropic.AsyncAnthropic(api_key="bench", base_url=env["url"], max_retries=0,
                                      timeout=120.0, http_client=http)
    failed = 0

    async def conversation() -> None:
        nonlocal failed
        messages: list[dict[str, Any]] = []
        for turn in range(turns):
            messages.append({"role": "user", "content": f"turn {turn}"})
            try:
                stream = await client.messages.create(model="claude-bench", max_tokens=64,
                                                      messages=messages, stream=True)
                text = []
                async for event in stream:
                    if event.type == "content_block_delta":
                        text.append(event.delta.text)
                messages.append({"role": "assistant", "content": "".join(text)})
            except Exception:
                failed += 1
                messages.pop()

    try:
        await asyncio.gather(*(conversation() for _ in range(count)))
    finally:
        await client.close()
    return failed


def _register(level: int) -> None:
    def bare(env: dict[str, Any], params: dict[str, Any]) -> Measured | None:
        if level not in params["levels"]:
            return None
        with PeakRss() as peak:
            started = time.perf_counter()
            failed = asyncio.run(_bare(env, level, params["turns"]))
            wall = time.perf_counter() - started
        return Measured(wall, {"peak_mib": peak.growth_bytes / KIB / KIB,
                               "failed": float(failed)})

    def agents(env: dict[str, Any], params: dict[str, Any]) -> Measured | None:
        if level not in params["levels"]:
            return None
        with gen_agent.AgentSystem(), PeakRss() as peak:
            started = time.perf_counter()
            _, refs = _start(level, _AnthropicAPI(), _opts(env))
            failed = 0

            async def conversation(name: Any) -> None:
                nonlocal failed
                for turn in range(params["turns"]):
                    try:
                        await gen_agent.aio.ask(name, f"turn {turn}", timeout=300)
                    except Exception:
                        failed += 1

            async def all_of_them() -> None:
                await asyncio.gather(*(conversation(ref.name) for ref in refs))

            asyncio.run(all_of_them())
            wall = time.perf_counter() - started
        return Measured(wall, {"peak_mib": peak.growth_bytes / KIB / KIB,
                               "failed": float(failed)})

    figure(key=f"bare_{level}", unit="s", label=f"bare AsyncAnthropic + gather, {level:,} x 3",
           note="wall of N conversations of 3 turns, one client, one loop")(bare)
    figure(key=f"agents_{level}", unit="s", label=f"agents (aio.ask + gather), {level:,} x 3",
           peer=f"bare_{level}", target="<= 1.0",
           note="includes starting the N agents")(agents)


for _level in LEVELS:
    _register(_level)
