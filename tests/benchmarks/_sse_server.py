"""A loopback streaming model server for the HTTP benchmarks, run in its own process
(`python _sse_server.py TTFB_S CHUNKS GAP_S`; it prints its port, then serves until stdin
closes). Every request is answered after `TTFB_S` seconds with a streamed text reply of
`CHUNKS` deltas `GAP_S` seconds apart, chunked, keep-alive, in the protocol its path names:
`POST /v1/responses` in the OpenAI Responses protocol (the event shapes of
`gen_agent.testing._openai_protocol`: `response.created`, a `message` item streamed as
`response.output_text.delta`s, `response.completed` with usage), any other path (the
Anthropic `/v1/messages`) in the Anthropic Messages protocol. 127.0.0.1 only. Standalone: it
imports nothing of gen_agent, so the frames are built once here."""

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



def _event(kind: str, sequence: int, **fields: object) -> bytes:
    return _frame(kind, {"type": kind, "sequence_number": sequence, **fields})


def _openai_frames(chunks: int) -> tuple[bytes, bytes, bytes]:
    """(OPEN, DELTA, CLOSE) of an OpenAI Responses stream of `chunks` `"word "` deltas (the
    sequence numbers of the deltas are all that of the first: the clients do not check)."""
    where = {"item_id": "msg_b", "output_index": 0, "content_index": 0}
    item = {"id": "msg_b", "type": "message", "status": "in_progress", "role": "assistant"}
    text = "word " * chunks
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    done_item = {**item, "status": "completed", "content": [part]}

    def response(status: str, output: list[object], usage: object) -> dict[str, object]:
        return {"id": "resp_b", "object": "response", "created_at": 0, "status": status,
                "model": "gpt-bench", "output": output, "instructions": None,
                "previous_response_id": None, "store": False, "parallel_tool_calls": True,
                "tool_choice": "auto", "tools": [], "error": None,
                "incomplete_details": None, "usage": usage}

    usage = {"input_tokens": 5, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": 25}
    opening = (_event("response.created", 0, response=response("in_progress", [], None))
               + _event("response.in_progress", 1, response=response("in_progress", [], None))
               + _event("response.output_item.added", 2, output_index=0,
                        item={**item, "content": []})
               + _event("response.content_part.added", 3, **where,
                        part={**part, "text": ""}))
    delta = _event("response.output_text.delta", 4, **where, delta="word ", logprobs=[])
    closing = (_event("response.output_text.done", 5, **where, text=text, logprobs=[])
               + _event("response.content_part.done", 6, **where, part=part)
               + _event("response.output_item.done", 7, output_index=0, item=done_item)
               + _event("response.completed", 8,
                        response=response("completed", [done_item], usage))
               + b"0\r\n\r\n")
    return opening, delta, closing


async def main(ttfb_s: float, chunks: int, gap_s: float) -> None:
    frames = {b"/v1/responses": _openai_frames(chunks)}
    anthropic = (OPEN, DELTA, CLOSE)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b""
                opening, delta, closing = frames.get(path, anthropic)
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                if length:
                    await reader.readexactly(length)
                await asyncio.sleep(ttfb_s)
                writer.write(HEAD + opening)
                for _ in range(chunks):
                    await asyncio.sleep(gap_s)
                    writer.write(delta)
                writer.write(closing)
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
