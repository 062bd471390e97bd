"""Agent lifecycle: start_agent (options, every start error), pre_run, the registry (whereis,
list_agents, names reused after stop), current_name, and stop (contract §2.1, §2.2, §2.19-§2.22,
§3.3, §3.4, §3.12, §4.3, §4.19, §9)."""

from __future__ import annotations

import queue
import threading
from typing import Any

import pytest
from _agents import WAIT_S, CallLog, Probe, failure, in_thread, start

import gen_agent
from gen_agent import (
    AgentDown,
    AgentNotFound,
    AgentStartError,
    AlreadyStarted,
    GenAgent,
    InitAgentError,
    NoReply,
    PreRunError,
    RequestError,
    SessionStartError,
    TurnError,
)
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend, MockSession
from gen_agent.telemetry import TERMINATED, TelemetryRecorder

RESERVED = {
    "watchdog_ms": 1_000, "shutdown_ms": 1_000, "max_tell_results": 3,
    "max_tell_result_bytes": 10_000, "max_events_per_turn": 5, "max_event_bytes_per_turn": 10_000,
    "event_retention": "lossless", "max_pending_prompts": 4, "max_pending_prompt_bytes": 1_000,
    "max_pending_notifications": 4, "max_pending_notification_bytes": 1_000,
}


