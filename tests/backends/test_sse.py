"""The event-stream decoder of the SDK backends (`_sse.SSEDecoder`), on exact bytes: every
split point of a stream, the three line ends, CR and LF in different reads, data-less frames,
UTF-8 cut by a read, bounds."""

from __future__ import annotations

import pytest

from gen_agent.backends._http.sse import SSEDecoder, SSEFrame, SSEProtocolError

STREAM = (
    b": hello\n"
    b"event: message_start\ndata: {\"a\": 1}\n\n"
    b"id: 4\n\n"
    b"retry: 100\n\n"
    b"event: ping\n\n"
    b"data: {\"text\": \"caf\xc3\xa9 \xe2\x98\x83\"}\n\n"
    b"event: multi\ndata: line one\ndata:line two\nid: 5\n\n"
)
FRAMES = [
    SSEFrame("message_start", '{"a": 1}'),
    SSEFrame("message", '{"text": "caf\u00e9 \u2603"}'),
    SSEFrame("multi", "line one\nline two"),
]


def decode(chunks: list[bytes]) -> list[SSEFrame]:
    decoder = SSEDecoder()
    frames = [frame for piece in chunks for frame in decoder.feed(piece)]
    decoder.finish()
    return frames


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
def test_every_split_point_gives_the_same_frames(eol: bytes) -> None:
    stream = STREAM.replace(b"\n", eol)
    assert decode([stream]) == FRAMES
    for cut in range(1, len(stream)):
        assert decode([stream[:cut], stream[cut:]]) == FRAMES, cut
    assert decode([stream[i : i + 1] for i in range(len(stream))]) == FRAMES


def test_a_cr_and_its_lf_in_different_reads_end_one_line() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"event: a\r") == []
    assert decoder.feed(b"\ndata: 1\r") == []
    assert decoder.feed(b"\n\r") == [SSEFrame("a", "1")]
    assert decoder.feed(b"\n") == []  # the LF of that CR, not another blank line
    assert decoder.feed(b"data: 2\n\n") == [SSEFrame("message", "2")]


def test_frames_without_data_dispatch_nothing_and_reset_the_event_type() -> None:
    assert decode([b"event: x\n\ndata: 1\n\n"]) == [SSEFrame("message", "1")]
    assert decode([b"id: 1\n\nretry: 5\n\n:comment\n\n\n\n"]) == []


def test_a_frame_the_stream_ended_inside_is_dropped() -> None:
    assert decode([b"data: 1\n\ndata: {\"cut\": \"caf\xc3"]) == [SSEFrame("message", "1")]
    assert decode([b"data: 1\n\ndata: 2\n"]) == [SSEFrame("message", "1")]


def test_a_line_that_is_not_utf8_and_over_long_lines_are_protocol_errors() -> None:
    with pytest.raises(SSEProtocolError, match="UTF-8"):
        SSEDecoder().feed(b"data: \xff\n")
    with pytest.raises(SSEProtocolError, match="exceeds 8 bytes"):
        SSEDecoder(max_frame_bytes=8).feed(b"data: 123456789")
    decoder = SSEDecoder(max_frame_bytes=16)
    decoder.feed(b"data: 12345678\n")
    with pytest.raises(SSEProtocolError, match="frame exceeds 16 bytes"):
        decoder.feed(b"data: 12345678\n")


def test_a_field_without_colon_and_values_without_the_space() -> None:
    assert decode([b"data\n\ndata:x\n\n"]) == [SSEFrame("message", ""), SSEFrame("message", "x")]


@pytest.mark.parametrize("chunk_bytes", [1000, 16384, 1 << 20])
def test_a_huge_event_in_many_reads_is_one_frame_with_every_byte(chunk_bytes: int) -> None:
    # 8 MB of multi-byte text (split characters at most read boundaries), CRLF line ends,
    # between two small events; the time this takes is measured in benchmarks/sse_decoding.
    text = ("caf\u00e9 \u2603 " * (8 * 1024 * 1024 // 12)).encode()
    stream = (b"data: {\"first\": 1}\r\n\r\nevent: big\r\ndata: " + text + b"\r\ndata: tail"
              b"\r\n\r\ndata: {\"last\": 2}\r\n\r\n")
    chunks = [stream[i : i + chunk_bytes] for i in range(0, len(stream), chunk_bytes)]

    frames = decode(chunks)

    assert [f.event for f in frames] == ["message", "big", "message"]
    assert frames[1].data == text.decode() + "\ntail"
    assert (frames[0].data, frames[2].data) == ('{"first": 1}', '{"last": 2}')


def test_a_line_growing_past_the_bound_across_reads_is_refused() -> None:
    decoder = SSEDecoder(max_frame_bytes=1000)
    for _ in range(9):
        assert decoder.feed(b"x" * 100) == []
    with pytest.raises(SSEProtocolError, match="line exceeds 1000 bytes"):
        decoder.feed(b"x" * 101)
