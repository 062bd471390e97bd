"""The agent server under 1,000 concurrent streaming clients (issue 39): each client (in a
separate process, `_server_clients.py`, httpx on asyncio) streams one `POST /v1/responses` on
its own conversation key; the mock model streams 10 text events over 1 s. Reported: clients
that completed, those that saw every event exactly once (sequence numbers 1..n, no gap, no
repeat), the wall time of the whole burst, per-client p50/p99, and the server process's peak
resident growth (threads: one agent and one turn task per key).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import gen_agent
from gen_agent._event import Event

from ._common import BenchAgent, Figure, PeakRss

NAME = "server_fanout"
TITLE = "Agent server: concurrent streaming clients (mock, 1 s stream each)"
ORDER = 78
REPS = 1
FULL: dict[str, Any] = {"clients": 1_000, "events": 10, "stream_s": 1.0}
SMOKE: dict[str, Any] = {"clients": 5, "events": 3, "stream_s": 0.1}
README = ("completed", "exactly_once", "wall_s", "peak_mib")


def _script(events: int, stream_s: float) -> Any:
    pause = stream_s / events

    def stream(prompt: str) -> Any:
        for i in range(events):
            time.sleep(pause)
            yield Event.new("text", {"text": f"{i} "})
        yield Event.new("result", {"text": ""})

    return stream


class FanAgent(BenchAgent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"fallback": opts["script"]}, 0


def _library_burst(host: Any, clients: int) -> float:
    import asyncio

    async def one(i: int) -> None:
        async with host.aio.stream(f"lib-{i}", "go", interrupt_on_exit=False,
                                   timeout=300) as turn:
            async for _event in turn:
                pass

    async def burst() -> float:
        began = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(clients)))
        return time.perf_counter() - began

    return asyncio.run(burst())


def run_once(params: dict[str, Any]) -> dict[str, Any]:
    from gen_agent.backends.mock import MockBackend
    from gen_agent.server import create_app
    from gen_agent.server._run import ServerThread

    clients = params["clients"]
    script = _script(params["events"], params["stream_s"])
    with gen_agent.AgentSystem() as system:
        with gen_agent.AgentHost(FanAgent, backend=MockBackend, agent_system=system,
                                 name="lib", script=script) as lib:
            library_s = _library_burst(lib, clients)  # the same burst without HTTP
        host = gen_agent.AgentHost(FanAgent, backend=MockBackend, agent_system=system,
                                   name="fan", script=script)
        served = ServerThread(create_app({"fan": host}, env={}, close_hosts=True))
        try:
            with PeakRss() as peak:
                started = time.perf_counter()
                out = subprocess.run(
                    [sys.executable, str(Path(__file__).with_name("_server_clients.py")),
                     served.base_url, str(clients)],
                    capture_output=True, text=True, timeout=300, check=False,
                    env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
                total = time.perf_counter() - started
        finally:
            served.stop()
    if out.returncode != 0:
        raise RuntimeError(f"the client process failed: {out.stderr[-2000:]}")
    result = json.loads(out.stdout)
    result.update(peak_mib=peak.growth_bytes / 2**20, process_s=total, library_s=library_s,
                  expected_deltas=params["events"])
    return result  # type: ignore[no-any-return]


def summarize(reps: list[dict[str, Any]], params: dict[str, Any]) -> list[Figure]:
    if not reps:
        return []
    r = reps[0]
    n = r["clients"]
    return [
        Figure(key="completed", label=f"clients completed of {n:,}", unit="clients",
               value=float(r["completed"]), target=f">= {n}", met=r["completed"] >= n,
               note=f"errors: {', '.join(r['errors']) or 'none'}; deltas per client: "
                    f"{r['deltas']} (expected [{r['expected_deltas']}])"),
        Figure(key="exactly_once", label="clients that saw every event exactly once",
               unit="clients", value=float(r["exactly_once"]), target=f">= {n}",
               met=r["exactly_once"] >= n),
        Figure(key="wall_s", label=f"wall time of {n:,} concurrent 1 s streams", unit="s",
               value=r["wall_s"]),
        Figure(key="library_wall_s", label=f"  the same {n:,} streams through host.aio.stream",
               unit="s", value=r["library_s"], note="in the server's process, no HTTP"),
        Figure(key="client_p50_s", label="per-client time, p50", unit="s",
               value=r["p50_s"]),
        Figure(key="client_p99_s", label="per-client time, p99", unit="s",
               value=r["p99_s"]),
        Figure(key="peak_mib", label="server process peak resident growth", unit="MiB",
               value=r["peak_mib"], note=f"{r['peak_mib'] * 1024 / n:.0f} KiB per client"),
    ]