class OptsRecorder(GenAgent):
    """Records the options init_agent receives into `opts["sink"]` (a list)."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        opts["sink"].append(dict(opts))
        return {}, None

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return NoReply(state)


# --- start_agent: options (§2.2) -------------------------------------------------------------


def test_start_returns_a_registered_idle_agent() -> None:
    ref = start(state={"n": 0})

    assert ref.name == "a" and ref.is_alive()
    assert gen_agent.whereis("a") == ref
    assert gen_agent.list_agents() == ["a"]
    status = ref.status(timeout=WAIT_S)
    assert (status.state, status.queued, status.current_request) == ("idle", 0, None)
    assert (status.halted, status.halt_pending, status.draining) == (False, False, False)
    assert status.agent_state == {"n": 0}


def test_reserved_options_are_consumed_and_every_other_option_is_forwarded() -> None:
    sink: list[dict[str, Any]] = []

    gen_agent.start_agent(OptsRecorder, name="a", backend=MockBackend, sink=sink,
                          color="red", task_supervisor="mine", **RESERVED)

    assert sink == [{"sink": sink, "color": "red", "task_supervisor": "mine"}]


@pytest.mark.parametrize(("option", "value"), [
    ("watchdog_ms", 0), ("watchdog_ms", -5), ("watchdog_ms", 1.5), ("watchdog_ms", "10"),
    ("watchdog_ms", True), ("max_tell_results", -1), ("max_tell_result_bytes", "big"),
    ("max_events_per_turn", 0), ("max_event_bytes_per_turn", 0), ("max_event_bytes_per_turn", -1),
    ("event_retention", "everything"), ("max_pending_prompts", -1),
    ("max_pending_prompt_bytes", 2.0), ("max_pending_notifications", -1),
    ("max_pending_notification_bytes", False),
])
def test_an_invalid_reserved_option_fails_the_start_with_init_failed(option: str,
                                                                    value: Any) -> None:
    log = CallLog()

    with pytest.raises(AgentStartError) as info:
        start(log=log, **{option: value})

    assert info.value.reason == ("init_failed", "error", "ValueError")
    assert log.entries == []  # init_agent never ran
    assert gen_agent.whereis("a") is None and gen_agent.list_agents() == []
    assert start(log=log).is_alive()  # the name is free at once


def test_none_means_default_for_every_reserved_option() -> None:
    g = mock.gate(mock.text_turn("ok"))
    ref = start(scripts=[g], **{key: None for key in RESERVED})

    ref.tell("go", timeout=WAIT_S)
    g.wait_blocked(WAIT_S)
    current = ref.runtime_snapshot(timeout=WAIT_S).current_request
    g.release()

    assert current is not None and current.watchdog_ms == 600_000


@pytest.mark.parametrize("value", ["infinity", float("inf")])
def test_an_infinite_watchdog_is_disabled(value: Any) -> None:
    g = mock.gate(mock.text_turn("ok"))
    ref = start(scripts=[g], watchdog_ms=value)

    ref.tell("go", timeout=WAIT_S)
    g.wait_blocked(WAIT_S)
    current = ref.runtime_snapshot(timeout=WAIT_S).current_request
    g.release()

    assert current is not None and current.watchdog_ms is None


@pytest.mark.parametrize("value", [-1, "soon", 1.5, True])
def test_an_invalid_shutdown_window_raises_value_error_in_the_caller(value: Any) -> None:
    log = CallLog()

    with pytest.raises(ValueError, match="shutdown_ms"):
        start(log=log, shutdown_ms=value)

    assert log.entries == [] and gen_agent.list_agents() == []


@pytest.mark.parametrize("value", [0, 1, "infinity"])
def test_valid_shutdown_windows_are_accepted(value: Any) -> None:
    assert start(shutdown_ms=value).is_alive()


def test_name_and_backend_are_required() -> None:
    with pytest.raises(TypeError):
        gen_agent.start_agent(Probe, backend=MockBackend)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        gen_agent.start_agent(Probe, name="a")  # type: ignore[call-arg]
    assert gen_agent.list_agents() == []


# --- start_agent: start errors (§2.2) --------------------------------------------------------


class Refuses(Probe):
    def init_agent(self, opts: dict[str, Any]) -> Any:
        super().init_agent(opts)
        return opts["outcome"]()


def _raise(exc: BaseException) -> Any:
    raise exc


@pytest.mark.parametrize(("outcome", "reason"), [
    (lambda: _raise(InitAgentError(("quota", 3))), ("init_agent_failed", ("quota", 3))),
    (lambda: _raise(InitAgentError("no")), ("init_agent_failed", "no")),
    (lambda: "nope", ("init_agent_failed", "nope")),
    (lambda: None, ("init_agent_failed", None)),
    (lambda: ({},), ("init_agent_failed", ({},))),
    (lambda: ([], None), ("init_agent_failed", ([], None))),
    (lambda: ({}, None, 1), ("init_agent_failed", ({}, None, 1))),
    (lambda: _raise(KeyError("x")), ("init_failed", "error", "KeyError")),
    (lambda: _raise(ZeroDivisionError()), ("init_failed", "error", "ZeroDivisionError")),
])
def test_init_agent_failures(outcome: Any, reason: Any) -> None:
    log = CallLog()

    with pytest.raises(AgentStartError) as info:
        start(Refuses, log=log, outcome=outcome)

    assert info.value.reason == reason
    assert log.names() == ["init_agent"]  # neither pre_run nor terminate_agent ran
    assert gen_agent.whereis("a") is None and gen_agent.list_agents() == []
    assert start(log=log).is_alive()


class Sessions(MockBackend):
    """MockBackend that records every session it starts or terminates."""

    started: list[Any] = []
    terminated: list[Any] = []

    @classmethod
    def start_session(cls, opts: Any) -> MockSession:
        if opts.get("explode"):
            raise RuntimeError("boom")
        session = super().start_session({k: v for k, v in opts.items() if k != "explode"})
        cls.started.append(session)
        return session

    @classmethod
    def terminate_session(cls, session: MockSession) -> None:
        cls.terminated.append(session)
        super().terminate_session(session)


class ExplodingSession(Probe):
    def init_agent(self, opts: dict[str, Any]) -> Any:
        backend_opts, state = super().init_agent(opts)
        return {**backend_opts, "explode": opts.get("explode", False),
                "start_error": opts.get("start_error")}, state


@pytest.fixture
def sessions() -> Any:
    Sessions.started, Sessions.terminated = [], []
    return Sessions


def test_a_session_start_error_fails_with_backend_start_failed(sessions: Any) -> None:
    log = CallLog()

    with pytest.raises(AgentStartError) as info:
        gen_agent.start_agent(ExplodingSession, name="a", backend=sessions, log=log,
                              start_error=("no_quota", 429))

    assert info.value.reason == ("backend_start_failed", ("no_quota", 429))
    assert log.names() == ["init_agent"]
    assert sessions.terminated == [] and gen_agent.list_agents() == []


def test_a_crashing_session_start_fails_with_init_failed(sessions: Any) -> None:
    log = CallLog()

    with pytest.raises(AgentStartError) as info:
        gen_agent.start_agent(ExplodingSession, name="a", backend=sessions, log=log,
                              explode=True)

    assert info.value.reason == ("init_failed", "error", "RuntimeError")
    assert log.names() == ["init_agent"]
    assert sessions.terminated == [] and gen_agent.list_agents() == []


def test_start_error_reasons_never_carry_the_exception_message() -> None:
    secret = "sk-secret-token"

    with pytest.raises(AgentStartError) as info:
        start(Refuses, outcome=lambda: _raise(ValueError(secret)))

    assert secret not in repr(info.value.reason) and secret not in str(info.value)


def test_a_session_start_error_is_a_distinct_exception() -> None:
    assert issubclass(SessionStartError, gen_agent.GenAgentError)


# --- pre_run (§3.4, §4.3) --------------------------------------------------------------------


def test_start_returns_before_pre_run_and_calls_wait_for_it() -> None:
    entered, go = threading.Event(), threading.Event()

    def pre_run(state: Any) -> Any:
        entered.set()
        assert go.wait(WAIT_S)
        return "after pre_run"

    ref = start(hooks={"pre_run": pre_run}, scripts=[mock.text_turn("hi")])
    assert entered.wait(WAIT_S)  # start_agent returned while pre_run is still running
    status = in_thread(ref.status, WAIT_S)
    ask = in_thread(ref.ask, "q", WAIT_S)
    go.set()

    assert status.result(WAIT_S).agent_state == "after pre_run"
    assert ask.result(WAIT_S).text == "hi"


@pytest.mark.parametrize(("error", "reason"), [
    (PreRunError(("config", "missing")), ("pre_run_failed", ("config", "missing"))),
    (ValueError("secret"), ("pre_run_crashed", "ValueError")),
])
def test_a_failing_pre_run_stops_the_agent_and_runs_the_terminate_callbacks(
        sessions: Any, error: Exception, reason: Any) -> None:
    log, go = CallLog(), threading.Event()

    def pre_run(state: Any) -> Any:
        assert go.wait(WAIT_S)
        raise error

    with TelemetryRecorder([TERMINATED]) as rec:
        ref = gen_agent.start_agent(ExplodingSession, name="a", backend=sessions, log=log,
                                    hooks={"pre_run": pre_run})
        waiting = in_thread(ref.ask, "q", WAIT_S)  # waits behind pre_run
        go.set()
        assert ref.wait_stopped(WAIT_S)
        terminated = rec.wait_for(TERMINATED)

    assert ref.exit_reason == reason
    assert log.of("terminate_agent") == [("terminate_agent", reason)]
    assert sessions.terminated == sessions.started
    assert terminated.metadata == {"agent": "a", "reason": reason}
    exc = failure(waiting)
    assert isinstance(exc, (AgentDown, AgentNotFound))
    assert gen_agent.whereis("a") is None and gen_agent.list_agents() == []


# --- registry: AlreadyStarted, whereis, list_agents, reuse (§2.20, §2.21, §9) ----------------


def test_a_duplicate_name_raises_already_started_and_leaves_the_first_alone() -> None:
    first = start(state="first")

    with pytest.raises(AlreadyStarted) as info:
        start(state="second")

    assert info.value.name == "a" and info.value.agent == first
    assert first.status(timeout=WAIT_S).agent_state == "first"


def test_a_name_is_taken_while_its_agent_is_still_initializing() -> None:
    entered, go = threading.Event(), threading.Event()

    class SlowInit(Probe):
        def init_agent(self, opts: dict[str, Any]) -> Any:
            entered.set()
            assert go.wait(WAIT_S)
            return super().init_agent(opts)

    first = in_thread(start, SlowInit)
    assert entered.wait(WAIT_S)
    try:
        with pytest.raises(AlreadyStarted):
            start()
    finally:
        go.set()
    assert first.result(WAIT_S).is_alive()


def test_a_name_is_reusable_after_stop_and_old_refs_never_match() -> None:
    first = start(scripts=[mock.text_turn("one")], state="old")
    old_ref = first.tell("q", timeout=WAIT_S)
    first.stop()

    second = start(state="new")

    assert not first.is_alive() and second.is_alive() and second != first
    assert gen_agent.whereis("a") == second
    assert second.status(timeout=WAIT_S).agent_state == "new"
    assert second.poll(old_ref, timeout=WAIT_S).reason == "not_found"


def test_whereis_returns_the_live_ref_or_none() -> None:
    ref = start(name=("team", 7))

    assert gen_agent.whereis(("team", 7)) == ref
    assert gen_agent.whereis("missing") is None
    ref.stop()
    assert gen_agent.whereis(("team", 7)) is None


def test_list_agents_lists_every_live_name() -> None:
    names = ["a", ("team", 1), 42, frozenset({"x"})]
    refs = [start(name=name) for name in names]

    assert sorted(map(repr, gen_agent.list_agents())) == sorted(map(repr, names))
    refs[1].stop()
    assert sorted(map(repr, gen_agent.list_agents())) == sorted(
        repr(n) for n in names if n != ("team", 1))


# --- current_name (§2.22) --------------------------------------------------------------------


class NameProbe(GenAgent):
    """Records `current_name()` in every callback, in the backend and in a spawned thread."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        self.seen: queue.Queue[tuple[str, Any]] = opts["seen"]
        self.seen.put(("init_agent", gen_agent.current_name()))

        def script(prompt: str) -> Any:
            self.seen.put(("backend_prompt", gen_agent.current_name()))
            return mock.text_turn("ok")

        return {"scripts": [script]}, None

    def _note(self, where: str) -> None:
        self.seen.put((where, gen_agent.current_name()))

    def pre_run(self, state: Any) -> Any:
        self._note("pre_run")
        return state

    def pre_turn(self, prompt: str, state: Any) -> Any:
        self._note("pre_turn")
        return gen_agent.Proceed(prompt, state)

    def handle_stream_event(self, event: Any, state: Any) -> Any:
        self._note("handle_stream_event")
        return state

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        self._note("handle_response")
        spawned = threading.Thread(target=lambda: self._note("spawned_thread"))
        spawned.start()
        spawned.join(WAIT_S)
        return NoReply(state)

    def post_turn(self, outcome: Any, ref: Any, state: Any) -> Any:
        self._note("post_turn")
        return state

    def handle_event(self, event: Any, state: Any) -> Any:
        self._note("handle_event")
        return NoReply(state)

    def handle_info(self, message: Any, state: Any) -> Any:
        self._note("handle_info")
        return NoReply(state)

    def post_run(self, state: Any) -> None:
        self._note("post_run")

    def terminate_agent(self, reason: Any, state: Any) -> None:
        self._note("terminate_agent")


