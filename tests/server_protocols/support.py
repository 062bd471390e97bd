"""Serving an ASGI app on a loopback port for the protocol tests, and the agents they use."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn

from gen_agent import GenAgent, NoReply
from gen_agent.server.approvals import ask_client

TOKENS = {"alice-token-0123456789": ("acme", "alice"), "bob-token-0123456789ab": ("globex", "bob")}


class Chat(GenAgent):
    """A chat agent whose tool use
    the remote user approves.

    (Not on the card: only the first paragraph is.)"""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": list(opts.get("scripts", [])), "tools": opts.get("tools", []),
                "fallback": opts.get("fallback")}, 0

    def handle_response(self, ref: Any, response: Any, state: Any) -> NoReply:
        return NoReply(state + 1)

    def handle_tool_permission(self, request: Any, state: Any) -> Any:
        return ask_client(request, timeout_s=10)


class Serving:
    def __init__(self, app: Any) -> None:
        self.app = app
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="on",
                                ws="none", http="h11", loop="asyncio",
                                timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       name="test-protocol-server", daemon=True)

    def start(self) -> Serving:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert self.thread.is_alive(), "the server did not start"
            assert time.monotonic() < deadline, "the server did not start in 10 s"
            self.thread.join(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        with contextlib.suppress(OSError):
            self.sock.close()
        assert not self.thread.is_alive(), "the server did not stop"


@contextlib.contextmanager
def serving(app: Any) -> Iterator[Serving]:
    served = Serving(app).start()
    try:
        yield served
    finally:
        served.stop()


def make_app(hosts: dict[str, Any], protocols: list[Any], **options: Any) -> Any:
    """The app under test: `gen_agent.server.create_app` with bearer tokens of two tenants."""
    from gen_agent.server._app import create_app
    from gen_agent.server._auth import BearerTokens, Principal

    table = BearerTokens({token: Principal(tenant=t, subject=s)
                          for token, (t, s) in TOKENS.items()})
    return create_app(hosts, tokens=table, protocols=protocols, **options)

