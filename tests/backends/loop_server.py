"""`LoopServer`: a loopback HTTP/1.1 server on one asyncio loop (its own thread) that answers
every request with one canned Anthropic (`/v1/messages`) or OpenAI (`/v1/responses`) text reply,
for the tests with many agents (a thread per connection would not do at 1,000).

It counts what the tests assert on: the TCP connections it accepted (`connections`), the
connections still open (`open`), the requests (`requests`) and the most requests it held at
once (`peak`). `delay_s` waits before the answer's head (a request "in flight"). Only 127.0.0.1
is bound.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

__all__ = ["LoopServer", "anthropic_body", "openai_body"]


def _frame(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def anthropic_body(text: str = "hi") -> bytes:
    """An Anthropic Messages API streamed text reply (the SSE body)."""
    return b"".join([
        _frame("message_start", {"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
            "content": [], "usage": {"input_tokens": 5, "output_tokens": 1}}}),
        _frame("content_block_start", {"type": "content_block_start", "index": 0,
                                       "content_block": {"type": "text", "text": ""}}),
        _frame("content_block_delta", {"type": "content_block_delta", "index": 0,
                                       "delta": {"type": "text_delta", "text": text}}),
        _frame("content_block_stop", {"type": "content_block_stop", "index": 0}),
        _frame("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                                 "usage": {"output_tokens": 9}}),
        _frame("message_stop", {"type": "message_stop"}),
    ])


def openai_body(text: str = "hi") -> bytes:
    """An OpenAI Responses API streamed text reply (the SSE body)."""
    response = {"id": "resp_1", "object": "response", "status": "in_progress",
                "model": "gpt-test", "output": []}
    done = {**response, "status": "completed",
            "usage": {"input_tokens": 4, "output_tokens": 6, "total_tokens": 10}}
    return b"".join([
        _frame("response.created", {"type": "response.created", "response": response}),
        _frame("response.output_text.delta", {"type": "response.output_text.delta",
                                              "item_id": "m", "output_index": 0,
                                              "content_index": 0, "delta": text}),
        _frame("response.completed", {"type": "response.completed", "response": done}),
    ])


class LoopServer:
    """A loopback server answering every request at once (or after `delay_s` seconds).

    Args:
        delay_s: wait before each answer (seconds).
        status: the HTTP status of every answer (an error status answers a JSON error).
        headers: extra response headers (e.g. `{"retry-after": "30"}`).

    Attributes (read them any time): `url`, `connections`, `open`, `requests`, `peak`.
    """

    def __init__(self, delay_s: float = 0.0, status: int = 200,
                 headers: dict[str, str] | None = None) -> None:
        self.delay_s = delay_s
        self.status = status
        self.headers = dict(headers or {})
        self.connections = 0
        self.open = 0
        self.requests = 0
        self.in_flight = 0
        self.peak = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._server: Any = None
        self._thread = threading.Thread(target=self._run, name="loop-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the loop server did not start")
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def start() -> None:
            self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, backlog=4096)
            self._ready.set()

        self._loop.run_until_complete(start())
        self._loop.run_forever()
        self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                path = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b"/"
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                if length:
                    await reader.readexactly(length)
                self.requests += 1
                self.in_flight += 1
                self.peak = max(self.peak, self.in_flight)
                try:
                    if self.delay_s:
                        await asyncio.sleep(self.delay_s)
                finally:
                    self.in_flight -= 1
                writer.write(self._answer(path))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            # `close()` ends the connection: end normally, so asyncio's own done-callback
            # of the connection (which reads the task's exception) has nothing to log.
            pass
        finally:
            self.open -= 1
            writer.close()

    def _answer(self, path: bytes) -> bytes:
        extra = "".join(f"{k}: {v}\r\n" for k, v in self.headers.items())
        if self.status >= 400:
            body = json.dumps({"type": "error", "error": {"type": "rate_limit_error",
                                                          "message": "slow down"}}).encode()
            return (f"HTTP/1.1 {self.status} X\r\ncontent-type: application/json\r\n{extra}"
                    f"content-length: {len(body)}\r\n\r\n").encode() + body
        body = openai_body() if path.endswith(b"/responses") else anthropic_body()
        return (f"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n{extra}"
                f"content-length: {len(body)}\r\n\r\n").encode() + body

    def close(self) -> None:
        """Stop serving and close every connection; joins the loop's thread."""
        async def stop() -> None:
            self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> LoopServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