def test_current_name_is_set_in_agent_threads_and_none_elsewhere() -> None:
    name = ("worker", 3)
    seen: queue.Queue[tuple[str, Any]] = queue.Queue()
    ref = gen_agent.start_agent(NameProbe, name=name, backend=MockBackend, seen=seen)

    ref.ask("q", timeout=WAIT_S)
    ref.notify_ack("e", timeout=WAIT_S)
    gen_agent.send(name, "info")
    ref.halt()
    ref.stop()
    observed = dict(seen.get_nowait() for _ in range(seen.qsize()))

    assert observed == {
        "init_agent": name, "pre_run": name, "pre_turn": name, "backend_prompt": name,
        "handle_stream_event": name, "handle_response": name, "spawned_thread": None,
        "post_turn": name, "handle_event": name, "handle_info": name, "post_run": name,
        "terminate_agent": name,
    }
    assert gen_agent.current_name() is None


# --- stop (§2.19, §4.19) ---------------------------------------------------------------------


def test_stop_answers_the_active_and_queued_asks_with_agent_terminated() -> None:
    g = mock.gate(mock.text_turn("never"))
    ref = start(scripts=[g, mock.text_turn("b"), mock.text_turn("c")])
    with TelemetryRecorder([gen_agent.telemetry.MAILBOX_QUEUED]) as rec:
        active = in_thread(ref.ask, "a", WAIT_S)
        g.wait_blocked(WAIT_S)
        queued = [in_thread(ref.ask, p, WAIT_S) for p in ("b", "c")]
        rec.wait_for(lambda r: r.measurements["depth"] == 2)

        ref.stop()

    for future in (active, *queued):
        exc = failure(future)
        assert isinstance(exc, TurnError) and exc.reason == ("agent_terminated", "shutdown")
    assert g.cancelled  # the turn task was cancelled
    assert ref.exit_reason == "shutdown"


