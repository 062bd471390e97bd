"""A raw HTTP/1.1 server on a loopback socket for the stream-fault tests: each request is
answered by a script of exact byte writes, waits and cuts (FIN, RST), so a test states the
bytes on the wire instead of trusting a framework to produce them.

Nothing here parses or validates more than the tests need: a request is its head and its
`Content-Length` body; the connection is kept open for the next request unless the script
cuts it. Only 127.0.0.1 is ever bound.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
from collections import deque
from collections.abc import Iterable
from typing import Any

__all__ = [
    "FIN",
    "RST",
    "Hold",
    "Pings",
    "RawServer",
    "anthropic_events",
    "chunk",
    "chunked_head",
    "frame",
    "openai_events",
]


class _Cut:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


FIN = _Cut("FIN")
"""Close the connection in order (the peer reads EOF)."""

RST = _Cut("RST")
"""Reset the connection (SO_LINGER 0, then close: the peer reads ECONNRESET)."""


class Hold:
    """Wait until `event` is set (or the server stops) before the next write."""

    def __init__(self, event: threading.Event | None = None) -> None:
        self.event = event or threading.Event()


class Pings:
    """Write `data` every `interval_s` seconds until the server stops or the peer is gone."""

    def __init__(self, data: bytes, interval_s: float = 0.05) -> None:
        self.data = data
        self.interval_s = interval_s


def chunked_head(status: int = 200, content_type: str = "text/event-stream") -> bytes:
    """A response head with chunked transfer encoding (as the APIs stream)."""
    return (
        f"HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\n"
        "transfer-encoding: chunked\r\n\r\n"
    ).encode()


def chunk(data: bytes) -> bytes:
    """One HTTP chunk carrying `data` (`b""` is the last chunk)."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def frame(event: str | None, data: Any, *, eol: bytes = b"\n") -> bytes:
    """One SSE frame: `event:` (if given) and a JSON (or given bytes) `data:` line."""
    payload = data if isinstance(data, bytes) else json.dumps(data, ensure_ascii=False).encode()
    head = b"event: " + event.encode() + eol if event is not None else b""
    return head + b"data: " + payload + eol + eol


def anthropic_events(
    text_parts: Iterable[str], *, message_id: str = "msg_1", stop_reason: str = "end_turn"
) -> list[bytes]:
    """The frames of a Messages API text reply, one per event."""
    frames = [
        frame("message_start", {"type": "message_start", "message": {
            "id": message_id, "type": "message", "role": "assistant", "model": "claude-test",
            "content": [], "stop_reason": None,
            "usage": {"input_tokens": 5, "output_tokens": 1}}}),
        frame("content_block_start", {"type": "content_block_start", "index": 0,
                                      "content_block": {"type": "text", "text": ""}}),
    ]
    for part in text_parts:
        frames.append(frame("content_block_delta", {
            "type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": part}}))
    frames += [
        frame("content_block_stop", {"type": "content_block_stop", "index": 0}),
        frame("message_delta", {"type": "message_delta",
                                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                                "usage": {"output_tokens": 9}}),
        frame("message_stop", {"type": "message_stop"}),
    ]
    return frames


def openai_events(text_parts: Iterable[str], *, response_id: str = "resp_1") -> list[bytes]:
    """The frames of a Responses API text reply, one per event."""
    response = {"id": response_id, "object": "response", "status": "in_progress",
                "model": "gpt-test", "output": []}
    frames = [frame("response.created", {"type": "response.created", "response": response})]
    for part in text_parts:
        frames.append(frame("response.output_text.delta", {
            "type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0,
            "content_index": 0, "delta": part}))
    done = {**response, "status": "completed",
            "usage": {"input_tokens": 4, "output_tokens": 6, "total_tokens": 10}}
    frames.append(frame("response.completed", {"type": "response.completed", "response": done}))
    return frames


class RawServer:
    """A loopback HTTP/1.1 server answering each request with the next queued script.

    A script is a list of steps: `bytes` (written at once), `Hold` (wait for its event),
    `Pings` (keep writing until the server stops), `FIN` or `RST` (end the connection).
    A script that does not cut leaves the connection open for the next request.

    Attributes:
        url: `http://127.0.0.1:PORT`.
        connections: how many TCP connections were accepted (count).
        closed: how many of them the client closed or the server cut (count).
        bodies: the JSON body of every request, in order.
    """

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self.connections = 0
        self.closed = 0
        self.bodies: list[Any] = []
        self._scripts: deque[list[Any]] = deque()
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []
        self._acceptor = threading.Thread(target=self._accept, name="raw-server", daemon=True)
        self._acceptor.start()

    def enqueue(self, *scripts: list[Any]) -> None:
        """Queue the scripts that answer the next requests, in order."""
        with self._lock:
            self._scripts.extend(scripts)

    def close(self) -> None:
        """Stop: release every hold, close every connection, join every thread."""
        self._stopped.set()
        with self._lock:
            holds = [step for script in self._scripts for step in script if isinstance(step, Hold)]
            conns = list(self._conns)
        for hold in holds:
            hold.event.set()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept() (Linux)
        self._sock.close()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for thread in [self._acceptor, *self._threads]:
            thread.join(5.0)

    def __enter__(self) -> RawServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- inside --------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as API servers do
            with self._lock:
                self.connections += 1
                self._conns.append(conn)
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        buffer = b""
        try:
            while not self._stopped.is_set():
                request, buffer = self._read_request(conn, buffer)
                if request is None:
                    return
                with self._lock:
                    self.bodies.append(request)
                    script = self._scripts.popleft() if self._scripts else [
                        chunked_head(500, "application/json"), chunk(b'{"error": "no script"}'),
                        chunk(b"")]
                if not self._play(conn, script):
                    return
        except OSError:
            return
        finally:
            conn.close()
            with self._lock:
                self.closed += 1

    def _read_request(self, conn: socket.socket, buffer: bytes) -> tuple[Any, bytes]:
        while b"\r\n\r\n" not in buffer:
            data = conn.recv(65536)
            if not data:
                return None, b""
            buffer += data
        head, _, buffer = buffer.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(buffer) < length:
            data = conn.recv(65536)
            if not data:
                return None, b""
            buffer += data
        body, buffer = buffer[:length], buffer[length:]
        return (json.loads(body) if body else None), buffer

    def _play(self, conn: socket.socket, script: list[Any]) -> bool:
        """Run a script; False once the connection is gone."""
        for step in script:
            if isinstance(step, bytes):
                conn.sendall(step)
            elif isinstance(step, Hold):
                while not step.event.wait(0.05):
                    if self._stopped.is_set():
                        return False
            elif isinstance(step, Pings):
                while not self._stopped.wait(step.interval_s):
                    conn.sendall(step.data)
                return False
            elif step is FIN:
                conn.shutdown(socket.SHUT_WR)
                return False
            elif step is RST:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return False
        return True
