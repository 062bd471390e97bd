"""Text no wire can carry (a lone surrogate: UTF-8 cannot encode it), through every bundled
HTTP backend and the mock, with and without a session store.

The SDKs encode a request body as UTF-8 JSON, so a prompt (or a callback's prompt) holding a
lone surrogate cannot be sent: its turn fails through `handle_error` with
`BackendError(kind="invalid_request")`, nothing reaches the server, the store records the
failure (never killing the agent), and the agent answers the next ask."""

from __future__ import annotations

import queue
from pathlib import Path
from typing import Any

import _agents as agents
import pytest

import gen_agent
from gen_agent._errors import TurnError
from gen_agent.backend import BackendError
from gen_agent.backends.anthropic import AnthropicAPI
from gen_agent.backends.mock import MockBackend, text_turn
from gen_agent.backends.openai import OpenAIResponses
from gen_agent.store import MemoryStore, SQLiteStore
from gen_agent.testing._helpers import wait_until_idle
from gen_agent.testing._model_server import Reply, ScriptedModelServer

pytest.importorskip("anthropic")
pytest.importorskip("openai")

WAIT_S = 15.0
BAD = "look: \ud800 here"
HTTP = [pytest.param(AnthropicAPI, "", id="anthropic"),
        pytest.param(OpenAIResponses, "/v1", id="openai")]
STORES = ["none", "memory", "sqlite"]


class Recording(gen_agent.GenAgent):
    """Passes its backend options through; records every `handle_error` reason; answers a
    `("prompt", text)` info with a callback-made prompt."""

    errors: list[Any] = []

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return opts["backend_opts"], None

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return gen_agent.NoReply(state)

    def handle_error(self, ref: Any, reason: Any, state: Any) -> Any:
        type(self).errors.append(reason)
        return gen_agent.NoReply(state)

    def handle_info(self, message: Any, state: Any) -> Any:
        return gen_agent.Prompt(message[1], state)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    Recording.errors = []


def make_store(kind: str, tmp_path: Path) -> Any:
    return {"none": None, "memory": MemoryStore(),
            "sqlite": SQLiteStore(tmp_path / "s.db")}[kind]


def start(backend: Any, base: str, server: ScriptedModelServer, store: Any) -> Any:
    durable = {} if store is None else {"store": store, "session_key": "k"}
    return agents.start(
        Recording, "bad-input", backend=backend,
        backend_opts={"api_key": "test-key", "base_url": server.url + base, "model": "m"},
        **durable)


def invalid_request(reason: Any) -> None:
    assert isinstance(reason, BackendError), reason  # never ("task_crashed", ...)
    assert (reason.kind, reason.retryable, reason.status) == ("invalid_request", False, None)
    assert "lone surrogate (U+D800)" in reason.message
    assert reason.raw is None  # the SDK's exception held the whole body, prompt included


@pytest.mark.parametrize("store_kind", STORES)
@pytest.mark.parametrize(("backend", "base"), HTTP)
def test_a_prompt_with_a_lone_surrogate_fails_its_turn_as_invalid_request(
    backend: Any, base: str, store_kind: str, server: ScriptedModelServer, tmp_path: Path,
) -> None:
    store = make_store(store_kind, tmp_path)
    server.enqueue(Reply.text("fine"))
    agent = start(backend, base, server, store)

    with pytest.raises(TurnError) as info:
        agent.ask(BAD, timeout=WAIT_S)

    invalid_request(info.value.reason)
    assert Recording.errors == [info.value.reason]  # through handle_error, once
    inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
    ref = agent.tell_with_completion(BAD, inbox, timeout=WAIT_S)
    completion = inbox.get(timeout=WAIT_S)
    assert completion.ref == ref and completion.outcome[0] == "error"
    invalid_request(completion.outcome[1])
    assert server.model_requests() == []  # nothing was sent
    assert agent.ask("and now?", timeout=WAIT_S).text == "fine"
    assert inbox.empty()  # the teller got exactly one answer
    [sent] = server.model_requests()
    assert BAD not in sent.raw_body.decode()  # the failed prompt is not resent
    if store is not None:
        assert gen_agent.status("bad-input").store.last_error is None
        gen_agent.stop("bad-input")
        record = store.load("k")
        assert record is not None and record.last_outcome is not None
        assert record.last_outcome.ok is True
        store.close()


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
@pytest.mark.parametrize(("backend", "base"), HTTP)
def test_a_callback_made_prompt_that_cannot_be_sent_fails_through_handle_error(
    backend: Any, base: str, store_kind: str, server: ScriptedModelServer, tmp_path: Path,
) -> None:
    store = make_store(store_kind, tmp_path)
    server.enqueue(Reply.text("fine"))
    agent = start(backend, base, server, store)

    gen_agent.send("bad-input", ("prompt", BAD))  # handle_info returns Prompt(BAD)

    wait_until_idle(agent, timeout=WAIT_S)
    [reason] = Recording.errors
    invalid_request(reason)
    assert agent.ask("and now?", timeout=WAIT_S).text == "fine"
    assert gen_agent.status("bad-input").store.last_error is None
    gen_agent.stop("bad-input")
    store.close()


@pytest.mark.parametrize("store_kind", STORES)
def test_the_mock_answers_text_with_a_lone_surrogate_with_or_without_a_store(
    store_kind: str, tmp_path: Path,
) -> None:
    store = make_store(store_kind, tmp_path)
    durable = {} if store is None else {"store": store, "session_key": "k"}
    scripts = [text_turn("odd \udc00 answer"), text_turn("next")]
    agent = gen_agent.start_agent(Recording, name="bad-input", backend=MockBackend,
                                  backend_opts={"scripts": scripts}, **durable)

    assert agent.ask(BAD, timeout=WAIT_S).text == "odd \udc00 answer"
    assert agent.ask("again", timeout=WAIT_S).text == "next"
    assert Recording.errors == []
    if store is not None:
        assert gen_agent.status("bad-input").store.last_error is None
        gen_agent.stop("bad-input")
        store.close()
