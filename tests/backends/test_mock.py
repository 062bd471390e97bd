"""Tests for gen_agent.backends.mock, driven directly (no agent), contract §7.5."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
from _agents import Scripted, start

import gen_agent
from gen_agent._errors import AgentNotFound, RequestError, TurnError
from gen_agent._event import Event
from gen_agent._runtime.turn import WORKERS
from gen_agent.backend import (
    Backend,
    DispatchError,
    ResetError,
    SessionStartError,
    TurnContext,
    validate_backend,
)
from gen_agent.backends import mock
from gen_agent.backends.mock import Gate, GateCancelled, MockBackend, MockRaised, MockSession

JOIN_S = 5.0


class Consumer:
    """Consumes a stream in its own thread, as a turn task does."""

    def __init__(self, stream: Iterable[Event]) -> None:
        self.events: list[Event] = []
        self.error: BaseException | None = None
        self._stream = stream
        self.thread = threading.Thread(target=self._run, name="mock-consumer")
        self.thread.start()

    def _run(self) -> None:
        try:
            for event in self._stream:
                self.events.append(event)
        except BaseException as exc:
            self.error = exc

    def join(self) -> Consumer:
        self.thread.join(JOIN_S)
        assert not self.thread.is_alive()
        return self


def context(cancel: threading.Event | None = None) -> TurnContext:
    return TurnContext(
        agent="a",
        ref="r",
        attempt=1,
        cancel_event=cancel or threading.Event(),
        checkpoint=lambda _: None,
    )


def open_session(*scripts: Any, **opts: Any) -> MockSession:
    return MockBackend.start_session({"scripts": list(scripts), **opts})


# --- start_session ---------------------------------------------------------------------------


def test_mock_backend_satisfies_the_backend_contract() -> None:
    validate_backend(MockBackend)
    assert issubclass(MockBackend, Backend)


def test_start_session_defaults() -> None:
    session = MockBackend.start_session({})
    assert (session.session_id, session.history, session.remaining) == (None, [], 0)
    assert session.terminated is False


def test_start_session_with_scripts_and_session_id() -> None:
    session = open_session(mock.text_turn("a"), mock.error("x"), session_id="s-1")
    assert session.session_id == "s-1"
    assert MockBackend.remaining(session) == 2


def test_start_error_refuses_the_session() -> None:
    with pytest.raises(SessionStartError) as info:
        MockBackend.start_session({"start_error": ("missing_api_key", 1), "scripts": [[]]})
    assert info.value.reason == ("missing_api_key", 1)


@pytest.mark.parametrize(
    ("opts", "reason"),
    [
        ({"script": []}, ("unknown_option", "script")),
        ({"scripts": "text"}, ("invalid_option", "scripts")),
        ({"session_id": 5}, ("invalid_option", "session_id")),
        ({"scripts": [[], 42]}, ("invalid_script", 1)),
        ({"scripts": [[Event.new("text"), "not an event"]]}, ("invalid_script", 0)),
    ],
)
def test_start_session_rejects_malformed_options(opts: dict[str, Any], reason: Any) -> None:
    with pytest.raises(SessionStartError) as info:
        MockBackend.start_session(opts)
    assert info.value.reason == reason


# --- the options of the real backends ----------------------------------------------------------


@pytest.mark.parametrize("module", ["claude", "codex", "anthropic", "openai"])
def test_every_option_of_a_bundled_backend_is_accepted_and_recorded(module: str) -> None:
    import importlib

    declared = importlib.import_module(f"gen_agent.backends.{module}").OPTIONS
    assert declared <= mock.OPTIONS | mock.provider_options()
    given = {key: f"value of {key}" for key in declared - {"session_id", "tools"}}
    session = MockBackend.start_session({**given, "scripts": [mock.text_turn("hi")]})
    assert dict(session.options) == given  # as given, the scripts left out
    with pytest.raises(TypeError):
        session.options["model"] = "changed"  # type: ignore[index]


def test_the_real_options_are_recorded_beside_the_mock_s_own() -> None:
    def word_count(text: str) -> int:
        """Count the words of `text`."""
        return len(text.split())

    definition = {"name": "web_search", "type": "web_search_20250305"}
    session = MockBackend.start_session({
        "model": "claude-sonnet-4-5", "system": "Be brief.", "max_tokens": 256,
        "tools": [word_count, definition], "session_id": "s-1",
        "scripts": [mock.text_turn("ok")], "reset_error": None})
    assert dict(session.options) == {"model": "claude-sonnet-4-5", "system": "Be brief.",
                                     "max_tokens": 256, "tools": [word_count, definition],
                                     "session_id": "s-1"}
    # The Python tool runs in a tool_round; the provider definition is only recorded.
    assert [tool.name for tool in session.tools] == ["word_count"]


def test_an_option_no_backend_knows_still_fails_the_start_listing_the_known_ones() -> None:
    with pytest.raises(SessionStartError) as info:
        MockBackend.start_session({"model": "m", "colour": "red"})
    assert info.value.reason == ("unknown_option", "colour")
    message = str(info.value)
    assert "'scripts'" in message and "'system'" in message and "'system_prompt'" in message


def test_with_options_gives_the_scripts_under_the_agent_s_options(agent_system) -> None:
    class Reviewer(gen_agent.GenAgent):
        def init_agent(self, opts: Any) -> Any:
            return {"model": "claude-sonnet-4-5", "system": "Review.", "max_tokens": 64}, None

        def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
            return gen_agent.NoReply(state)

    backend = MockBackend.with_options(scripts=[mock.text_turn("LGTM")], session_id="s-9")
    assert issubclass(backend, MockBackend) and backend.__name__ == "MockBackend"
    gen_agent.start_agent(Reviewer, name="reviewer", backend=backend)
    assert gen_agent.ask("reviewer", "Review this diff.", timeout=JOIN_S).text == "LGTM"
    session = gen_agent.backend_session("reviewer")
    assert dict(session.options) == {"model": "claude-sonnet-4-5", "system": "Review.",
                                     "max_tokens": 64, "session_id": "s-9"}
    assert MockBackend.history("reviewer") == ["Review this diff."]
    # Presets stack, the later winning; they stay checked at each start.
    again = backend.with_options(session_id="s-10")
    assert again.start_session({}).session_id == "s-10"
    with pytest.raises(SessionStartError) as info:
        MockBackend.with_options(colour="red").start_session({})
    assert info.value.reason == ("unknown_option", "colour")


def test_start_session_rejects_a_non_mapping() -> None:
    with pytest.raises(SessionStartError) as info:
        MockBackend.start_session([("scripts", [])])  # type: ignore[arg-type]
    assert info.value.reason == ("invalid_option", "opts")


# --- prompt: each script form ----------------------------------------------------------------


def test_list_script_returns_the_events_and_the_same_session() -> None:
    events = mock.text_turn("hello", session_id="s-2")
    session = open_session(events)
    stream, new_session = MockBackend.prompt(session, "hi", context())
    assert new_session is session
    assert list(stream) == events
    assert session.history == ["hi"]
    assert session.remaining == 0


def test_list_script_streams_a_copy() -> None:
    events = [Event.new("result", {"text": "x"})]
    session = open_session(events)
    stream, _ = MockBackend.prompt(session, "p")
    events.append(Event.new("text"))
    assert [e.kind for e in stream] == ["result"]


def test_tuple_script_is_a_stream_too() -> None:
    session = open_session(tuple(mock.error_turn("bad")))
    stream, _ = MockBackend.prompt(session, "p", context())
    assert [(e.kind, e.data) for e in stream] == [("error", {"reason": "bad"})]


def test_callable_script_is_called_with_the_prompt_in_the_calling_thread() -> None:
    calls: list[tuple[str, threading.Thread]] = []

    def script(prompt: str) -> list[Event]:
        calls.append((prompt, threading.current_thread()))
        return mock.text_turn(prompt.upper())

    session = open_session(script)
    stream, _ = MockBackend.prompt(session, "shout", context())
    assert calls == [("shout", threading.current_thread())]
    assert [e.data.get("text") for e in stream] == ["SHOUT", "SHOUT"]


def test_error_script_raises_dispatch_error_and_records_the_prompt() -> None:
    session = open_session(mock.error(("http_error", 500, {})), mock.text_turn("after"))
    with pytest.raises(DispatchError) as info:
        MockBackend.prompt(session, "first", context())
    assert info.value.reason == ("http_error", 500, {})
    stream, _ = MockBackend.prompt(session, "second", context())
    assert list(stream)[-1].data == {"text": "after"}
    assert MockBackend.history(session) == ["first", "second"]


def test_raising_script_with_an_exception_raises_it_only_when_consumed() -> None:
    boom = ConnectionResetError("reset")
    session = open_session(mock.raising(boom))
    stream, _ = MockBackend.prompt(session, "p", context())
    with pytest.raises(ConnectionResetError) as info:
        next(iter(stream))
    assert info.value is boom


def test_raising_script_with_a_reason_raises_mock_raised() -> None:
    session = open_session(mock.raising(("custom", 1)))
    stream, _ = MockBackend.prompt(session, "p", context())
    with pytest.raises(MockRaised) as info:
        list(stream)
    assert info.value.reason == ("custom", 1)
    assert str(info.value) == "mock backend raised: ('custom', 1)"


def test_no_script_left_is_a_dispatch_error_and_still_recorded() -> None:
    session = open_session()
    with pytest.raises(DispatchError) as info:
        MockBackend.prompt(session, "lonely", context())
    assert info.value.reason == "no_script"
    assert session.history == ["lonely"]


def test_concurrent_prompts_pop_each_script_exactly_once() -> None:
    scripts = [mock.text_turn(str(i)) for i in range(200)]
    session = open_session(*scripts)
    texts: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(4)

    def worker(n: int) -> None:
        barrier.wait(JOIN_S)
        for i in range(50):
            stream, _ = MockBackend.prompt(session, f"{n}-{i}")
            text = list(stream)[-1].data["text"]
            with lock:
                texts.append(text)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_S)
    assert sorted(texts, key=int) == [str(i) for i in range(200)]
    assert len(session.history) == 200
    assert session.remaining == 0


# --- gates ----------------------------------------------------------------------------------


def test_gate_blocks_until_released_then_yields_its_events() -> None:
    events = mock.text_turn("released")
    g = mock.gate(events)
    session = open_session(g)
    stream, _ = MockBackend.prompt(session, "p", context())
    assert (g.reached, g.blocked, g.released) == (False, False, False)
    consumer = Consumer(stream)
    assert g.wait_blocked(JOIN_S) is True
    assert g.blocked is True
    assert g.thread is consumer.thread
    assert consumer.events == []
    g.release()
    consumer.join()
    assert consumer.error is None
    assert consumer.events == events
    assert (g.blocked, g.released, g.cancelled) == (False, True, False)


def test_a_gate_timeout_must_be_finite_and_positive() -> None:
    for bad in (0, float("nan"), float("inf"), True):
        with pytest.raises(ValueError, match=r"positive number of seconds \(finite, > 0\)"):
            mock.gate(mock.text_turn("x"), timeout=bad)


def test_gate_released_before_it_is_reached_does_not_block() -> None:
    g = mock.gate(mock.text_turn("early"))
    g.release()
    session = open_session(g)
    stream, _ = MockBackend.prompt(session, "p", context())
    assert [e.kind for e in stream] == ["text", "result"]
    assert g.wait_blocked(0.01) is True
    assert (g.reached, g.blocked) == (True, False)


def test_backend_cancel_wakes_a_blocked_gate() -> None:
    g = mock.gate(mock.text_turn("never"))
    session = open_session(g)
    stream, _ = MockBackend.prompt(session, "p", context())
    consumer = Consumer(stream)
    g.wait_blocked(JOIN_S)
    MockBackend.cancel(session)
    MockBackend.cancel(session)  # idempotent
    consumer.join()
    assert isinstance(consumer.error, GateCancelled)
    assert consumer.events == []
    assert (g.cancelled, g.blocked) == (True, False)


def test_cancel_event_of_the_turn_context_ends_a_blocked_gate() -> None:
    cancel = threading.Event()
    g = mock.gate(mock.text_turn("never"))
    session = open_session(g)
    stream, _ = MockBackend.prompt(session, "p", context(cancel))
    consumer = Consumer(stream)
    g.wait_blocked(JOIN_S)
    cancel.set()
    consumer.join()
    assert isinstance(consumer.error, GateCancelled)
    assert g.cancelled is True


def test_a_gate_cancelled_before_it_is_pulled_raises_at_once() -> None:
    g = mock.gate(mock.text_turn("never"))
    session = open_session(g)
    stream, _ = MockBackend.prompt(session, "p", context())
    MockBackend.cancel(session)
    with pytest.raises(GateCancelled):
        next(iter(stream))
    assert g.reached is True


def test_cancel_wins_over_a_release_the_turn_has_not_seen_yet() -> None:
    g = mock.gate(mock.text_turn("never"))
    session = open_session(g)
    stream, _ = MockBackend.prompt(session, "p", context())
    g.release()
    MockBackend.cancel(session)
    with pytest.raises(GateCancelled):
        list(stream)


def test_cancel_affects_only_gates_already_dispatched() -> None:
    first, second = mock.gate(mock.text_turn("1")), mock.gate(mock.text_turn("2"))
    session = open_session(first, second)
    stream, _ = MockBackend.prompt(session, "p1", context())
    MockBackend.cancel(session)
    with pytest.raises(GateCancelled):
        list(stream)
    second.release()
    stream, _ = MockBackend.prompt(session, "p2", context())
    assert [e.kind for e in stream] == ["text", "result"]
    assert second.cancelled is False


def test_terminate_session_wakes_gates_and_is_idempotent() -> None:
    g = mock.gate(mock.text_turn("never"))
    session = open_session(g, mock.text_turn("unused"))
    stream, _ = MockBackend.prompt(session, "p", context())
    consumer = Consumer(stream)
    g.wait_blocked(JOIN_S)
    assert MockBackend.terminate_session(session) is None
    assert MockBackend.terminate_session(session) is None
    consumer.join()
    assert isinstance(consumer.error, GateCancelled)
    assert session.terminated is True
    with pytest.raises(DispatchError) as info:
        MockBackend.prompt(session, "late", context())
    assert info.value.reason == "session_terminated"
    assert session.history == ["p"]


def test_gate_times_out_when_never_released() -> None:
    g = mock.gate(mock.text_turn("never"), timeout=0.2)
    session = open_session(g)
    stream, _ = MockBackend.prompt(session, "p", context())
    consumer = Consumer(stream)
    consumer.join()
    assert isinstance(consumer.error, TimeoutError)
    assert g.blocked is False


def test_wait_blocked_times_out_when_no_turn_arrives() -> None:
    g = mock.gate([])
    with pytest.raises(TimeoutError):
        g.wait_blocked(0.01)


def test_a_gate_serves_one_turn_only() -> None:
    g = mock.gate(mock.text_turn("once"))
    g.release()
    session = open_session(g, g)
    first, _ = MockBackend.prompt(session, "p1", context())
    assert len(list(first)) == 2
    second, _ = MockBackend.prompt(session, "p2", context())
    with pytest.raises(RuntimeError):
        list(second)


def test_an_abandoned_stream_leaves_the_gate_untouched() -> None:
    g = mock.gate(mock.text_turn("x"))
    session = open_session(g)
    stream, _ = MockBackend.prompt(session, "p", context())
    del stream
    MockBackend.cancel(session)
    assert g.reached is False


@pytest.mark.parametrize(
    ("events", "timeout", "error"),
    [
        (["not an event"], 1.0, TypeError),
        ("text", 1.0, TypeError),
        ([], 0, ValueError),
        ([], -1.0, ValueError),
        ([], True, ValueError),
        ([], "5", ValueError),
    ],
)
def test_gate_rejects_malformed_arguments(events: Any, timeout: Any, error: type) -> None:
    with pytest.raises(error):
        Gate(events, timeout)


def test_gate_repr_shows_state_only() -> None:
    g = mock.gate(mock.text_turn("secret"), timeout=2)
    assert repr(g) == "Gate(events=2, timeout=2.0, released=False, blocked=False, cancelled=False)"


# --- session hooks ---------------------------------------------------------------------------


def test_update_session_stores_a_string_session_id_only() -> None:
    session = open_session(session_id="s-0")
    assert MockBackend.update_session(session, {"session_id": "s-9", "text": "x"}) is session
    assert session.session_id == "s-9"
    MockBackend.update_session(session, {"session_id": 7})
    MockBackend.update_session(session, {})
    assert session.session_id == "s-9"


def test_checkpoint_session_applies_and_records_ids() -> None:
    session = open_session()
    assert MockBackend.checkpoint_session(session, "c-1") is session
    MockBackend.checkpoint_session(session, "c-2")
    assert (session.session_id, session.checkpoints) == ("c-2", ["c-1", "c-2"])


def test_reset_session_clears_the_id_and_keeps_history_and_scripts() -> None:
    session = open_session(mock.error("e"), mock.text_turn("t"), session_id="s-1")
    with pytest.raises(DispatchError):
        MockBackend.prompt(session, "p", context())
    assert MockBackend.reset_session(session) is session
    assert (session.session_id, session.history, session.remaining, session.resets) == (
        None,
        ["p"],
        1,
        1,
    )


def test_reset_error_option_refuses_the_reset() -> None:
    session = open_session(session_id="s-1", reset_error="locked")
    with pytest.raises(ResetError) as info:
        MockBackend.reset_session(session)
    assert info.value.reason == "locked"
    assert (session.session_id, session.resets) == ("s-1", 0)


def test_hooks_reject_a_foreign_session() -> None:
    with pytest.raises(TypeError):
        MockBackend.prompt({"not": "mock"}, "p")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        MockBackend.remaining("nope")  # type: ignore[arg-type]


def test_session_repr_shows_no_prompts() -> None:
    session = open_session(mock.text_turn("answer text"), session_id="s-1")
    MockBackend.prompt(session, "my secret prompt", context())
    assert (
        repr(session)
        == "MockSession(session_id='s-1', remaining=0, dispatched=1, terminated=False)"
    )


# --- through a running agent ------------------------------------------------------------------


@pytest.fixture
def agents() -> Iterator[list[Any]]:
    """Names of agents a test starts; stopped at teardown, before the thread check runs."""
    names: list[Any] = []
    yield names
    for name in names:
        with contextlib.suppress(AgentNotFound):
            gen_agent.stop(name)


def start_agent(agents: list[Any], name: str, backend: Any, scripts: list[Any]) -> None:
    start(Scripted, name, scripts, backend=backend)
    agents.append(name)


def test_history_by_agent_name(agents: list[Any]) -> None:
    start_agent(agents, "mock-history", MockBackend, [mock.text_turn("one"), mock.error("nope")])
    assert gen_agent.ask("mock-history", "first", timeout=JOIN_S).text == "one"
    with pytest.raises(TurnError) as info:
        gen_agent.ask("mock-history", "second", timeout=JOIN_S)
    assert info.value.reason == "nope"
    assert MockBackend.history("mock-history") == ["first", "second"]
    with pytest.raises(AgentNotFound):
        MockBackend.history("no-such-agent")


def test_history_by_name_of_an_agent_with_another_backend(agents: list[Any]) -> None:
    class OtherBackend:
        @staticmethod
        def start_session(opts: dict[str, Any]) -> dict[str, Any]:
            return {"other": True}

        @staticmethod
        def prompt(session: Any, prompt: str, context: TurnContext) -> Any:
            return mock.text_turn("x"), session

        @staticmethod
        def terminate_session(session: Any) -> None:
            return None

    start_agent(agents, "not-mock", OtherBackend, [])
    with pytest.raises(RequestError) as info:
        MockBackend.history("not-mock")
    assert info.value.reason == "not_mock_backend"


def test_interrupting_the_agent_frees_a_turn_blocked_in_a_gate(agents: list[Any]) -> None:
    g = mock.gate(mock.text_turn("late"))
    start_agent(agents, "mock-gated", MockBackend, [g])
    gen_agent.tell("mock-gated", "wait")
    g.wait_blocked(JOIN_S)
    gen_agent.interrupt("mock-gated")
    assert g.thread is not None
    # the turn task's pooled thread is freed: it parks, waiting for the next turn
    assert WORKERS.wait_parked(g.thread, JOIN_S)
    assert g.cancelled is True


# --- builders --------------------------------------------------------------------------------


def test_text_turn_shapes() -> None:
    events = mock.text_turn(
        ["Hel", "lo"], session_id="s", usage={"input_tokens": 3, "output_tokens": 2}, model="m"
    )
    assert [(e.kind, e.data) for e in events] == [
        ("text", {"text": "Hel"}),
        ("text", {"text": "lo"}),
        ("usage", {"input_tokens": 3, "output_tokens": 2}),
        ("result", {"text": "Hello", "session_id": "s", "model": "m"}),
    ]
    assert [(e.kind, e.data) for e in mock.text_turn("")] == [("result", {"text": ""})]
    assert events[-1].is_terminal


def test_error_turn_shape() -> None:
    (event,) = mock.error_turn(("provider", "x"))
    assert (event.kind, event.data, event.is_terminal) == (
        "error",
        {"reason": ("provider", "x")},
        True,
    )


# -- issue #15: a fallback script ---------------------------------------------------------------
def test_a_fallback_script_answers_every_turn_once_the_scripts_are_used() -> None:
    from gen_agent.backends import mock as mock_module
    from gen_agent.testing._helpers import MockScripts

    echo = MockScripts().echo("you said: ")
    session = MockBackend.start_session(
        {"scripts": [mock_module.text_turn("first")], "fallback": echo})
    texts = []
    for prompt in ("a", "b", "c"):
        stream, session = MockBackend.prompt(session, prompt)
        texts.append("".join(e.data.get("text", "") for e in stream if e.kind == "text"))
    assert texts == ["first", "you said: b", "you said: c"]
    assert MockBackend.history(session) == ["a", "b", "c"]


def test_a_gate_or_junk_is_refused_as_fallback() -> None:
    from gen_agent.backend import SessionStartError
    from gen_agent.backends import mock as mock_module

    for bad in (mock_module.gate(mock_module.text_turn("x")), 42):
        with pytest.raises(SessionStartError) as info:
            MockBackend.start_session({"fallback": bad})
        assert info.value.reason == ("invalid_option", "fallback")
