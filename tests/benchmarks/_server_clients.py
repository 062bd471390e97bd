"""The client side of `server_fanout`: N concurrent streaming `POST /v1/responses` from one
asyncio process (httpx), each on its own conversation. Prints one JSON object.

Usage: python _server_clients.py URL N
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import httpx


async def one(client: httpx.AsyncClient, url: str, i: int, start: asyncio.Event) -> dict[str, Any]:
    await start.wait()
    began = time.perf_counter()
    numbers: list[int] = []
    kinds: list[str] = []
    deltas = 0
    async with client.stream("POST", url + "/v1/responses",
                             json={"model": "fan", "input": f"go {i}", "stream": True,
                                   "conversation": f"c{i}"}) as answer:
        status = answer.status_code
        async for line in answer.aiter_lines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                numbers.append(event["sequence_number"])
                kinds.append(event["type"])
                deltas += event["type"] == "response.output_text.delta"
    return {"status": status, "s": time.perf_counter() - began, "numbers": numbers,
            "last": kinds[-1] if kinds else None, "deltas": deltas}


async def main(url: str, n: int) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(limits=limits, timeout=120) as client:
        start = asyncio.Event()
        tasks = [asyncio.create_task(one(client, url, i, start)) for i in range(n)]
        began = time.perf_counter()
        start.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        wall = time.perf_counter() - began
    ok = [r for r in results if isinstance(r, dict) and r["status"] == 200
          and r["last"] == "response.completed"]
    exactly_once = [r for r in ok if r["numbers"] == list(range(1, len(r["numbers"]) + 1))]
    times = sorted(r["s"] for r in ok)
    return {"clients": n, "completed": len(ok), "exactly_once": len(exactly_once),
            "errors": sorted({type(r).__name__ for r in results if isinstance(r, BaseException)}),
            "deltas": sorted({r["deltas"] for r in ok}), "wall_s": wall,
            "p50_s": times[len(times) // 2] if times else None,
            "p99_s": times[min(len(times) - 1, int(len(times) * 0.99))] if times else None}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], int(sys.argv[2])))))