def test_stop_answers_asks_queued_in_a_halted_agent() -> None:
    ref = start(scripts=[mock.text_turn("never")])
    ref.halt()
    with TelemetryRecorder([gen_agent.telemetry.MAILBOX_QUEUED]) as rec:
        queued = [in_thread(ref.ask, p, WAIT_S) for p in ("a", "b")]
        rec.wait_for(lambda r: r.measurements["depth"] == 2)

        ref.stop()

    for future in queued:
        exc = failure(future)
        assert isinstance(exc, TurnError) and exc.reason == ("agent_terminated", "shutdown")


def test_stop_runs_terminate_agent_then_terminate_session_then_telemetry(sessions: Any) -> None:
    log = CallLog()
    ref = gen_agent.start_agent(ExplodingSession, name="a", backend=sessions, log=log,
                                state={"final": True},
                                hooks={"terminate_agent": lambda reason, state: log.add(
                                    "terminate_state", state, list(sessions.terminated))})
    sessions_at_event: list[int] = []
    gen_agent.telemetry.attach("test-terminated-order", TERMINATED,
                               lambda *a: sessions_at_event.append(len(sessions.terminated)))
    try:
        with TelemetryRecorder([TERMINATED]) as rec:
            gen_agent.stop("a")
            terminated = rec.wait_for(TERMINATED)
    finally:
        gen_agent.telemetry.detach("test-terminated-order")

    assert log.of("terminate_agent") == [("terminate_agent", "shutdown")]
    assert log.of("terminate_state") == [("terminate_state", {"final": True}, [])]
    assert sessions.terminated == sessions.started and sessions.started[0].terminated
    assert sessions_at_event == [1]  # the session was terminated before the event
    assert terminated.metadata == {"agent": "a", "reason": "shutdown"}
    assert not ref.is_alive() and ref.wait_stopped(WAIT_S)
    assert gen_agent.whereis("a") is None and gen_agent.list_agents() == []
    with pytest.raises(AgentNotFound):
        gen_agent.status("a", timeout=WAIT_S)
    with pytest.raises(AgentDown):  # the ref addresses its (stopped) incarnation
        ref.status(timeout=WAIT_S)


