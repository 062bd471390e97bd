"""`gen_agent.observer.serve` over real HTTP on 127.0.0.1: access rules (token, confirmation,
Host), the JSON view, the event stream, the actions, no text unless enabled, clean stop."""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

import gen_agent
from gen_agent import GenAgent, NoReply
from gen_agent._supervisor import Supervisor, child_spec
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.testing._helpers import wait_for_state

pytest.importorskip("starlette", reason="the observer extra is not installed: "
                                        "pip install 'gen-agent[observer]'")
pytest.importorskip("uvicorn", reason="the observer extra is not installed: "
                                      "pip install 'gen-agent[observer]'")
from gen_agent import observer

TOKEN = "a-test-token-of-32-characters-xx"
SECRET_PROMPT = "PROMPT-TEXT-7f3a: what is the launch code?"
SECRET_REPLY = "REPLY-TEXT-91c2: the launch code is 0000"


class Worker(GenAgent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": opts["scripts"]}, 0

    def handle_response(self, ref: Any, response: Any, state: Any) -> NoReply:
        return NoReply(state + 1)


def request(obs: Any, method: str, path: str, body: Any = None,
            headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """One request to the observer on 127.0.0.1 (whatever address it is bound to)."""
    connection = http.client.HTTPConnection("127.0.0.1", obs.port, timeout=10)
    try:
        connection.request(method, path, body=None if body is None else json.dumps(body),
                           headers={"Content-Type": "application/json", **(headers or {})})
        response = connection.getresponse()
        data = response.read().decode()
    finally:
        connection.close()
    if response.getheader("content-type", "").startswith("application/json"):
        return response.status, json.loads(data)
    return response.status, data


def stream(obs: Any, query: str = "", count: int = 1,
           until: Any = None) -> Iterator[dict[str, Any]]:
    """Read `count` state events (or until `until(view)`) from the event stream."""
    connection = http.client.HTTPConnection("127.0.0.1", obs.port, timeout=10)
    try:
        connection.request("GET", "/api/stream" + query)
        response = connection.getresponse()
        assert response.status == 200
        assert response.getheader("content-type").startswith("text/event-stream")
        seen = 0
        while True:
            line = response.readline()
            assert line, "the stream ended"
            if line.startswith(b"data: "):
                view = json.loads(line[6:])
                yield view
                seen += 1
                if (until is None and seen >= count) or (until is not None and until(view)):
                    return
    finally:
        connection.close()


@pytest.fixture
def tree() -> Iterator[Supervisor]:
    with Supervisor([child_spec(Worker, name="alpha", backend=MockBackend, restart="permanent",
                                scripts=[mock.text_turn("one"), mock.text_turn("two")])],
                    name="tree") as supervisor:
        yield supervisor


def test_loopback_reads_need_no_token_and_actions_do(tree: Supervisor) -> None:
    with observer.serve(token=TOKEN) as obs:
        assert obs.url == f"http://127.0.0.1:{obs.port}/?token={TOKEN}"
        status, page = request(obs, "GET", "/")
        assert status == 200 and "<title>gen_agent observer</title>" in page
        status, view = request(obs, "GET", "/api/state")
        assert status == 200
        assert [a["name"] for a in view["agents"]] == ["alpha"]
        assert view["supervisors"][0]["children"][0]["id"] == "alpha"

        body = {"agent": "alpha", "confirm": True}
        assert request(obs, "POST", "/api/action/halt", body)[0] == 401
        assert request(obs, "POST", "/api/action/halt?token=" + TOKEN, body)[0] == 401
        wrong = {"X-Observer-Token": "x" * 32}
        assert request(obs, "POST", "/api/action/halt", body, wrong)[0] == 401
        unconfirmed = {"agent": "alpha"}
        good = {"Authorization": f"Bearer {TOKEN}"}
        assert request(obs, "POST", "/api/action/halt", unconfirmed, good)[0] == 400
        assert not gen_agent.status("alpha").halted
        status, answer = request(obs, "POST", "/api/action/halt", body, good)
        assert (status, answer) == (200, {"ok": True, "result": "halt sent to alpha"})
        assert gen_agent.status("alpha").halted


def test_a_request_without_the_token_is_refused_beyond_loopback(tree: Supervisor) -> None:
    # Bound to every interface, but only ever reached through 127.0.0.1.
    with pytest.raises(ValueError, match="allow_remote"):
        observer.serve(host="0.0.0.0")
    with pytest.raises(ValueError, match="16 characters"):
        observer.serve(host="0.0.0.0", allow_remote=True, token="short")
    with observer.serve(host="0.0.0.0", allow_remote=True, token=TOKEN) as obs:
        for path in ("/", "/api/state", "/api/stream"):
            status, answer = request(obs, "GET", path)
            assert status == 401, path
            assert answer == {"error": "a valid observer token is required"}
            assert request(obs, "GET", path + "?token=" + "y" * 32)[0] == 401
        assert request(obs, "POST", "/api/action/interrupt",
                       {"agent": "alpha", "confirm": True})[0] == 401
        assert request(obs, "GET", "/api/state?token=" + TOKEN)[0] == 200
        assert request(obs, "GET", "/api/state", headers={"X-Observer-Token": TOKEN})[0] == 200
        status, page = request(obs, "GET", "/?token=" + TOKEN)
        assert status == 200 and "gen_agent observer" in page
        view = next(stream(obs, "?token=" + TOKEN))
        assert [a["name"] for a in view["agents"]] == ["alpha"]


def test_loopback_refuses_a_foreign_host_header(tree: Supervisor) -> None:
    with observer.serve() as obs:
        status, answer = request(obs, "GET", "/api/state",
                                 headers={"Host": f"attacker.example:{obs.port}"})
        assert (status, answer) == (400, {"error": "unexpected Host header"})
        assert request(obs, "GET", "/api/state",
                       headers={"Host": f"localhost:{obs.port}"})[0] == 200


def test_no_page_or_stream_contains_prompt_or_response_text_unless_enabled() -> None:
    scripts = [mock.text_turn(SECRET_REPLY)]
    with Supervisor([child_spec(Worker, name="alpha", backend=MockBackend, scripts=scripts)]), \
            observer.serve() as obs:
        assert gen_agent.ask("alpha", SECRET_PROMPT, timeout=5).text == SECRET_REPLY
        _, page = request(obs, "GET", "/")
        _, view = request(obs, "GET", "/api/state")
        streamed = list(stream(obs, count=2))
        assert view["turns"][0]["outcome"] == "ok"
        assert "prompt" not in view["turns"][0]
        for text in (page, json.dumps(view), json.dumps(streamed)):
            assert "PROMPT-TEXT" not in text and "REPLY-TEXT" not in text
    # Enabled by the host: the dispatched prompt is shown; a response text never is.
    scripts = [mock.text_turn(SECRET_REPLY)]
    with Supervisor([child_spec(Worker, name="beta", backend=MockBackend, scripts=scripts)]), \
            observer.serve(show_text=True) as obs:
        gen_agent.ask("beta", SECRET_PROMPT, timeout=5)
        _, view = request(obs, "GET", "/api/state")
        assert view["turns"][0]["prompt"] == SECRET_PROMPT
        assert "REPLY-TEXT" not in json.dumps(view)


def test_the_stream_pushes_a_new_view_when_a_turn_ends(tree: Supervisor) -> None:
    with observer.serve() as obs:
        views = stream(obs, until=lambda v: any(t["outcome"] == "ok" for t in v["turns"]))
        first = next(views)
        assert first["turns"] == []
        gen_agent.ask("alpha", "hello", timeout=5)
        last = list(views)[-1]
        assert last["version"] > first["version"]
        assert last["agents"][0]["turns"][0]["origin"] == "ask"
        assert [e["event"] for e in last["events"]][-2:] == ["state.changed", "turn.start"]


def test_actions_stop_and_restart_child_take_effect(tree: Supervisor) -> None:
    headers = {"X-Observer-Token": TOKEN}
    with observer.serve(token=TOKEN) as obs:
        before = gen_agent.whereis("alpha")
        status, answer = request(obs, "POST", "/api/action/stop",
                                 {"agent": "alpha", "confirm": True}, headers)
        assert (status, answer["result"]) == (200, "stopped alpha")
        assert before.wait_stopped(5)
        # The exit is in the supervisor's inbox before this call: the restart is done.
        (child,) = tree.which_children()
        assert child.restarts == 1
        restarted = child.ref
        status, answer = request(obs, "POST", "/api/action/restart_child",
                                 {"supervisor": "tree", "child": "alpha", "confirm": True},
                                 headers)
        assert (status, answer["result"]) == (200, "restarted alpha under tree")
        assert restarted.wait_stopped(5)
        assert tree.whereis("alpha") not in (None, restarted, before)
        status, answer = request(obs, "POST", "/api/action/interrupt",
                                 {"agent": "nobody", "confirm": True}, headers)
        assert (status, answer) == (404, {"error": "no running agent 'nobody'"})
        status, _ = request(obs, "POST", "/api/action/explode",
                            {"agent": "alpha", "confirm": True}, headers)
        assert status == 404
        status, answer = request(obs, "POST", "/api/action/resume", [1, 2], headers)
        assert (status, answer) == (400, {"error": "the body must be a JSON object"})
        gen_agent.halt("alpha")
        wait_for_state("alpha", lambda s: s.halted)
        request(obs, "POST", "/api/action/resume", {"agent": "alpha", "confirm": True}, headers)
        wait_for_state("alpha", lambda s: not s.halted)


def test_stop_closes_the_port_and_detaches_telemetry(tree: Supervisor) -> None:
    obs = observer.serve()
    handlers = [h.id for h in gen_agent.telemetry.list_handlers(("gen_agent",))]
    assert any(isinstance(h, tuple) and h[0] == "gen_agent.observer" for h in handlers)
    # An open stream does not hold the stop up: it is ended by the server.
    connection = http.client.HTTPConnection("127.0.0.1", obs.port, timeout=10)
    connection.request("GET", "/api/stream")
    response = connection.getresponse()
    while not response.readline().startswith(b"data: "):
        pass
    obs.stop()
    rest = response.read()  # the chunked body ends: no hang, no error
    assert b"data: " not in rest
    connection.close()
    obs.stop()  # idempotent
    assert not obs.running
    handlers = [h.id for h in gen_agent.telemetry.list_handlers(("gen_agent",))]
    assert not any(isinstance(h, tuple) and h[0] == "gen_agent.observer" for h in handlers)
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", obs.port), 1):
        pass


def test_a_lone_surrogate_in_a_name_or_prompt_is_escaped_and_never_freezes_the_view() -> None:
    odd = "odd-\ud800"
    with Supervisor([child_spec(Worker, name=odd, backend=MockBackend, restart="permanent",
                                scripts=[mock.text_turn("one"), mock.text_turn("two")]),
                     child_spec(Worker, name="alpha", backend=MockBackend,
                                scripts=[mock.text_turn("three")])],
                    name="tree-\udc01"), observer.serve(show_text=True, token=TOKEN) as obs:
        assert gen_agent.ask(odd, "half \ud83d a prompt", timeout=5).text == "one"
        status, view = request(obs, "GET", "/api/state")
        assert status == 200
        assert sorted(a["name"] for a in view["agents"]) == ["alpha", "odd-\\ud800"]
        assert view["supervisors"][0]["name"] == "tree-\\udc01"
        assert view["turns"][0]["prompt"] == "half \\ud83d a prompt"
        assert next(stream(obs))["agents"]  # every viewer still gets views
        status, answer = request(obs, "POST", "/api/action/stop",
                                 {"agent": "odd-\\ud800", "confirm": True},
                                 {"X-Observer-Token": TOKEN})
        assert (status, answer["result"]) == (200, "stopped odd-\\ud800")
        assert gen_agent.ask("alpha", "still there?", timeout=5).text == "three"


def test_the_publisher_escapes_what_the_collector_left() -> None:
    from gen_agent._system import current_system
    from gen_agent.observer._collector import Collector
    from gen_agent.observer._publisher import Publisher

    class Odd(Collector):
        def snapshot(self) -> dict[str, Any]:
            return {"agents": [{"name": "\udfff", "\ud800": ["x\ud801"]}]}

    built = Publisher(Odd(current_system())).build()
    assert json.loads(built) == {"agents": [{"name": "\\udfff", "\\ud800": ["x\\ud801"]}]}
