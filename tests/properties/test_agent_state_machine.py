"""A hypothesis state machine over ask / tell / notify / interrupt / halt / resume, checking
the invariants of contract Appendix B against a small model of the agent:

1. one turn at a time (turn telemetry alternates start → stop|error for the same ref), and
   FIFO dispatch of queued work;
3. every logical ask/tell gets exactly one outcome (reply, completion), overload included;
4. notifications that arrive mid-turn never mutate the state the decision callback sees;
   they are applied after the turn, in order;
5. halting freezes dispatch only: requests queue, notifications are still applied;
7. the prompt mailbox and the notification buffer stay within their bounds.

Every turn blocks in a gate until the machine releases it (or interrupts it), so the agent
only moves when the machine acts, and the machine waits for each move on telemetry.
"""

from __future__ import annotations

import itertools
import queue
import threading
from concurrent.futures import Future
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import gen_agent
from gen_agent import Event, NoReply, Proceed, RequestRef, TurnError
from gen_agent.telemetry import (
    MAILBOX_QUEUED,
    PROMPT_START,
    TURN_ERROR,
    TURN_REJECTED,
    TURN_START,
    TURN_STOP,
    TelemetryRecord,
    TelemetryRecorder,
)

T = 5.0  # seconds: the bound of every wait in this file
MAX_PROMPTS = 2
MAX_NOTES = 2
_names = itertools.count()


class Gates:
    """Per-prompt release switches shared by the test and the backend. Thread-safe."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._released: set[str] = set()
        self._open_all = False

    def release(self, prompt: str) -> None:
        with self._cond:
            self._released.add(prompt)
            self._cond.notify_all()

    def open_all(self) -> None:
        with self._cond:
            self._open_all = True
            self._cond.notify_all()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def wait(self, prompt: str, context: Any) -> bool:
        """Block until `prompt` is released (True) or its turn is cancelled (False)."""
        with self._cond:
            self._cond.wait_for(lambda: self._open_all or prompt in self._released
                                or context.cancelled, T)
            return not context.cancelled


class GatedBackend:
    """Every turn waits for its prompt's gate, then answers with the prompt as its text."""

    @staticmethod
    def start_session(opts: dict[str, Any]) -> Gates:
        return opts["gates"]

    @staticmethod
    def prompt(session: Gates, prompt: str, context: Any) -> tuple[Any, Gates]:
        def stream() -> Any:
            if session.wait(prompt, context):
                yield Event.new("text", {"text": prompt})
                yield Event.new("result", {"text": prompt})

        return stream(), session

    @staticmethod
    def cancel(session: Gates) -> None:
        session.wake()

    @staticmethod
    def terminate_session(session: Gates) -> None:
        session.wake()