def test_stop_through_the_agent_ref() -> None:
    ref = start()

    ref.stop()

    assert not ref.is_alive() and ref.exit_reason == "shutdown"
    assert gen_agent.list_agents() == []


def test_stop_of_a_missing_name_raises_agent_not_found() -> None:
    with pytest.raises(AgentNotFound) as info:
        gen_agent.stop("ghost")
    assert isinstance(info.value, LookupError)

    start().stop()
    with pytest.raises(AgentNotFound):
        gen_agent.stop("a")


def _try_stop(log: CallLog, where: str) -> None:
    try:
        gen_agent.stop(gen_agent.current_name())
    except RequestError as exc:
        log.add("stop_refused", where, exc.reason)
    own = gen_agent.whereis(gen_agent.current_name())
    try:
        own.stop()  # through the AgentRef too
    except RequestError as exc:
        log.add("ref_stop_refused", where, exc.reason)


@pytest.mark.parametrize("where", ["pre_turn", "handle_stream_event", "handle_response",
                                   "post_turn", "handle_event", "post_run"])
def test_a_synchronous_self_stop_is_refused(where: str) -> None:
    log = CallLog()
    defaults = {
        "pre_turn": lambda prompt, state: gen_agent.Proceed(prompt, state),
        "handle_stream_event": lambda event, state: state,
        "handle_response": lambda ref, response, state: NoReply(state),
        "post_turn": lambda outcome, ref, state: state,
        "handle_event": lambda event, state: NoReply(state),
        "post_run": lambda state: None,
    }

    def hook(*args: Any) -> Any:
        _try_stop(log, where)
        return defaults[where](*args)

    ref = start(log=log, hooks={where: hook}, scripts=[mock.text_turn("ok")])
    ref.ask("q", timeout=WAIT_S)
    ref.notify_ack("e", timeout=WAIT_S)
    ref.halt()

    assert log.wait_for(lambda e: e[0] == "stop_refused")[1:] == (where, "self_stop")
    assert log.wait_for(lambda e: e[0] == "ref_stop_refused")[1:] == (where, "self_stop")
    assert ref.is_alive() and ref.status(timeout=WAIT_S).halted


