"""Stress: 8 agents x 200 requests with random interrupts, halts and callback crashes.

Every caller must be answered exactly once with the outcome its script implies (or
"interrupted" when a random interrupt hit it), every started attempt must end exactly once in
telemetry, and at the end no agent is registered and no thread is left (the conftest checks
threads). The choices come from a seeded `random.Random`, so a failure can be replayed.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

from _agents import WAIT_S, in_thread, text_events

import gen_agent
from gen_agent import DispatchError, Event, GenAgent, NoReply, Proceed, Prompt, TurnError
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.telemetry import TURN_ERROR, TURN_START, TURN_STOP, TelemetryRecorder

SEED = 20_261_130
AGENTS = 8
REQUESTS = 200  # per agent
ASK_EVERY = 10  # one request in ten is an ask (from a second caller thread)
LONG_WAIT_S = 60.0  # an ask may wait behind a long queue

KINDS = ["ok"] * 5 + ["error_event", "dispatch_error", "crash", "no_terminal", "hold"]


class Holds:
    """The hold points of one agent's "hold" requests, keyed by prompt."""

    def __init__(self, changed: threading.Condition) -> None:
        self.changed = changed  # notified when a hold is reached
        self.lock = threading.Lock()
        self.reached: dict[str, threading.Event] = {}
        self.released: dict[str, threading.Event] = {}

    def add(self, prompt: str) -> tuple[threading.Event, threading.Event]:
        with self.lock:
            pair = self.reached[prompt], self.released[prompt] = (threading.Event(),
                                                                   threading.Event())
        return pair

    def get(self, prompt: str) -> tuple[threading.Event, threading.Event]:
        with self.lock:
            return self.reached[prompt], self.released[prompt]


def _script(holds: Holds) -> Any:
    """One mock script (a callable) that behaves as the prompt's kind says."""

    def held(prompt: str) -> Iterator[Event]:
        reached, released = holds.get(prompt)
        yield from text_events("partial")
        with holds.changed:
            reached.set()
            holds.changed.notify_all()
        released.wait(WAIT_S)
        yield from mock.text_turn("late")

    def script(prompt: str) -> Any:
        kind = prompt.split("|")[0]
        if kind == "ok":
            return mock.text_turn(f"answer to {prompt}")
        if kind == "error_event":
            return mock.error_turn("ev")
        if kind == "dispatch_error":
            raise DispatchError("disp")
        if kind == "crash":
            raise RuntimeError("backend crashed")
        if kind == "no_terminal":
            return text_events("a", "b")
        return held(prompt)

    return script


class StressAgent(GenAgent):
    """Flags in the prompt ("kind|flag,flag|id") drive its callbacks: retry (handle_error
    retries an error_event turn as owned), herr (handle_error raises), pterr (post_turn
    raises), chain (handle_response chains one more turn). Notifications "crash" make
    handle_event raise and "prompt" make it generate a turn."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        self.random = random.Random(opts["seed"])
        script = _script(opts["holds"])
        return {"scripts": [script] * (REQUESTS * 4)}, {"prompt": None, "turns": 0}

    @staticmethod
    def _flags(state: dict[str, Any]) -> list[str]:
        prompt = state["prompt"] or "||"
        return prompt.split("|")[1].split(",")

    def pre_turn(self, prompt: str, state: dict[str, Any]) -> Any:
        return Proceed(prompt, {**state, "prompt": prompt})

    def handle_response(self, ref: Any, response: Any, state: dict[str, Any]) -> Any:
        state = {**state, "turns": state["turns"] + 1}
        if "chain" in self._flags(state):
            return Prompt(f"ok||chained-{response.prompt}", state)
        return NoReply(state)

    def handle_error(self, ref: Any, reason: Any, state: dict[str, Any]) -> Any:
        flags = self._flags(state)
        if "herr" in flags:
            raise RuntimeError("handle_error crashed")
        if "retry" in flags and reason == "ev":
            return Prompt("ok||retried-" + state["prompt"], state)
        return NoReply(state)

    def handle_event(self, event: Any, state: dict[str, Any]) -> Any:
        if event == "crash":
            raise ValueError("handle_event crashed")
        if event == "prompt":
            return Prompt("ok||from-event", state)
        return NoReply(state)

    def post_turn(self, outcome: Any, ref: Any, state: dict[str, Any]) -> Any:
        if "pterr" in self._flags(state):
            raise KeyError("post_turn crashed")
        return state

    def post_run(self, state: Any) -> None:
        if self.random.random() < 0.5:
            raise RuntimeError("post_run crashed")


def _expected(prompt: str) -> Any:
    """The outcome a request's script implies when no random interrupt hits it."""
    kind, flags, _ = prompt.split("|")
    flags_ = flags.split(",")
    if kind == "ok" or (kind == "error_event" and "retry" in flags_ and "herr" not in flags_):
        return "ok"
    return {"error_event": "ev", "dispatch_error": "disp", "crash": "task_crashed",
            "no_terminal": "no_terminal_event", "hold": "interrupted"}[kind]