class Modelled(gen_agent.GenAgent):
    """State: the tuple of applied notifications. Records a violation whenever a decision
    callback sees a state other than the one retained at dispatch."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        self.violations: list[Any] = opts["violations"]
        self.at_dispatch: Any = None
        return {"gates": opts["gates"]}, ()

    def pre_turn(self, prompt: str, state: Any) -> Any:
        self.at_dispatch = state
        return Proceed(prompt, state)

    def _check(self, where: str, state: Any) -> None:
        if state != self.at_dispatch:
            self.violations.append((where, self.at_dispatch, state))

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        self._check("handle_response", state)
        return NoReply(state)

    def handle_error(self, ref: Any, reason: Any, state: Any) -> Any:
        self._check("handle_error", state)
        return NoReply(state)

    def handle_event(self, event: Any, state: Any) -> Any:
        return NoReply((*state, event))


class Req:
    """One logical request as the model sees it."""

    def __init__(self, kind: str, prompt: str, ref: Any = None,
                 future: Future[Any] | None = None) -> None:
        self.kind = kind
        self.prompt = prompt
        self.ref = ref
        self.future = future
        self.expected: str | None = None  # "ok", "interrupted" or "overloaded"


def ask_in_thread(name: Any, prompt: str) -> Future[Any]:
    future: Future[Any] = Future()

    def run() -> None:
        try:
            future.set_result(gen_agent.ask(name, prompt, timeout=T))
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=run, daemon=True).start()
    return future


class AgentMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.name = f"machine-{next(_names)}"
        self.gates = Gates()
        self.violations: list[Any] = []
        self.inbox: queue.Queue[Any] = queue.Queue()
        self.completions: dict[Any, list[Any]] = {}
        self.rec = TelemetryRecorder()
        self.rec.__enter__()
        gen_agent.start_agent(Modelled, name=self.name, backend=GatedBackend, gates=self.gates,
                              violations=self.violations, max_pending_prompts=MAX_PROMPTS,
                              max_pending_notifications=MAX_NOTES)
        self.counter = itertools.count()
        self.requests: list[Req] = []
        self.current: Req | None = None
        self.queue: list[Req] = []
        self.halted = False
        self.halt_pending = False
        self.applied: tuple[str, ...] = ()
        self.buffered: list[str] = []

    # ------------------------------------------------------------------ telemetry helpers
    def _mark(self) -> set[int]:
        return {id(r) for r in self.rec.records}

    def _wait_new(self, seen: set[int], name: tuple[str, ...], **match: Any) -> TelemetryRecord:
        def predicate(r: TelemetryRecord) -> bool:
            return (id(r) not in seen and r.event_name == name
                    and all(r.metadata.get(k) == v for k, v in match.items()))

        return self.rec.wait_for(predicate, T)

    def _sync(self) -> None:
        gen_agent.status(self.name, timeout=T)  # processed after every earlier cast

    # ------------------------------------------------------------------ model transitions
    def _can_dispatch(self) -> bool:
        return self.current is None and not self.halted

    def _started(self, req: Req, seen: set[int]) -> None:
        record = self._wait_new(seen, PROMPT_START, prompt=req.prompt)
        if req.ref is None:
            req.ref = record.metadata["ref"]
        assert record.metadata["ref"] == req.ref
        self.current = req

    def _finish(self, outcome: str, seen: set[int]) -> None:
        assert self.current is not None
        self.current.expected = outcome
        self.current = None
        self.applied = (*self.applied, *self.buffered)
        self.buffered = []
        if self.halt_pending:
            self.halted, self.halt_pending = True, False
        self._dispatch_next(seen)

    def _dispatch_next(self, seen: set[int]) -> None:
        if self._can_dispatch() and self.queue:
            self._started(self.queue.pop(0), seen)

    # ------------------------------------------------------------------ rules
    @rule(n=st.integers(1, 3))
    def tell(self, n: int) -> None:
        for _ in range(n):
            self._tell_one()

    def _tell_one(self) -> None:
        req = Req("tell", f"t{next(self.counter)}")
        self.requests.append(req)
        seen = self._mark()
        try:
            req.ref = gen_agent.tell_with_completion(self.name, req.prompt, self.inbox,
                                                     timeout=T)
        except TurnError as exc:
            assert len(self.queue) == MAX_PROMPTS and not self._can_dispatch()
            reason, info = exc.reason
            assert (reason, info.queue, info.limit, info.pending_count) \
                == ("overloaded", "prompts", "count", MAX_PROMPTS)
            req.expected = "overloaded"
            return
        assert isinstance(req.ref, RequestRef)
        if self._can_dispatch():
            self._started(req, seen)
        else:
            assert len(self.queue) < MAX_PROMPTS
            self.queue.append(req)

    @rule(n=st.integers(1, 3))
    def ask(self, n: int) -> None:
        for _ in range(n):
            self._ask_one()

    def _ask_one(self) -> None:
        prompt = f"a{next(self.counter)}"
        seen = self._mark()
        req = Req("ask", prompt, future=ask_in_thread(self.name, prompt))
        self.requests.append(req)
        if self._can_dispatch():
            self._started(req, seen)
        elif len(self.queue) < MAX_PROMPTS:
            self._wait_new(seen, MAILBOX_QUEUED)
            self.queue.append(req)
        else:
            self._wait_new(seen, TURN_REJECTED, origin="ask", reason_kind="overloaded")
            req.expected = "overloaded"

    @precondition(lambda self: self.current is not None)
    @rule()
    def release(self) -> None:
        assert self.current is not None
        seen = self._mark()
        self.gates.release(self.current.prompt)
        self._wait_new(seen, TURN_STOP, ref=self.current.ref)
        self._finish("ok", seen)

    @rule()
    def interrupt(self) -> None:
        seen = self._mark()
        gen_agent.interrupt(self.name)
        if self.current is not None:
            self._wait_new(seen, TURN_ERROR, ref=self.current.ref, reason_kind="interrupted")
            self._finish("interrupted", seen)
        self._sync()

    @rule()
    def halt(self) -> None:
        gen_agent.halt(self.name)
        if self.current is None:
            self.halted = True
        else:
            self.halt_pending = True
        self._sync()

    @rule()
    def resume(self) -> None:
        seen = self._mark()
        gen_agent.resume(self.name)
        if self.current is None and self.halted:
            self.halted = False
            self._dispatch_next(seen)
        elif self.current is not None:
            self.halt_pending = False
        self._sync()

    @rule(n=st.integers(1, 3))
    def notify(self, n: int) -> None:
        for _ in range(n):
            note = f"n{next(self.counter)}"
            gen_agent.notify(self.name, note)
            if self.current is None:
                self.applied = (*self.applied, note)  # applied at once, halted or not
            elif len(self.buffered) < MAX_NOTES:
                self.buffered.append(note)
        self._sync()

    # ------------------------------------------------------------------ invariants
    @invariant()
    def agent_matches_the_model(self) -> None:
        status = gen_agent.status(self.name, timeout=T)
        snapshot = gen_agent.runtime_snapshot(self.name, timeout=T)
        assert status.state == ("idle" if self.current is None else "processing")
        assert status.current_request == (None if self.current is None else self.current.ref)
        assert status.queued == len(self.queue) <= MAX_PROMPTS
        assert (status.halted, status.halt_pending) == (self.halted, self.halt_pending)
        assert snapshot.pending_notifications == len(self.buffered) <= MAX_NOTES
        # buffered notifications are not in the state until the turn ended
        assert status.agent_state == self.applied
        assert self.violations == []

    @invariant()
    def one_turn_at_a_time(self) -> None:
        active = None
        for record in self.rec.records:
            if record.event_name == TURN_START:
                assert active is None, "a turn started while another was active"
                active = record.metadata["ref"]
            elif record.event_name in (TURN_STOP, TURN_ERROR):
                assert record.metadata["ref"] == active
                active = None

    @invariant()
    def at_most_one_completion_per_tell(self) -> None:
        while True:
            try:
                message = self.inbox.get_nowait()
            except queue.Empty:
                break
            self.completions.setdefault(message[3], []).append(message[4])
        for outcomes in self.completions.values():
            assert len(outcomes) == 1

    # ------------------------------------------------------------------ teardown
    def teardown(self) -> None:
        try:
            self._finish_everything()
        finally:
            agent = gen_agent.whereis(self.name)
            if agent is not None:
                agent.stop()
            self.rec.__exit__(None, None, None)

    def _finish_everything(self) -> None:
        # Let every remaining request run to its end, then check each got one outcome.
        self.gates.open_all()
        gen_agent.resume(self.name)
        for req in self.requests:
            if req.expected is None:
                req.expected = "ok"
        tells = [r for r in self.requests if r.kind == "tell" and r.expected != "overloaded"]
        while any(r.ref not in self.completions for r in tells):
            message = self.inbox.get(timeout=T)
            self.completions.setdefault(message[3], []).append(message[4])
        for req in self.requests:
            if req.kind == "tell":
                self._check_tell(req)
            else:
                self._check_ask(req)
        self._sync()
        self.at_most_one_completion_per_tell()
        status = gen_agent.status(self.name, timeout=T)
        assert (status.state, status.queued) == ("idle", 0)

    def _check_tell(self, req: Req) -> None:
        if req.expected == "overloaded":
            assert req.ref is None
            return
        (outcome,) = self.completions[req.ref]
        if req.expected == "ok":
            assert outcome[0] == "ok"
            assert outcome[1].prompt == req.prompt
        else:
            assert outcome == ("error", "interrupted")

    def _check_ask(self, req: Req) -> None:
        assert req.future is not None
        error = req.future.exception(T)
        if req.expected == "ok":
            assert error is None
            assert req.future.result().text == req.prompt
        elif req.expected == "interrupted":
            assert isinstance(error, TurnError) and error.reason == "interrupted"
        else:
            assert isinstance(error, TurnError) and error.reason[0] == "overloaded"


def test_agent_state_machine_keeps_the_invariants_of_appendix_b() -> None:
    run_state_machine_as_test(AgentMachine, settings=settings(
        max_examples=50, stateful_step_count=20, deadline=None,
        suppress_health_check=[HealthCheck.too_slow]))
