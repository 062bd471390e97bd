"""Web chat: one supervised agent per chat session, each turn streamed to the browser as SSE.

A small Starlette app (ASGI; run by uvicorn) hosting long-lived agents:

- `POST /sessions` starts a chat agent under the app's `Supervisor` (restart "transient": a
  crashed session restarts, a closed one does not) and answers `{"session": id}`;
- `POST /sessions/{id}/messages` with `{"text": ...}` runs one turn and streams it back as
  server-sent events: `event: text` per text chunk, then `event: done` (with the usage) or
  `event: error` (with the reason), read from `gen_agent.aio.stream` without ever blocking
  the event loop; a browser that disconnects leaves the stream, which interrupts the turn;
- `DELETE /sessions/{id}` stops the agent; `GET /` serves a minimal page to try it.

Run it (needs `pip install 'gen-agent[docs]'`, included in the `test` extra), then open
http://127.0.0.1:8000/:

    python docs/examples/guide/web_chat.py              # MockBackend answering with fake_model
    python docs/examples/guide/web_chat.py --port 8001

On a real provider, pass its backend and options to `make_app` instead, e.g.
`make_app(AnthropicAPI, {"model": "claude-sonnet-4-5"})`: nothing else changes.

Only loopback by default (`--host` to change it). Stop with Ctrl-C: the supervisor stops every
session agent.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

import gen_agent
from gen_agent import GenAgent, NoReply, Supervisor, aio, child_spec
from gen_agent._errors import AgentDown, AgentNotFound, RequestError, TurnError
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend


def fake_model(prompt: str) -> str:
    """The offline stand-in for a model: a short, deterministic reply."""
    return f"You said: {prompt}. Noted, and thank you."


class ChatAgent(GenAgent):
    """One chat session: the conversation lives in the backend session; the state counts
    turns."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return dict(opts["backend_opts"]), {"turns": 0}

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return NoReply({"turns": state["turns"] + 1})


def _sse(event: str, data: Any) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + msgspec.json.encode(data) + b"\n\n"


def _reason(reason: Any) -> str:
    return reason if isinstance(reason, str) else str(getattr(reason, "kind", None)
                                                        or type(reason).__name__)


# --8<-- [start:turn-events]
async def _turn_events(name: Any, text: str) -> AsyncIterator[bytes]:
    try:
        async with aio.stream(name, text) as turn:
            async for event in turn:
                if event.kind == "text":
                    yield _sse("text", {"text": event.data.get("text", "")})
            response = await turn.response()
        yield _sse("done", {"usage": response.usage, "duration_ms": response.duration_ms})
    except TurnError as exc:
        yield _sse("error", {"reason": _reason(exc.reason)})
    except (AgentDown, AgentNotFound):
        yield _sse("error", {"reason": "session_gone"})
# --8<-- [end:turn-events]


PAGE = """<!doctype html><meta charset="utf-8"><meta name="viewport"
content="width=device-width"><title>gen_agent chat</title>
<form id="f"><input id="t" autofocus placeholder="Say something"><button>Send</button></form>
<pre id="log"></pre><script>
let session = null; const log = document.getElementById("log");
document.getElementById("f").onsubmit = async (e) => {
  e.preventDefault();
  if (!session) session = (await (await fetch("sessions", {method: "POST"})).json()).session;
  const text = document.getElementById("t").value; log.textContent += "> " + text + "\\n";
  const r = await fetch(`sessions/${session}/messages`, {method: "POST",
    headers: {"content-type": "application/json"}, body: JSON.stringify({text})});
  const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
  for (let buf = ""; ;) {
    const {value, done} = await reader.read(); if (done) break; buf += value;
    let i; while ((i = buf.indexOf("\\n\\n")) >= 0) {
      const frame = buf.slice(0, i); buf = buf.slice(i + 2);
      const kind = frame.match(/^event: (.*)$/m)[1];
      const data = JSON.parse(frame.match(/^data: (.*)$/m)[1]);
      log.textContent += kind === "text" ? data.text : "\\n[" + kind + "]\\n";
    }
  }
};
</script>"""


def make_app(backend: Any, backend_opts: dict[str, Any]) -> Starlette:
    """The chat app: every session an agent `("chat", id)` under one `Supervisor`, started at
    app start-up and stopped at shutdown (its agents with it)."""
    state: dict[str, Supervisor] = {}

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        state["sup"] = await asyncio.to_thread(Supervisor, [], strategy="one_for_one",
                                               max_restarts=3, max_seconds=5)
        try:
            yield
        finally:
            await asyncio.to_thread(state["sup"].stop)

    async def page(_request: Request) -> Response:
        return HTMLResponse(PAGE)

    async def new_session(_request: Request) -> Response:
        session = uuid.uuid4().hex
        spec = child_spec(ChatAgent, name=("chat", session), backend=backend,
                          restart="transient", backend_opts=backend_opts)
        # starting an agent runs its init_agent in the agent's thread; wait off the loop
        await asyncio.to_thread(state["sup"].start_child, spec)
        return JSONResponse({"session": session})

    async def message(request: Request) -> Response:
        name = ("chat", request.path_params["session"])
        if gen_agent.whereis(name) is None:
            return JSONResponse({"error": "no such session"}, status_code=404)
        body = await request.json()
        text = body.get("text") if isinstance(body, dict) else None
        if not isinstance(text, str) or not text:
            return JSONResponse({"error": "text must be a non-empty string"}, status_code=400)
        return StreamingResponse(_turn_events(name, text), media_type="text/event-stream")

    async def close(request: Request) -> Response:
        session = request.path_params["session"]
        try:
            await asyncio.to_thread(state["sup"].terminate_child, ("chat", session))
            await asyncio.to_thread(state["sup"].delete_child, ("chat", session))
        except RequestError as exc:  # "not_found": no such session
            return JSONResponse({"error": str(exc.reason)}, status_code=404)
        return Response(status_code=204)

    return Starlette(lifespan=lifespan, routes=[
        Route("/", page),
        Route("/sessions", new_session, methods=["POST"]),
        Route("/sessions/{session}/messages", message, methods=["POST"]),
        Route("/sessions/{session}", close, methods=["DELETE"]),
    ])


def mock_options(turns: int = 1000) -> dict[str, Any]:
    """`MockBackend` options answering each prompt with `fake_model`, word by word."""

    def script(prompt: str) -> list[Any]:
        return mock.text_turn([word + " " for word in fake_model(prompt).split()])

    return {"scripts": [script] * turns}


def main(argv: Sequence[str] | None = None) -> None:
    """Serve the chat app with uvicorn until Ctrl-C."""
    import uvicorn

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    print(f"chat on http://{args.host}:{args.port}/", file=sys.stderr)
    uvicorn.run(make_app(MockBackend, mock_options()), host=args.host, port=args.port,
                log_level="warning")


if __name__ == "__main__":
    main()
