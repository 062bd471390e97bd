"""Tests for gen_agent.backend: the backend contract, TurnContext and BackendError (§7)."""

from __future__ import annotations

import pickle
import sys
import threading
import types
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gen_agent._errors import CheckpointError, GenAgentError
from gen_agent._event import Event
from gen_agent.backend import (
    OPTIONAL_HOOKS,
    REQUIRED_HOOKS,
    Backend,
    BackendError,
    BackendProtocol,
    Diagnostics,
    DispatchError,
    ResetError,
    SessionStartError,
    TurnContext,
    validate_backend,
)

# --- TurnContext ----------------------------------------------------------------------------


def make_context(checkpoint: Any = None) -> tuple[TurnContext, threading.Event, list[str]]:
    seen: list[str] = []
    cancel = threading.Event()
    context = TurnContext(
        agent="agent-a",
        ref="ref-1",
        attempt=2,
        cancel_event=cancel,
        checkpoint=checkpoint or seen.append,
    )
    return context, cancel, seen


def test_turn_context_exposes_its_members() -> None:
    context, cancel, _ = make_context()
    assert context.agent == "agent-a"
    assert context.ref == "ref-1"
    assert context.attempt == 2
    assert context.cancel_event is cancel


def test_turn_context_cancelled_follows_the_event() -> None:
    context, cancel, _ = make_context()
    assert context.cancelled is False
    assert context.wait_cancelled(0.01) is False
    cancel.set()
    assert context.cancelled is True
    assert context.wait_cancelled(0.01) is True


def test_turn_context_wait_cancelled_wakes_when_set_from_another_thread() -> None:
    context, cancel, _ = make_context()
    waiting = threading.Event()
    result: list[bool] = []

    def waiter() -> None:
        waiting.set()
        result.append(context.wait_cancelled(10))

    thread = threading.Thread(target=waiter)
    thread.start()
    assert waiting.wait(5)
    cancel.set()
    thread.join(5)
    assert not thread.is_alive()
    assert result == [True]


def test_turn_context_checkpoint_forwards_to_the_runtime_function() -> None:
    context, _, seen = make_context()
    assert context.checkpoint("sess-1") is None
    assert seen == ["sess-1"]


def test_turn_context_checkpoint_propagates_a_rejection() -> None:
    def reject(session_id: str) -> None:
        raise CheckpointError("conflicting_session_id")

    context, _, _ = make_context(reject)
    with pytest.raises(CheckpointError) as info:
        context.checkpoint("sess-2")
    assert info.value.reason == "conflicting_session_id"


def test_turn_context_is_keyword_only_slotted_and_read_only() -> None:
    with pytest.raises(TypeError):
        TurnContext("a", "r", 1, threading.Event(), print)  # type: ignore[misc]
    context, _, _ = make_context()
    assert not hasattr(context, "__dict__")
    with pytest.raises(AttributeError):
        context.attempt = 3  # type: ignore[misc]


def test_turn_context_repr_names_agent_and_attempt() -> None:
    context, _, _ = make_context()
    assert repr(context) == "TurnContext(agent='agent-a', ref='ref-1', attempt=2, cancelled=False)"


# --- Backend, BackendProtocol, validate_backend --------------------------------------------


class MinimalBackend(Backend):
    @classmethod
    def start_session(cls, opts: dict[str, Any]) -> dict[str, Any]:
        return {"turns": 0, **opts}

    @classmethod
    def prompt(cls, session: Any, prompt: str, context: TurnContext) -> tuple[list[Event], Any]:
        return [Event.new("result", {"text": prompt})], {**session, "turns": session["turns"] + 1}

    @classmethod
    def terminate_session(cls, session: Any) -> None:
        return None


class InstanceBackend:
    def start_session(self, opts: dict[str, Any]) -> str:
        return "s"

    def prompt(self, session: Any, prompt: str, context: TurnContext) -> tuple[list[Event], Any]:
        return [], session

    def terminate_session(self, session: Any) -> None:
        return None


def test_backend_base_cannot_be_instantiated_and_lists_required_hooks() -> None:
    with pytest.raises(TypeError):
        Backend()  # type: ignore[abstract]
    assert set(Backend.__abstractmethods__) == set(REQUIRED_HOOKS)


def test_optional_hooks_are_not_defined_on_the_base_class() -> None:
    for name in OPTIONAL_HOOKS:
        assert getattr(Backend, name, None) is None
        assert getattr(MinimalBackend, name, None) is None


def test_a_backend_with_only_the_required_hooks_works_as_a_class() -> None:
    context, _, _ = make_context()
    session = MinimalBackend.start_session({"model": "m"})
    events, new_session = MinimalBackend.prompt(session, "hi", context)
    assert [e.kind for e in events] == ["result"]
    assert new_session == {"turns": 1, "model": "m"}
    assert MinimalBackend.terminate_session(new_session) is None
    MinimalBackend()  # the concrete subclass is instantiable too


