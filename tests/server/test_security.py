"""The server's refusals: auth, tenants, sizes, slow clients, rates, spend; a canary of
another tenant never shows in a response body nor in the logs."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from loguru import logger

from gen_agent import ProviderLimit
from gen_agent.server import ServerLimits
from gen_agent.server._run import check_bind
from tests.server.conftest import TOKEN_A, TOKEN_B, Served, openai, serving

T = 15


def _post(served: Served, body: Any, token: str | None = TOKEN_A, **kwargs: Any) -> Any:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    return httpx.post(served.url + "/v1/responses", json=body, headers=headers, timeout=T,
                      **kwargs)


def test_a_missing_or_wrong_token_is_401(served: Served) -> None:
    for token in (None, "wrong-token-0000000000000", TOKEN_A + "x", TOKEN_A[:-1]):
        answer = _post(served, {"model": "chat", "input": "x"}, token=token)
        assert answer.status_code == 401, token
        assert answer.headers["www-authenticate"].startswith("Bearer")
        assert answer.json()["error"]["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        served.client("not-a-token-at-all-000000").responses.create(model="chat", input="x")
    assert served.model.prompts == []


def test_another_tenants_ids_and_keys_are_out_of_reach(served: Served) -> None:
    a, b = served.client(TOKEN_A), served.client(TOKEN_B)
    mine = a.responses.create(model="chat", input="secret of a", conversation="shared-name")
    with pytest.raises(openai.NotFoundError):
        b.responses.retrieve(mine.id)
    with pytest.raises(openai.NotFoundError):
        b.responses.cancel(mine.id)
    with pytest.raises(openai.BadRequestError) as prev:
        b.responses.create(model="chat", input="x", previous_response_id=mine.id)
    assert prev.value.code == "previous_response_not_found"
    # the same conversation id is another key in another tenant: b's first turn there
    theirs = b.responses.create(model="chat", input="hi", conversation="shared-name")
    assert theirs.output_text == "b/conv_shared-name#1: hi"
    # a key that looks like a's namespaced key stays inside b's tenant
    sneaky = b.responses.create(model="chat", input="hi", conversation="../a/conv_shared-name")
    assert sneaky.output_text.startswith("b/conv_../a/")
    assert sorted(served.host.live_keys()) == sorted(
        ["a/conv_shared-name", "b/conv_shared-name", "b/conv_../a/conv_shared-name"])


def test_oversized_bodies_and_prompts_are_413() -> None:
    with serving(limits=ServerLimits(max_body_bytes=2_000, max_prompt_chars=100)) as s:
        big = _post(s, {"model": "chat", "input": "x" * 5_000})
        assert big.status_code == 413 and big.json()["error"]["code"] == "request_too_large"
        chunked = httpx.post(s.url + "/v1/responses", timeout=T,
                             headers={"Authorization": f"Bearer {TOKEN_A}"},
                             content=iter([b"{" + b" " * 1500, b" " * 1500 + b"}"]))
        assert chunked.status_code == 413  # no Content-Length: counted as it arrives
        long = _post(s, {"model": "chat", "input": "y" * 500})
        assert long.status_code == 413 and long.json()["error"]["code"] == "prompt_too_large"
        assert s.model.prompts == []


def _raw(served: Served) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", served.thread.port), timeout=T)
    return sock


def test_a_slow_body_is_408_and_a_slow_head_is_closed() -> None:
    with serving(limits=ServerLimits(body_timeout_s=0.3), head_timeout_s=0.3) as s:
        sock = _raw(s)
        sock.sendall(b"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Authorization: Bearer " + TOKEN_A.encode() + b"\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
        started = time.monotonic()
        answer = sock.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:40]
        assert time.monotonic() - started < 5
        sock.close()
        head = _raw(s)
        head.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finished
        started = time.monotonic()
        assert head.recv(4096) == b""  # closed by the server
        assert time.monotonic() - started < 5
        head.close()
        idle = _raw(s)  # a connection that sends nothing is closed too
        assert idle.recv(4096) == b""
        idle.close()


def test_a_tenants_request_rate_is_429_with_retry_after() -> None:
    with serving(limits=ServerLimits(requests_per_minute=2, burst=2)) as s:
        codes = [httpx.get(s.url + "/v1/models", timeout=T,
                           headers={"Authorization": f"Bearer {TOKEN_A}"}).status_code
                 for _ in range(3)]
        assert codes == [200, 200, 429]
        limited = httpx.get(s.url + "/v1/models", timeout=T,
                            headers={"Authorization": f"Bearer {TOKEN_A}"})
        assert int(limited.headers["retry-after"]) >= 1
        other = httpx.get(s.url + "/v1/models", timeout=T,
                          headers={"Authorization": f"Bearer {TOKEN_B}"})
        assert other.status_code == 200  # another tenant's bucket


def test_a_tenants_spend_cap_covers_its_turns_only() -> None:
    with serving(limits=ServerLimits(tenant_max_cost_usd=0.015)) as s:
        a, b = s.client(TOKEN_A), s.client(TOKEN_B)
        a.responses.create(model="chat", input="one")  # 0.01
        a.responses.create(model="chat", input="two")  # 0.02: the cap is reached
        with pytest.raises(openai.RateLimitError) as refused:
            a.responses.create(model="chat", input="three")
        assert refused.value.code == "insufficient_quota"
        assert b.responses.create(model="chat", input="b's").status == "completed"
        assert not any("three" in p for p in s.model.prompts)


def test_without_auth_only_loopback_is_served() -> None:
    with serving(tokens=None) as s:
        ok = httpx.post(s.url + "/v1/responses", json={"model": "chat", "input": "x"},
                        timeout=T)
        assert ok.status_code == 200 and ok.json()["output"][0]["content"][0]["text"].startswith(
            "local/")
        rebound = httpx.get(s.url + "/v1/models", headers={"Host": "evil.example:80"},
                            timeout=T)
        assert rebound.status_code == 403
        with pytest.raises(ValueError, match="no auth is configured"):
            check_bind(s.thread.app, "0.0.0.0")
        check_bind(s.thread.app, "::1")


CANARY_PROMPT = "canary-prompt-7f3e9d"


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[list[str]]:
    lines: list[str] = []
    logger.enable("gen_agent")
    sink = logger.add(lambda m: lines.append(str(m)), level="DEBUG")
    caplog.set_level(logging.DEBUG)
    try:
        yield lines
    finally:
        logger.remove(sink)
        logger.disable("gen_agent")
        lines.extend(r.getMessage() for r in caplog.records)


def test_a_seeded_canary_never_leaks(logs: list[str]) -> None:
    bodies: list[str] = []
    with serving() as s:
        a, b = s.client(TOKEN_A), s.client(TOKEN_B)
        seeded = a.responses.create(model="chat", input=CANARY_PROMPT, conversation="c1")
        assert CANARY_PROMPT in seeded.output_text  # a sees its own reply
        hdr = {"Authorization": f"Bearer {TOKEN_B}"}
        tries = [
            ("GET", f"/v1/responses/{seeded.id}", None),
            ("GET", f"/v1/responses/{seeded.id}?stream=true", None),
            ("POST", f"/v1/responses/{seeded.id}/cancel", None),
            ("POST", "/v1/responses", {"model": "chat", "input": "x",
                                       "previous_response_id": seeded.id}),
            ("POST", "/v1/responses", {"model": "chat", "input": "x", "conversation": "c1"}),
            ("POST", "/v1/responses", {"model": "chat", "input": "x", "conversation": "c1",
                                       "stream": True}),
            ("POST", "/v1/responses", {"model": "nope", "input": "x"}),
            ("POST", "/v1/responses", {"model": "chat", "input": [{"role": "bad"}]}),
            ("GET", "/v1/models", None),
            ("GET", "/readyz", None),
        ]
        for method, path, body in tries:
            answer = httpx.request(method, s.url + path, json=body, headers=hdr, timeout=T)
            bodies.append(answer.text + str(answer.headers))
        wrong = httpx.post(s.url + "/v1/responses", timeout=T, json={"input": CANARY_PROMPT},
                           headers={"Authorization": f"Bearer {TOKEN_A}x"})
        bodies.append(wrong.text + str(wrong.headers))
        for event in b.responses.create(model="chat", input="x", conversation="c1",
                                        stream=True):
            bodies.append(event.model_dump_json())
        assert len(bodies) > len(tries) + 1
    for text in bodies:
        assert CANARY_PROMPT not in text and TOKEN_A not in text
    everything = "\n".join(logs)
    assert any(seeded.id in line for line in logs)  # the capture sees the server's lines
    assert any("refused" in line for line in logs)
    assert CANARY_PROMPT not in everything and TOKEN_A not in everything
    assert TOKEN_B not in everything


def test_the_observer_is_mounted_behind_the_same_auth() -> None:
    with serving(observer=True) as s:
        page = httpx.get(s.url + "/observer/api/state", timeout=T,
                         headers={"Authorization": f"Bearer {TOKEN_A}"})
        assert page.status_code == 200 and "agents" in page.text
        assert httpx.get(s.url + "/observer/api/state", timeout=T).status_code == 401


def test_a_tenants_turns_in_flight_are_bounded() -> None:
    with serving(limits=ServerLimits(max_concurrent_turns=1)) as s:
        gate, entered = s.model.gate("hold")
        a = s.client(TOKEN_A)
        held = a.responses.create(model="chat", input="hold", background=True)
        assert entered.wait(T)
        with pytest.raises(openai.RateLimitError) as refused:
            a.responses.create(model="chat", input="second", conversation="other")
        assert refused.value.response.headers["retry-after"] == "1"
        assert s.client(TOKEN_B).responses.create(model="chat", input="b").status == (
            "completed")
        gate.set()
        for _ in range(int(T / 0.01)):
            if a.responses.retrieve(held.id).status == "completed":
                break
            time.sleep(0.01)
        assert a.responses.create(model="chat", input="third").status == "completed"


def test_a_tenants_provider_limit_holds_its_turns_only() -> None:
    limits = ServerLimits(tenant_provider_limit=lambda tenant: ProviderLimit(
        tenant, max_concurrent=1) if tenant == "a" else None)
    with serving(limits=limits) as s:
        gate, _ = s.model.gate("hold")
        a, b = s.client(TOKEN_A), s.client(TOKEN_B)
        first = a.responses.create(model="chat", input="hold a1", conversation="a1",
                                   background=True)
        assert s.model.wait_in_flight("a", 1, T)
        second = a.responses.create(model="chat", input="hold a2", conversation="a2",
                                    background=True)  # another agent: waits for the permit
        theirs = [b.responses.create(model="chat", input=f"hold b{n}", conversation=f"b{n}",
                                     background=True) for n in (1, 2)]
        assert s.model.wait_in_flight("b", 2, T)  # b is not held back by a's limit
        assert s.model.in_flight["a"] == 1 and not any("a2" in p for p in s.model.prompts)
        gate.set()
        for response, client in [(first, a), (second, a), (theirs[0], b), (theirs[1], b)]:
            for _ in range(int(T / 0.01)):
                if client.responses.retrieve(response.id).status == "completed":
                    break
                time.sleep(0.01)
            assert client.responses.retrieve(response.id).status == "completed"
        assert s.model.peak == {"a": 1, "b": 2}
        assert s.server.tenant_limit("a").status().in_flight == 0


def test_a_tenant_provider_limit_is_checked_and_joins_the_hosts_own() -> None:
    with pytest.raises(ValueError):
        ServerLimits(tenant_provider_limit={"max_concurrent": 0})
    with pytest.raises(ValueError):
        ServerLimits(tenant_provider_limit=3)
    host_limit = ProviderLimit("host", max_concurrent=5)
    limits = ServerLimits(tenant_provider_limit={"max_concurrent": 2})
    with serving(limits=limits, host_options={"provider_limit": host_limit}) as s:
        for token in (TOKEN_A, TOKEN_B):
            assert s.client(token).responses.create(
                model="chat", input="x", conversation="c").status == "completed"
        status = s.host.status("a/conv_c")
        assert status.provider_limit.name == "tenant:a"  # each tenant its own, with the bounds
        assert status.provider_limit.max_concurrent == 2
        assert s.server.tenant_limit("b").status().requests_last_minute == 1
        assert host_limit.status().requests_last_minute == 2  # the host's limit was asked too
