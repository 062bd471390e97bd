"""A loopback Anthropic-like streaming server for the HTTP benchmarks, run in its own process
(`python _sse_server.py TTFB_S CHUNKS GAP_S`; it prints its port, then serves until stdin
closes). Every request to `/v1/messages` is answered after `TTFB_S` seconds with a streamed
text reply of `CHUNKS` deltas `GAP_S` seconds apart, chunked, keep-alive. 127.0.0.1 only."""

from __future__ import annotations

import asyncio
import json
import sys


def _frame(event: str, data: object) -> bytes:
    payload = f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()
    return f"{len(payload):x}\r\n".encode() + payload + b"\r\n"


HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\n\r\n")
OPEN = _frame("message_start", {"type": "message_start", "message": {
    "id": "msg_b", "type": "message", "role": "assistant", "model": "claude-bench",
    "content": [], "usage": {"input_tokens": 5, "output_tokens": 1}}}) + _frame(
    "content_block_start", {"type": "content_block_start", "index": 0,
                            "content_block": {"type": "text", "text": ""}})
DELTA = _frame("content_block_delta", {"type": "content_block_delta", "index": 0,
                                       "delta": {"type": "text_delta", "text": "word "}})
CLOSE = (_frame("content_block_stop", {"type": "content_block_stop", "index": 0})
         + _frame("message_delta", {"type": "message_delta",
                                    "delta": {"stop_reason": "end_turn"},
                                    "usage": {"output_tokens": 20}})
         + _frame("message_stop", {"type": "message_stop"}) + b"0\r\n\r\n")


async def main(ttfb_s: float, chunks: int, gap_s: float) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                if length:
                    await reader.readexactly(length)
                await asyncio.sleep(ttfb_s)
                writer.write(HEAD + OPEN)
                for _ in range(chunks):
                    await asyncio.sleep(gap_s)
                    writer.write(DELTA)
                writer.write(CLOSE)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, backlog=8192)
    print(server.sockets[0].getsockname()[1], flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)  # until the parent closes our stdin
    server.close()


if __name__ == "__main__":
    asyncio.run(main(float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])))