def test_validate_backend_accepts_classes_and_instances() -> None:
    validate_backend(MinimalBackend)
    validate_backend(InstanceBackend())
    assert isinstance(MinimalBackend, BackendProtocol)
    assert isinstance(InstanceBackend(), BackendProtocol)


def test_validate_backend_names_the_missing_hooks() -> None:
    class Half:
        @staticmethod
        def start_session(opts: dict[str, Any]) -> None:
            return None

        prompt = "not callable"

    with pytest.raises(TypeError, match="prompt, terminate_session"):
        validate_backend(Half)
    assert not isinstance(object(), BackendProtocol)


@pytest.mark.parametrize("cls", [SessionStartError, DispatchError, ResetError])
def test_backend_exceptions_carry_their_reason(cls: type[GenAgentError]) -> None:
    exc = cls(("unknown_option", "x"))
    assert isinstance(exc, GenAgentError)
    assert exc.reason == ("unknown_option", "x")
    assert str(exc) == "unknown_option: 'x'"


# --- BackendError: the examples of §7.4 ----------------------------------------------------


def test_http_429_example() -> None:
    raw = {"original": True}
    err = BackendError.http(
        "openai", 429, {"error": {"message": "slow down"}}, {"Retry-After": ["12"]}, raw
    )
    assert (err.provider, err.kind, err.retryable, err.status) == (
        "openai",
        "rate_limited",
        True,
        429,
    )
    assert err.retry_after == "12"
    assert err.message == "slow down"
    assert err.raw is raw


def test_http_401_example() -> None:
    err = BackendError.http("anthropic", 401, {})
    assert (err.kind, err.retryable, err.status, err.message) == (
        "authentication",
        False,
        401,
        None,
    )
    assert err.raw == {"body": {}, "headers": None}


def test_http_400_example() -> None:
    err = BackendError.http("openai", 400, {})
    assert (err.kind, err.retryable) == ("invalid_request", False)


def test_normalize_plain_string_example() -> None:
    err = BackendError.normalize("claude", "denied")
    assert (err.provider, err.kind, err.retryable, err.raw) == (
        "claude",
        "provider_error",
        False,
        "denied",
    )
    assert err.message == "denied"


def test_normalize_kind_tuple_example() -> None:
    err = BackendError.normalize("codex", ("idle_timeout", 200))
    assert (err.kind, err.retryable, err.raw, err.message) == (
        "idle_timeout",
        False,
        ("idle_timeout", 200),
        None,
    )


# --- BackendError.http: status classes, bodies, headers ------------------------------------


@pytest.mark.parametrize(
    ("status", "kind", "retryable"),
    [
        (408, "http_error", True),
        (409, "http_error", True),
        (425, "http_error", True),
        (429, "rate_limited", True),
        (400, "invalid_request", False),
        (404, "invalid_request", False),
        (422, "invalid_request", False),
        (401, "authentication", False),
        (403, "authentication", False),
        (500, "server_error", True),
        (503, "server_error", True),
        (599, "server_error", True),
        (302, "http_error", False),
        (418, "http_error", False),
    ],
)
def test_http_status_classes(status: int, kind: str, retryable: bool) -> None:
    err = BackendError.http("openai", status, "")
    assert (err.kind, err.retryable, err.status) == (kind, retryable, status)


@settings(max_examples=150)
@given(st.integers(min_value=100, max_value=999))
def test_http_kind_and_retryable_follow_the_table_for_every_status(status: int) -> None:
    err = BackendError.http("anthropic", status, None)
    expected_kind = (
        "rate_limited"
        if status == 429
        else "authentication"
        if status in (401, 403)
        else "invalid_request"
        if status in (400, 404, 422)
        else "server_error"
        if status >= 500
        else "http_error"
    )
    assert err.kind == expected_kind
    assert err.retryable is (status in (408, 409, 425, 429) or status >= 500)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"error": {"message": "nested"}}, "nested"),
        ({"error": "flat", "message": "ignored"}, "flat"),
        ({"message": "top"}, "top"),
        ({"error": {"type": "x"}, "message": "top"}, "top"),
        ({"error": {"message": 5}}, None),
        ("plain text", "plain text"),
        ('{"error": {"message": "from json"}}', "from json"),
        (b'{"message": "from bytes"}', "from bytes"),
        (b"not json", "not json"),
        ("[1, 2]", "[1, 2]"),
        ('{"other": 1}', None),
        ("{broken", "{broken"),
        (None, None),
        (["a"], None),
    ],
)
def test_http_message_extraction(body: Any, message: str | None) -> None:
    assert BackendError.http("openai", 500, body).message == message


