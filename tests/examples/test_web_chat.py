"""The web chat example (docs/examples/guide/web_chat.py): a real uvicorn server on 127.0.0.1, read
with a real HTTP client (httpx), every turn streamed as server-sent events."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import msgspec
import pytest
import uvicorn

import gen_agent
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend

from ._loader import load_example

web_chat = load_example("guide/web_chat")


@pytest.fixture
def served() -> Iterator[tuple[str, Any]]:
    """The app on a real uvicorn server on 127.0.0.1: (base URL, the gate of the 3rd turn)."""
    held = mock.gate(mock.text_turn(["slow ", "reply"]), timeout=5.0)
    scripts = [
        lambda prompt: mock.text_turn(["You said: ", prompt, "."]),
        mock.error_turn("rate_limited"),
        held,
    ]
    app = web_chat.make_app(MockBackend, {"scripts": scripts})
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                           lifespan="on"))
    thread = threading.Thread(target=server.run, name="test-uvicorn")
    thread.start()
    try:
        started = threading.Event()
        for _ in range(500):
            if server.started:
                started.set()
                break
            threading.Event().wait(0.01)
        assert started.is_set(), "uvicorn did not start"
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}", held
    finally:
        held.release()
        server.should_exit = True
        thread.join(10)


def _frames(response: httpx.Response) -> list[tuple[str, Any]]:
    frames = []
    for block in response.text.split("\n\n"):
        if block.strip():
            lines = dict(line.split(": ", 1) for line in block.splitlines())
            frames.append((lines["event"], msgspec.json.decode(lines["data"])))
    return frames


def test_a_session_streams_its_turns_and_ends_cleanly(served: tuple[str, Any]) -> None:
    base_url, _held = served
    with httpx.Client(base_url=base_url, timeout=10) as client:
        assert "gen_agent chat" in client.get("/").text
        session = client.post("/sessions").json()["session"]
        name = ("chat", session)
        assert gen_agent.whereis(name) is not None

        with client.stream("POST", f"/sessions/{session}/messages",
                           json={"text": "hello"}) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            chunks = [chunk for chunk in response.iter_text()]
        frames = _frames(httpx.Response(200, text="".join(chunks)))
        assert frames[:3] == [("text", {"text": "You said: "}), ("text", {"text": "hello"}),
                              ("text", {"text": "."})]
        assert frames[3][0] == "done"
        assert gen_agent.status(name).agent_state == {"turns": 1}

        failed = _frames(client.post(f"/sessions/{session}/messages", json={"text": "again"}))
        assert failed == [("error", {"reason": "rate_limited"})]

        assert client.post(f"/sessions/{session}/messages", json={}).status_code == 400
        assert client.post("/sessions/nope/messages", json={"text": "x"}).status_code == 404
        assert MockBackend.history(name) == ["hello", "again"]
        assert client.delete(f"/sessions/{session}").status_code == 204
        assert gen_agent.whereis(name) is None
        assert client.delete(f"/sessions/{session}").status_code == 404


def test_a_client_that_disconnects_interrupts_the_turn(served: tuple[str, Any]) -> None:
    base_url, held = served
    errors: list[Any] = []
    interrupted = threading.Event()

    def on_error(_name: Any, _measurements: Any, metadata: dict[str, Any], _c: Any) -> None:
        errors.append(metadata["reason_kind"])
        if metadata["reason_kind"] == "interrupted":
            interrupted.set()

    gen_agent.telemetry.attach("web-chat-test", gen_agent.telemetry.TURN_ERROR, on_error)
    try:
        with httpx.Client(base_url=base_url, timeout=10) as client:
            session = client.post("/sessions").json()["session"]
            client.post(f"/sessions/{session}/messages", json={"text": "one"})
            client.post(f"/sessions/{session}/messages", json={"text": "two"})
            with client.stream("POST", f"/sessions/{session}/messages",
                               json={"text": "three"}) as response:
                assert response.status_code == 200
                # the third turn is held in its gate: leave before it ends
                assert held.wait_blocked(5.0)
            assert interrupted.wait(5.0), f"the turn was not interrupted: {errors}"
            assert gen_agent.status(("chat", session)).state == "idle"
    finally:
        gen_agent.telemetry.detach("web-chat-test")

