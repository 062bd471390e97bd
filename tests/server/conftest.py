"""A server on a loopback port over mock-backed hosts, and the openai SDK pointed at it."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from gen_agent import AgentHost, AgentSystem, GenAgent, NoReply, Proceed
from gen_agent.backends.mock import MockBackend, text_turn
from gen_agent.server import BearerTokens, Principal, ServerLimits, create_app
from gen_agent.server._run import ServerThread

openai = pytest.importorskip("openai")

TOKEN_A = "token-of-tenant-a-0123456789"
TOKEN_B = "token-of-tenant-b-9876543210"
TOKENS = BearerTokens({TOKEN_A: Principal(tenant="a", subject="alice"),
                       TOKEN_B: Principal(tenant="b", subject="bob")})


class Model:
    """The fake model: answers `<key>#<turn>: <prompt>` (a prompt `json:X`: just `X`) and
    records every prompt it saw; a prompt in `gates` waits for its event first. `in_flight`
    and `peak` count the calls running per tenant (the host key's part before its `/`)."""

    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.gates: dict[str, threading.Event] = {}
        self.entered: dict[str, threading.Event] = {}
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.in_flight: dict[str, int] = {}
        self.peak: dict[str, int] = {}

    def wait_in_flight(self, tenant: str, count: int, timeout: float) -> bool:
        """True once `count` calls of `tenant` run at once (False after `timeout` s)."""
        with self.changed:
            return self.changed.wait_for(lambda: self.in_flight.get(tenant, 0) >= count,
                                         timeout)

    def gate(self, word: str) -> tuple[threading.Event, threading.Event]:
        self.gates[word], self.entered[word] = threading.Event(), threading.Event()
        return self.gates[word], self.entered[word]

    def __call__(self, prompt: str) -> Any:
        tenant = prompt.split("/", 1)[0]
        with self.changed:
            self.prompts.append(prompt)
            now = self.in_flight[tenant] = self.in_flight.get(tenant, 0) + 1
            self.peak[tenant] = max(self.peak.get(tenant, 0), now)
            self.changed.notify_all()
        try:
            return self._answer(prompt)
        finally:
            with self.changed:
                self.in_flight[tenant] -= 1
                self.changed.notify_all()

    def _answer(self, prompt: str) -> Any:
        text = prompt.split("|", 1)[1]
        for word, gate in self.gates.items():
            if word in text:
                self.entered[word].set()
                assert gate.wait(10), "the test never opened the gate"
        if text.startswith("json:"):  # a bare structured reply
            return text_turn(text[5:], usage={"input_tokens": 4, "output_tokens": 3})
        return text_turn([prompt.split("|", 1)[0], ": ", text],
                         usage={"input_tokens": 4, "output_tokens": 3},
                         result={"cost_usd": 0.01})


class Chat(GenAgent):
    """State: turns so far (persisted); the prompt the model sees is `<key>#<n>|<prompt>`."""

    persist_state = True

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        self.key = opts["key"]
        return {"fallback": opts["model"]}, 0

    def pre_turn(self, prompt: str, state: Any) -> Proceed:
        return Proceed(f"{self.key}#{state + 1}|{prompt}", state)

    def handle_response(self, ref: Any, response: Any, state: Any) -> NoReply:
        return NoReply(state + 1)


class Served:
    def __init__(self, thread: ServerThread, host: AgentHost, model: Model) -> None:
        self.thread, self.host, self.model = thread, host, model
        self.url = thread.base_url
        self.server = thread.app.state.gen_agent_server

    def client(self, token: str = TOKEN_A, **kwargs: Any) -> Any:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=token, max_retries=0,
                             timeout=15, **kwargs)


@contextlib.contextmanager
def serving(*, tokens: Any = TOKENS, limits: ServerLimits | None = None,
            head_timeout_s: float = 10.0, host_options: dict[str, Any] | None = None,
            **app_kwargs: Any) -> Iterator[Served]:
    model = Model()
    with AgentSystem() as system:
        host = AgentHost(Chat, backend=MockBackend, agent_system=system, name="chat",
                         model=model, **(host_options or {}))
        app = create_app({"chat": host}, tokens=tokens, limits=limits, env={},
                         close_hosts=True, **app_kwargs)
        thread = ServerThread(app, head_timeout_s=head_timeout_s)
        try:
            yield Served(thread, host, model)
        finally:
            thread.stop()


@pytest.fixture
def served() -> Iterator[Served]:
    with serving() as s:
        yield s