@pytest.mark.parametrize(
    ("headers", "retry_after"),
    [
        ({"retry-after": "3"}, "3"),
        ({"RETRY-AFTER": ["7", "8"]}, "7"),
        ({"Retry-After": [5, "9"]}, "9"),
        ([("Content-Type", "json"), ("Retry-After", "2"), ("retry-after", "4")], "2"),
        ([(b"retry-after", b"11")], "11"),
        ({"x-retry-after": "1"}, None),
        ({}, None),
        (None, None),
        ({"Retry-After": 12}, None),
    ],
)
def test_http_retry_after_from_headers(headers: Any, retry_after: str | None) -> None:
    assert BackendError.http("openai", 429, {}, headers).retry_after == retry_after


def test_http_retry_after_from_an_httpx_like_multi_mapping() -> None:
    class MultiHeaders:
        def multi_items(self) -> list[tuple[str, str]]:
            return [("a", "1"), ("Retry-After", "30"), ("Retry-After", "31")]

        def items(self) -> list[tuple[str, str]]:
            raise AssertionError("multi_items is preferred")

    assert BackendError.http("openai", 503, {}, MultiHeaders()).retry_after == "30"


def test_http_rejects_a_non_int_status() -> None:
    with pytest.raises(TypeError, match="status"):
        BackendError.http("openai", "429", {})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="status"):
        BackendError.http("openai", True, {})  # type: ignore[arg-type]


# --- BackendError.new and normalize ---------------------------------------------------------


def test_new_defaults_and_derived_message() -> None:
    err = BackendError.new("claude", "stream_truncated", {"message": "cut"})
    assert (err.kind, err.retryable, err.status, err.retry_after, err.message) == (
        "stream_truncated",
        False,
        None,
        None,
        "cut",
    )
    explicit = BackendError.new(
        "codex", "busy", None, retryable=True, status=409, retry_after="1", message="m"
    )
    assert (explicit.retryable, explicit.status, explicit.retry_after, explicit.message) == (
        True,
        409,
        "1",
        "m",
    )


def test_normalize_passes_a_backend_error_through() -> None:
    err = BackendError.http("openai", 500, {})
    assert BackendError.normalize("claude", err) is err


def test_normalize_http_error_tuple() -> None:
    term = ("http_error", 503, {"error": {"message": "overloaded"}})
    err = BackendError.normalize("anthropic", term)
    assert (err.kind, err.retryable, err.status, err.message, err.raw) == (
        "server_error",
        True,
        503,
        "overloaded",
        term,
    )


def test_normalize_kind_tuple_derives_the_message_from_the_value() -> None:
    err = BackendError.normalize("codex", ("turn_failed", {"error": {"message": "bad"}}))
    assert (err.kind, err.message) == ("turn_failed", "bad")


@pytest.mark.parametrize(
    "term", [42, ("a", "b", "c"), (1, 2), ValueError("x"), ("http_error", "500", {})]
)
def test_normalize_anything_else_is_a_provider_error(term: Any) -> None:
    err = BackendError.normalize("openai", term)
    assert (err.kind, err.retryable) == ("provider_error", False)
    assert err.raw is term


@pytest.mark.parametrize(
    ("exc", "retryable"),
    [
        (TimeoutError("read timed out"), True),
        (ConnectionResetError("reset"), True),
        (BrokenPipeError("closed"), True),
        (ConnectionAbortedError("closed"), True),
        (ConnectionRefusedError("refused"), False),
        (ConnectionError("other"), False),
    ],
)
def test_normalize_builtin_transport_errors(exc: Exception, retryable: bool) -> None:
    err = BackendError.normalize("anthropic", exc)
    assert (err.kind, err.retryable, err.message, err.raw) == (
        "transport",
        retryable,
        str(exc),
        exc,
    )