def test_a_callback_may_stop_another_agent() -> None:
    other = start(name="other")

    def handle_response(ref: Any, response: Any, state: Any) -> Any:
        gen_agent.stop("other")
        return NoReply("stopped other")

    ref = start(hooks={"handle_response": handle_response}, scripts=[mock.text_turn("ok")])
    ref.ask("q", timeout=WAIT_S)

    assert not other.is_alive() and other.exit_reason == "shutdown"
    assert ref.status(timeout=WAIT_S).agent_state == "stopped other"


def test_a_thread_spawned_by_a_callback_may_stop_its_agent() -> None:
    stopper: list[threading.Thread] = []

    def handle_response(ref: Any, response: Any, state: Any) -> Any:
        thread = threading.Thread(target=gen_agent.stop, args=("a",))
        thread.start()
        stopper.append(thread)
        return NoReply(state)

    ref = start(hooks={"handle_response": handle_response}, scripts=[mock.text_turn("ok")])
    ref.ask("q", timeout=WAIT_S)

    assert ref.wait_stopped(WAIT_S) and ref.exit_reason == "shutdown"
    stopper[0].join(WAIT_S)
    assert gen_agent.list_agents() == []


def test_an_agent_that_outlives_its_shutdown_window_is_killed_without_cleanup() -> None:
    log = CallLog()
    g = mock.gate(mock.text_turn("one"))
    entered, release = threading.Event(), threading.Event()
    completions: queue.Queue[Any] = queue.Queue()

    def handle_response(ref: Any, response: Any, state: Any) -> Any:
        entered.set()
        release.wait(WAIT_S)  # outlives the 50 ms shutdown window
        return NoReply(state)

    ref = start(log=log, shutdown_ms=50, hooks={"handle_response": handle_response},
                scripts=[g, mock.text_turn("two")])
    with TelemetryRecorder([gen_agent.telemetry.TURN_START, TERMINATED]) as rec:
        asked = in_thread(ref.ask, "one", WAIT_S)
        g.wait_blocked(WAIT_S)
        ref.tell_with_completion("two", completions, timeout=WAIT_S)  # queued behind
        g.release()
        assert entered.wait(WAIT_S)

        gen_agent.stop("a")  # returns once the window expired and the agent was killed

        exc = failure(asked)
        assert isinstance(exc, AgentDown) and exc.reason == "killed"
        assert ref.exit_reason == "killed" and not ref.is_alive()
        assert gen_agent.whereis("a") is None and gen_agent.list_agents() == []
        release.set()
        assert ref.wait_stopped(WAIT_S)
        starts = rec.named(gen_agent.telemetry.TURN_START)
        terminated = rec.named(TERMINATED)

    assert log.of("terminate_agent") == [] and terminated == []  # no cleanup after a kill
    assert len(starts) == 1  # nothing is dispatched once the agent was killed
    assert completions.empty()