def _summary(outcome: tuple[str, Any]) -> Any:
    status, value = outcome
    if status == "ok":
        return "ok"
    if isinstance(value, tuple) and value[0] == "task_crashed":
        assert isinstance(value[1], RuntimeError)
        return "task_crashed"
    return value


class Client:
    """Drives one agent: tells (with completion) from one thread, asks from another."""

    def __init__(self, index: int) -> None:
        self.name = f"stress-{index}"
        self.random = random.Random(SEED + index)
        self.cond = threading.Condition()
        self.holds = Holds(self.cond)
        self.completions: dict[Any, list[Any]] = {}
        self.tells: dict[Any, str] = {}
        self.asks: list[tuple[str, Future[Any]]] = []
        self.interrupt_results: list[tuple[str, Any]] = []
        self.ref = gen_agent.start_agent(StressAgent, name=self.name, backend=MockBackend,
                                         seed=SEED + index, holds=self.holds)

    def on_completion(self, message: Any) -> None:
        with self.cond:
            self.completions.setdefault(message[3], []).append(message[4])
            self.cond.notify_all()

    def _prompt(self, i: int) -> str:
        kind = self.random.choice(KINDS)
        flags = [flag for flag, p in (("retry", 0.5), ("herr", 0.15), ("pterr", 0.15),
                                      ("chain", 0.1)) if self.random.random() < p]
        return f"{kind}|{','.join(flags)}|{self.name}:{i}"

    def run(self) -> None:
        prompts = [self._prompt(i) for i in range(REQUESTS)]
        asked = {i for i, p in enumerate(prompts) if i % ASK_EVERY == 0 and p[:4] != "hold"}
        asker = in_thread(self._ask_all, [prompts[i] for i in sorted(asked)])
        for i, prompt in enumerate(prompts):
            if i not in asked:
                self._tell(prompt)
                self._chaos()
        asker.result(LONG_WAIT_S)

    def _ask_all(self, prompts: list[str]) -> None:
        for prompt in prompts:
            future: Future[Any] = Future()
            try:
                future.set_result(("ok", self.ref.ask(prompt, timeout=LONG_WAIT_S)))
            except TurnError as exc:
                future.set_result(("error", exc.reason))
            self.asks.append((prompt, future))

    def _tell(self, prompt: str) -> None:
        if prompt.startswith("hold"):
            reached, released = self.holds.add(prompt)
        ref = self.ref.tell_with_completion(prompt, self.on_completion, timeout=WAIT_S)
        self.tells[ref] = prompt
        if not prompt.startswith("hold"):
            return
        with self.cond:  # held mid-stream, or already finished (a random interrupt hit it)
            assert self.cond.wait_for(lambda: reached.is_set() or ref in self.completions,
                                      LONG_WAIT_S)
        self.interrupt_results.append((prompt, self.ref.interrupt_request(ref, WAIT_S)))
        released.set()

    def _chaos(self) -> None:
        roll = self.random.random()
        if roll < 0.05:
            gen_agent.interrupt(self.name)
        elif roll < 0.08:
            self.ref.halt()
            self.ref.resume()
        elif roll < 0.14:
            gen_agent.notify(self.name, self.random.choice(["crash", "prompt", "noop"]))

    def wait_all_completions(self) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.completions) >= len(self.tells),
                                      LONG_WAIT_S), "some tells never completed"


def test_many_agents_many_turns_every_caller_answered_exactly_once() -> None:
    with TelemetryRecorder([TURN_START, TURN_STOP, TURN_ERROR]) as rec:
        clients = [Client(i) for i in range(AGENTS)]
        runs = [in_thread(client.run) for client in clients]
        for run in runs:
            run.result(LONG_WAIT_S)
        for client in clients:
            client.wait_all_completions()
            client.ref.status(timeout=WAIT_S)  # every step that could emit has finished
        for client in clients:
            gen_agent.stop(client.name)
        records = rec.records

    assert gen_agent.list_agents() == []
    total = 0
    for client in clients:
        assert not client.ref.is_alive() and client.ref.exit_reason == "shutdown"
        # exactly one completion per accepted tell, none after the stop
        assert set(client.completions) == set(client.tells)
        assert all(len(outcomes) == 1 for outcomes in client.completions.values())
        for ref, prompt in client.tells.items():
            got = _summary(client.completions[ref][0])
            assert got in (_expected(prompt), "interrupted"), (prompt, got)
        for prompt, future in client.asks:
            got = _summary(future.result(0))
            assert got in (_expected(prompt), "interrupted"), (prompt, got)
        for prompt, result in client.interrupt_results:
            assert result in ("accepted", "not_current", "idle"), (prompt, result)
        total += len(client.tells) + len(client.asks)

        mine = [r for r in records if r.metadata["agent"] == client.name]
        started = sorted(repr((r.metadata["ref"], r.metadata["attempt"]))
                         for r in mine if r.event_name == TURN_START)
        ended = sorted(repr((r.metadata["ref"], r.metadata["attempt"]))
                       for r in mine if r.event_name != TURN_START)
        assert started == ended  # exactly one terminal event per started attempt
    assert total == AGENTS * REQUESTS