@pytest.fixture
def httpx_like(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The real httpx when installed; else a stand-in module with its exception hierarchy."""
    try:
        import httpx
    except ImportError:
        httpx = types.ModuleType("httpx")

        class TransportError(Exception):
            pass

        class TimeoutException(TransportError):
            pass

        class ReadTimeout(TimeoutException):
            pass

        class NetworkError(TransportError):
            pass

        class ReadError(NetworkError):
            pass

        class ConnectError(NetworkError):
            pass

        class ProtocolError(TransportError):
            pass

        class RemoteProtocolError(ProtocolError):
            pass

        for cls in (
            TransportError,
            TimeoutException,
            ReadTimeout,
            NetworkError,
            ReadError,
            ConnectError,
            ProtocolError,
            RemoteProtocolError,
        ):
            setattr(httpx, cls.__name__, cls)
        monkeypatch.setitem(sys.modules, "httpx", httpx)
    return httpx


def test_normalize_httpx_transport_errors(httpx_like: Any) -> None:
    def read_error_caused_by(cause: BaseException) -> BaseException:
        try:
            try:
                raise cause
            except OSError as exc:
                raise httpx_like.ReadError("read failed") from exc
        except httpx_like.ReadError as wrapped:
            return wrapped

    cases = [
        (httpx_like.ReadTimeout("timed out"), True),
        (httpx_like.RemoteProtocolError("Server disconnected"), True),
        (read_error_caused_by(ConnectionResetError("reset")), True),
        (read_error_caused_by(OSError("other")), False),
        (httpx_like.ConnectError("refused"), False),
    ]
    for exc, retryable in cases:
        err = BackendError.normalize("openai", exc)
        assert (err.kind, err.retryable, err.message, err.raw) == (
            "transport",
            retryable,
            str(exc),
            exc,
        ), exc


# --- BackendError as a value ----------------------------------------------------------------


def test_backend_error_is_an_exception_with_reason_kind() -> None:
    err = BackendError.http("openai", 429, {})
    assert isinstance(err, GenAgentError)
    assert err.reason == "rate_limited"
    with pytest.raises(BackendError) as info:
        raise err
    assert info.value is err


def test_backend_error_equality_and_hash_by_fields() -> None:
    a = BackendError.http("openai", 429, {"error": "x"}, {"retry-after": "1"}, raw=["r"])
    b = BackendError.http("openai", 429, {"error": "x"}, {"retry-after": "1"}, raw=["r"])
    c = BackendError.http("openai", 429, {"error": "x"}, {"retry-after": "1"}, raw=["other"])
    assert a == b
    assert hash(a) == hash(b)
    assert a != c
    assert a != "rate_limited"
    assert {a, b} == {a}


def test_str_and_repr_never_show_message_or_raw() -> None:
    secret = "sk-secret-token"
    err = BackendError.http("openai", 401, {"error": {"message": secret}}, raw={"key": secret})
    assert err.message == secret
    assert str(err) == "authentication (provider=openai, status=401)"
    assert repr(err) == (
        "BackendError(provider='openai', kind='authentication', retryable=False, status=401)"
    )
    assert secret not in str(err) + repr(err) + str(err.args)
    no_status = BackendError.normalize("claude", ("stream_truncated", secret))
    assert str(no_status) == "stream_truncated (provider=claude)"


def test_backend_error_pickles_with_all_fields() -> None:
    err = BackendError.http("openai", 429, {"message": "m"}, {"retry-after": "3"}, raw=("r", 1))
    copy = pickle.loads(pickle.dumps(err))
    assert copy == err
    assert type(copy) is BackendError
    assert copy.raw == ("r", 1)


@pytest.mark.parametrize(
    "fields",
    [
        (1, "kind", False),
        ("p", None, False),
        ("p", "kind", "yes"),
        ("p", "kind", False, "500"),
        ("p", "kind", False, True),
        ("p", "kind", False, None, 12),
        ("p", "kind", False, None, None, b"msg"),
    ],
)
def test_backend_error_rejects_wrongly_typed_fields(fields: tuple[Any, ...]) -> None:
    with pytest.raises(TypeError):
        BackendError(*fields)


# -- diagnostics ---------------------------------------------------------------------------


def test_diagnostics_are_data_never_in_str_repr_nor_equality() -> None:
    plain = BackendError.new("claude", "no_result", None, message="secret message")
    told = plain.with_diagnostics(
        partial_text="the partial answer", exit_code=3, stderr_tail="boom on stderr",
        session_id="sess-1", http_status=200, usage={"input_tokens": 2},
    )

    assert plain.diagnostics == Diagnostics()
    assert told.diagnostics == Diagnostics(
        partial_text="the partial answer", exit_code=3, stderr_tail="boom on stderr",
        session_id="sess-1", http_status=200, usage={"input_tokens": 2},
    )
    assert told == plain and hash(told) == hash(plain)
    for shown in (str(told), repr(told)):
        assert "partial" not in shown and "boom" not in shown and "secret" not in shown
    # None leaves a field as it is; a copy keeps the contract fields.
    again = told.with_diagnostics(exit_code=None, stop_reason="max_tokens")
    assert (again.diagnostics.exit_code, again.diagnostics.stop_reason) == (3, "max_tokens")
    assert (again.kind, again.message) == ("no_result", "secret message")


def test_diagnostics_survive_pickling_and_are_type_checked() -> None:
    told = BackendError.new("codex", "turn_failed", None).with_diagnostics(session_id="t-1")

    copy = pickle.loads(pickle.dumps(told))

    assert copy == told and copy.diagnostics.session_id == "t-1"
    with pytest.raises(TypeError, match="diagnostics must be a Diagnostics"):
        BackendError("codex", "x", diagnostics={"session_id": "t-1"})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        told.with_diagnostics(unknown_field=1)
