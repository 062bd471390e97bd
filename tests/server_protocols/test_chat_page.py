"""The chat page's shell needs no token; everything it calls does (bearer tokens on)."""

from __future__ import annotations

import httpx
import pytest

pytest.importorskip("ag_ui", reason="the server extra is not installed: "
                                    "pip install 'gen-agent[server]'")

import gen_agent
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.server import chat
from tests.server_protocols.support import Chat, make_app, serving

ALICE = {"Authorization": "Bearer alice-token-0123456789"}


def test_the_page_loads_without_a_token_and_its_api_needs_one(
        agent_system: gen_agent.AgentSystem) -> None:
    host = gen_agent.AgentHost(Chat, backend=MockBackend, name="chat", agent_system=agent_system,
                               scripts=[mock.text_turn("hi")])
    with serving(make_app({"chat": host}, [chat])) as served, httpx.Client(timeout=10) as http:
        page = http.get(served.url + "/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert "alice" not in page.text and "chat/api/hosts" in page.text
        assert http.post(served.url + "/").status_code in (401, 405)  # only GET is public
        assert http.get(served.url + "/chat/api/hosts").status_code == 401
        hosts = http.get(served.url + "/chat/api/hosts", headers=ALICE)
        assert hosts.status_code == 200 and hosts.json() == {"hosts": ["chat"]}
        assert http.post(served.url + "/chat/api/hosts/chat/turns",
                         json={"thread": "t", "prompt": "hello"}).status_code == 401
