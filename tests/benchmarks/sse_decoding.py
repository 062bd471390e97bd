"""12. SSE decoding: the HTTP backends' event-stream decoder on one huge event (issue 33).

The SDK backends read every streamed reply through `gen_agent.backends._http.sse.SSEDecoder`
(private: this module is its benchmark). One event of `large_mb` MB (a `data:` line of that
many bytes, then its blank line) is fed in `chunk_bytes` pieces, as a socket delivers it, and
decoded to its one frame; the same for `small_mb` MB. Values: wall time of the decode (ms);
building the body and slicing it into chunks are untimed.

- `large_event` (headline): the 16 MB event; target < 1000 ms ("well under a second").
- `small_event`: the 1 MB event; the ratio `large_event / small_event` shows the decoder
  linear in the event's size (16 for linear, 256 for quadratic; target <= 32).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gen_agent.backends._http.sse import SSEDecoder

from ._harness import Ratio, Target, figure

NAME = "sse_decoding"
TITLE = "12. SSE decoding (one huge event, fed in socket-sized chunks)"
ORDER = 120
README = ("large_event", "large_event_vs_small_event")
FULL: dict[str, Any] = {"small_mb": 1, "large_mb": 16, "chunk_bytes": 16384, "rounds": 5}
SMOKE: dict[str, Any] = {"small_mb": 0.05, "large_mb": 0.8, "chunk_bytes": 16384, "rounds": 2}


def _chunks(megabytes: float, chunk_bytes: int) -> list[bytes]:
    body = b"event: content_block_delta\ndata: " + b"a" * int(megabytes * 1e6) + b"\n\n"
    return [body[i : i + chunk_bytes] for i in range(0, len(body), chunk_bytes)]


@contextmanager
def setup(params: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Both bodies, already cut into chunks."""
    yield {"small": _chunks(params["small_mb"], params["chunk_bytes"]),
           "large": _chunks(params["large_mb"], params["chunk_bytes"]),
           "limit": int(params["large_mb"] * 1e6) + 1024}


def _decode_ms(chunks: list[bytes], limit: int, megabytes: float) -> float:
    gc.collect()
    decoder = SSEDecoder(max_frame_bytes=max(limit, 16 * 1024 * 1024))
    started = time.perf_counter()
    frames = [frame for chunk in chunks for frame in decoder.feed(chunk)]
    elapsed_ms = (time.perf_counter() - started) * 1000
    if len(frames) != 1 or len(frames[0].data) != int(megabytes * 1e6):
        raise AssertionError(f"decoded {len(frames)} frames, not the one event")
    return elapsed_ms


@figure(unit="ms", label="one 16 MB event", target="< 1000")
def large_event(env: dict[str, Any], params: dict[str, Any]) -> float:
    """The large event, decoded."""
    return _decode_ms(env["large"], env["limit"], params["large_mb"])


@figure(unit="ms", label="one 1 MB event")
def small_event(env: dict[str, Any], params: dict[str, Any]) -> float:
    """The small event, decoded."""
    return _decode_ms(env["small"], env["limit"], params["small_mb"])


RATIOS = [Ratio("large_event", "small_event", Target.parse("<= 32"),
                label="16 MB / 1 MB (linear: 16)")]
