"""The agent server (issue 39): a streamed loopback-HTTP turn through `POST /v1/responses`
(the official openai SDK, `stream=True`, read to its last event) against the same turn
through the library (`host.stream`, read to its last event), and against a bare
Starlette/uvicorn endpoint that streams the same SSE bytes to the same client (the limit
of any Starlette server).

The agent is an `AnthropicAPI` agent on the embedded `ScriptedModelServer` (127.0.0.1), on
one live key. Figures per round: the three p50 latencies, and `server_added`, the server's
p50 minus the library's p50 in the same round (target: <= 1 ms). The SDK's HTTP client
sets TCP_NODELAY (see `setup`), as any latency-minded client must.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import gen_agent

from ._common import BenchAgent
from ._harness import Measured, Ratio, figure, latency_us, time_calls_us

NAME = "server"
TITLE = "Agent server: Responses API turn vs library turn vs bare Starlette"
ORDER = 77
FULL: dict[str, Any] = {"calls": 200, "rounds": 5}
SMOKE: dict[str, Any] = {"calls": 3, "rounds": 2}
README = ("server_added", "server_stream_vs_bare_stream")


def _bare_app(payload: bytes) -> Any:
    from starlette.applications import Starlette
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    chunks = [chunk + b"\n\n" for chunk in payload.split(b"\n\n") if chunk]

    async def respond(request: Any) -> Any:
        await request.body()

        async def events() -> Any:
            for chunk in chunks:
                yield chunk

        return StreamingResponse(events(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/v1/responses", respond, methods=["POST"])])
    return app


@contextmanager
def setup(params: dict[str, Any]) -> Iterator[dict[str, Any]]:
    import socket

    import httpx
    import openai
    import uvicorn

    from gen_agent.backends.anthropic import AnthropicAPI
    from gen_agent.server import create_app
    from gen_agent.server._run import ServerThread
    from gen_agent.testing import Reply, ScriptedModelServer

    with gen_agent.AgentSystem() as system, \
            ScriptedModelServer(default=Reply.text("ok")) as model:
        host = gen_agent.AgentHost(
            BenchAgent, backend=AnthropicAPI, agent_system=system, name="bench",
            backend_opts={"base_url": model.url, "api_key": "bench", "model": "bench-model",
                          "max_history_messages": 2})
        served = ServerThread(create_app({"bench": host}, env={}))
        # TCP_NODELAY: httpx sends a request's head and body in two writes; with Nagle on,
        # the second waits for the delayed ACK of the first (~40 ms on Linux loopback).
        def http() -> Any:
            return httpx.Client(transport=httpx.HTTPTransport(socket_options=[
                (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]), timeout=30)

        client = openai.OpenAI(base_url=served.base_url + "/v1", api_key="-", max_retries=0,
                               http_client=http())
        first = client.responses.create(model="bench", input="warm", conversation="srv")
        # The bare endpoint streams the bytes the server streamed for one turn.
        with httpx.stream("GET", f"{served.base_url}/v1/responses/{first.id}?stream=true",
                          timeout=30) as raw:
            payload = raw.read()
        import threading

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        bare = uvicorn.Server(uvicorn.Config(_bare_app(payload), log_config=None,
                                             access_log=False, lifespan="off", ws="none",
                                             loop="asyncio"))
        thread = threading.Thread(target=bare.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        while not bare.started:
            thread.join(0.01)
        bare_client = openai.OpenAI(base_url=f"http://127.0.0.1:{sock.getsockname()[1]}/v1",
                                    api_key="-", max_retries=0, http_client=http())
        host.ask("lib", "warm", timeout=30)
        env = {"host": host, "client": client, "bare": bare_client, "notes": {}}
        try:
            yield env
        finally:
            client.close()
            bare_client.close()
            bare.should_exit = True
            thread.join(10)
            sock.close()
            served.stop()
            host.close()


def _library(env: dict[str, Any]) -> None:
    with env["host"].stream("lib", "x", timeout=30) as turn:
        for _event in turn:
            pass
        turn.response  # noqa: B018 - the outcome, as a client reads it


def _server(env: dict[str, Any]) -> None:
    for _event in env["client"].responses.create(model="bench", input="x",
                                                 conversation="srv", stream=True):
        pass


def _bare(env: dict[str, Any]) -> None:
    for _event in env["bare"].responses.create(model="bench", input="x", stream=True):
        pass


@figure(unit="us", label="library: host.stream, a loopback AnthropicAPI turn")
def library_stream(env: dict[str, Any], params: dict[str, Any]) -> Measured:
    return latency_us(time_calls_us(lambda: _library(env), params["calls"]))


@figure(unit="us", label="server: POST /v1/responses stream (openai SDK), same turn",
        peer="library_stream")
def server_stream(env: dict[str, Any], params: dict[str, Any]) -> Measured:
    return latency_us(time_calls_us(lambda: _server(env), params["calls"]))


@figure(unit="us", label="bare Starlette/uvicorn: the same SSE bytes, same client")
def bare_stream(env: dict[str, Any], params: dict[str, Any]) -> Measured:
    return latency_us(time_calls_us(lambda: _bare(env), params["calls"]))


@figure(unit="us", label="server adds per turn (server p50 - library p50, same round)",
        target="<= 1000")
def server_added(env: dict[str, Any], params: dict[str, Any]) -> Measured:
    lib = latency_us(time_calls_us(lambda: _library(env), params["calls"]))
    srv = latency_us(time_calls_us(lambda: _server(env), params["calls"]))
    return Measured(srv.value - lib.value, {"library_us": lib.value, "server_us": srv.value})


RATIOS = [Ratio("server_stream", "bare_stream", None,
                label="server / bare Starlette streaming the same events")]
