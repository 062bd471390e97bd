"""Shutdown drains: new requests get 503, running turns finish (or are interrupted past the
bound), queued ones fail with "draining", and the keys' leases are free at once. And the
`gen-agent serve` command."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from gen_agent import AgentHost, AgentSystem
from gen_agent.backends.mock import MockBackend
from gen_agent.server import ServerLimits, create_app
from gen_agent.server._run import ServerThread, load
from gen_agent.store import SQLiteStore
from tests.server.conftest import TOKEN_A, TOKENS, Chat, Model, openai

T = 15


def _wait(predicate: Any, timeout: float = T) -> None:
    done = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if predicate():
            return
        done.wait(0.01)
    raise AssertionError("condition not reached")


def test_a_drain_finishes_running_turns_fails_queued_ones_and_frees_the_keys(
        tmp_path: Path) -> None:
    model = Model()
    gate, entered = model.gate("running")
    store = SQLiteStore(tmp_path / "s.db")
    with AgentSystem() as system:
        host = AgentHost(Chat, backend=MockBackend, agent_system=system, name="chat",
                         store=store, model=model)
        app = create_app({"chat": host}, tokens=TOKENS, close_hosts=True,
                         limits=ServerLimits(drain_timeout_s=10))
        thread = ServerThread(app)
        client = openai.OpenAI(base_url=thread.base_url + "/v1", api_key=TOKEN_A,
                               max_retries=0, timeout=T)
        results: dict[str, Any] = {}

        def call(name: str, **kwargs: Any) -> None:
            results[name] = client.responses.create(model="chat", **kwargs)

        first = threading.Thread(target=call, args=("running",),
                                 kwargs={"input": "running", "conversation": "k"})
        first.start()
        assert entered.wait(T)
        second = threading.Thread(target=call, args=("queued",),
                                  kwargs={"input": "queued", "conversation": "k"})
        second.start()
        server = app.state.gen_agent_server
        _wait(lambda: len(server._turns) == 2)
        stopper = threading.Thread(target=thread.stop)
        stopper.start()
        _wait(lambda: server.draining)
        refused = httpx.get(thread.base_url + "/v1/models", timeout=T,
                            headers={"Authorization": f"Bearer {TOKEN_A}"})
        assert refused.status_code == 503 and refused.headers["retry-after"] == "5"
        gate.set()
        first.join(T)
        second.join(T)
        stopper.join(T)
        assert results["running"].status == "completed"
        assert results["queued"].status == "failed"
        assert "draining" in results["queued"].error.message
        assert not any("queued" in p for p in model.prompts)
        # the lease is free: another host (another process's) takes the key at once
        with AgentHost(Chat, backend=MockBackend, agent_system=system, name="chat2",
                       store=SQLiteStore(tmp_path / "s.db"), model=model) as other:
            assert other.ask("a/conv_k", "again", timeout=T).text == "a/conv_k#2: again"


def test_past_the_bound_a_running_turn_is_interrupted() -> None:
    model = Model()
    gate, entered = model.gate("stuck")
    with AgentSystem() as system:
        host = AgentHost(Chat, backend=MockBackend, agent_system=system, name="chat",
                         model=model)
        app = create_app({"chat": host}, tokens=TOKENS, close_hosts=True,
                         limits=ServerLimits(drain_timeout_s=0.2))
        thread = ServerThread(app)
        client = openai.OpenAI(base_url=thread.base_url + "/v1", api_key=TOKEN_A,
                               max_retries=0, timeout=T)
        got: list[Any] = []
        caller = threading.Thread(target=lambda: got.append(
            client.responses.create(model="chat", input="stuck")))
        caller.start()
        assert entered.wait(T)
        thread.stop()
        caller.join(T)
        gate.set()
        assert got, "no answer"
        assert got[0].status == "cancelled"  # interrupt_request after the bound


def test_serve_loads_module_attr_and_refuses_a_public_bind_without_auth(
        tmp_path: Path, monkeypatch: Any) -> None:
    from gen_agent.cli._app import app as cli

    (tmp_path / "served_mod.py").write_text(
        "from gen_agent import AgentHost\n"
        "from gen_agent.backends.mock import MockBackend\n"
        "from tests.server.conftest import Chat, Model\n"
        "hosts = {'chat': AgentHost(Chat, backend=MockBackend, model=Model())}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("GEN_AGENT_SERVER_TOKENS", raising=False)
    monkeypatch.delenv("GEN_AGENT_SERVER_TOKEN_FILE", raising=False)
    result = CliRunner().invoke(cli, ["serve", "served_mod:hosts", "--host", "0.0.0.0"])
    assert result.exit_code == 2
    assert "no auth is configured" in result.output
    bad = CliRunner().invoke(cli, ["serve", "served_mod"])
    assert bad.exit_code == 2 and "module:attr" in bad.output
    import served_mod

    try:
        served = load("served_mod:hosts")
        assert sorted(served.state.gen_agent_server.hosts) == ["chat"]
    finally:
        served_mod.hosts["chat"].close()


def test_serve_chooses_its_protocols(tmp_path: Path, monkeypatch: Any) -> None:
    from gen_agent.cli._app import app as cli

    (tmp_path / "proto_mod.py").write_text(
        "from gen_agent import AgentHost\n"
        "from gen_agent.backends.mock import MockBackend\n"
        "from tests.server.conftest import Chat, Model\n"
        "def hosts():\n"
        "    return {'chat': AgentHost(Chat, backend=MockBackend, model=Model())}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    bad = CliRunner().invoke(cli, ["serve", "proto_mod:hosts", "--protocol", "grpc"])
    assert bad.exit_code == 2 and "unknown protocol 'grpc'" in bad.output
    assert "agui" in bad.output  # the choices are named
    chosen, default = load("proto_mod:hosts", ["a2a", "chat", "agui", "a2a"]), None
    try:
        paths = {getattr(route, "path", None) for route in chosen.routes}
        assert {"/", "/agui/{host}", "/a2a/chat/.well-known/agent-card.json"} <= paths
        assert "/v1/responses" not in paths  # only what was asked for
        default = load("proto_mod:hosts")
        assert "/v1/responses" in {getattr(route, "path", None) for route in default.routes}
    finally:
        for app in (chosen, default):
            if app is not None:
                app.state.gen_agent_server.hosts["chat"].close()
    built = create_app(AgentHost(Chat, backend=MockBackend, model=Model(), name="chat"),
                       close_hosts=True)
    monkeypatch.setattr("proto_mod.app", built, raising=False)
    try:
        with pytest.raises(ValueError, match="drop --protocol"):
            load("proto_mod:app", ["a2a"])
        assert load("proto_mod:app") is built
    finally:
        built.state.gen_agent_server.hosts["chat"].close()


def test_the_readme_client_example_runs_against_the_server(capsys: Any) -> None:
    import re

    from gen_agent.server import BearerTokens, Principal
    from tests.server.conftest import serving

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text("utf-8")
    section = readme.split("## Serving agents over HTTP", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]
    token = re.search(r'api_key="([^"]+)"', code).group(1)  # type: ignore[union-attr]
    assert f"acme:{token}" in section  # the shell part sets the same token
    tokens = BearerTokens({token: Principal(tenant="acme", subject="acme")})
    with serving(tokens=tokens) as s:
        exec(compile(code.replace("http://127.0.0.1:8000", s.url), "README", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("acme/resp_") and out[0].endswith("#1: Hello")
    assert out[1] == "acme/conv_ada#1: Stream it"
    assert any(p.endswith("#2|And again") for p in s.model.prompts)


def test_the_readme_protocol_examples_answer() -> None:
    import json
    import re

    pytest.importorskip("a2a")
    pytest.importorskip("ag_ui")
    from gen_agent.server import BearerTokens, Principal, a2a, agui, chat, responses
    from tests.server.conftest import serving

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text("utf-8")
    section = readme.split("## Serving agents over HTTP", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"gen-agent serve myapp:hosts( --protocol \w+)+", section)
    token = re.search(r"serve.*?#token=([\w-]+)", section, re.S).group(1)  # type: ignore[union-attr]
    card = re.search(r"curl -s (http\S+agent-card\.json)", section).group(1)  # type: ignore[union-attr]
    run = re.search(r"curl -sN (http\S+) .*?-d '(\{.*?\})'", section).groups()  # type: ignore[union-attr]
    tokens = BearerTokens({token: Principal(tenant="acme", subject="acme")})
    with serving(tokens=tokens, protocols=[responses, a2a, agui, chat]) as s:
        auth = {"Authorization": f"Bearer {token}"}
        local = "http://127.0.0.1:8000"
        got = httpx.get(card.replace(local, s.url), headers=auth, timeout=T)
        assert got.status_code == 200 and got.json()["name"] == "chat"
        events = httpx.post(run[0].replace(local, s.url), content=run[1], timeout=T,
                            headers={**auth, "Content-Type": "application/json"})
        assert events.status_code == 200
        parsed = [json.loads(line[5:]) for line in events.text.splitlines()
                  if line.startswith("data:")]
        assert parsed[-1]["type"] == "RUN_FINISHED"
        assert "".join(e["delta"] for e in parsed if e["type"] == "TEXT_MESSAGE_CONTENT") == (
            "acme/t1#1: Hello")  # the reply: the key is the threadId inside the tenant
        assert httpx.get(s.url + "/", timeout=T).status_code == 200  # the chat page


def test_the_readmes_offline_myapp_serves_a_chat(tmp_path: Path, monkeypatch: Any) -> None:
    # docs/examples/server/myapp.py is what the README runs `gen-agent serve` on.
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "docs/examples/server"))
    monkeypatch.chdir(tmp_path)  # its SQLite file goes to the working directory
    monkeypatch.setenv("GEN_AGENT_SERVER_TOKENS", f"acme:{TOKEN_A}")
    app = load("myapp:hosts")
    assert sorted(app.state.gen_agent_server.hosts) == ["chat"]
    thread = ServerThread(app)
    try:
        client = openai.OpenAI(base_url=thread.base_url + "/v1", api_key=TOKEN_A,
                               max_retries=0, timeout=T)
        anonymous = openai.OpenAI(base_url=thread.base_url + "/v1", api_key="wrong-token",
                                  max_retries=0, timeout=T)
        with pytest.raises(openai.AuthenticationError):  # the tokens come from the env
            anonymous.responses.create(model="chat", input="Hello")
        first = client.responses.create(model="chat", input="Hello")
        assert first.output_text == "You said: Hello"
        again = client.responses.create(model="chat", input="And again",
                                        previous_response_id=first.id)
        assert again.output_text == "You said: And again"
    finally:
        thread.stop()
        for host in app.state.gen_agent_server.hosts.values():
            host.close()
    assert (tmp_path / "chats.db").exists()
