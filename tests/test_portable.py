"""gen_agent._portable: reasons in a form that pickles, encodes and rebuilds gen_agent's errors."""

from __future__ import annotations

import datetime
import pickle
import threading
from typing import Any

import msgspec
import pytest
from _agents import Scripted
from hypothesis import given
from hypothesis import strategies as st

import gen_agent
from gen_agent import _portable as portable
from gen_agent._errors import (
    AgentDown,
    AgentNotFound,
    AlreadyStarted,
    CallTimeout,
    GenAgentError,
    TurnError,
)
from gen_agent._portable import PortableError, PortableObject
from gen_agent._response import Response
from gen_agent._status import OverloadInfo
from gen_agent.backend import BackendError, DispatchError


class SDKError(Exception):
    """Stands for an SDK exception that does not pickle (it holds a lock, as clients do)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()
        self.status_code = 529


def _raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def _crash_in_a_callback() -> BaseException:
    def handle_response() -> None:
        raise ValueError("boom")

    try:
        handle_response()
    except ValueError as exc:
        return exc
    raise AssertionError("unreachable")


def test_plain_data_is_returned_equal_and_unchanged() -> None:
    info = OverloadInfo(queue="prompts", limit="count", pending_count=2, pending_bytes=10,
                        incoming_bytes=3, max_count=2, max_bytes=100)
    reason = ("overloaded", info, [1, 2.5, None, b"x"], {"k": ("v", frozenset({1}))})
    assert portable.to_portable(reason) == reason
    assert portable.to_portable(reason)[1] is info
    assert portable.is_portable(reason)


def test_a_foreign_exception_becomes_a_record_with_its_frames() -> None:
    exc = _crash_in_a_callback()
    record = portable.to_portable(("task_crashed", exc))[1]
    assert isinstance(record, PortableError)
    assert (record.type_name, record.module, record.message) == ("ValueError", "builtins", "boom")
    assert record.args == ("boom",)
    assert record.is_a(ValueError) and record.is_a(Exception) and record.is_a("ValueError")
    assert not record.is_a(TypeError)
    assert len(record.frames) == 2  # _crash_in_a_callback, then handle_response
    assert "handle_response" in record.frames[-1]
    assert 'raise ValueError("boom")' in record.frames[-1]
    assert record.traceback_text == "".join(record.frames)
    assert "boom" not in repr(record)  # the message never shows in a repr (it may hold data)


def test_an_unpicklable_sdk_exception_in_backend_error_raw_pickles_once_portable() -> None:
    sdk = _raised(SDKError("overloaded: request text"))
    err = BackendError.new("anthropic", "server_error", sdk, retryable=True, status=529)
    with pytest.raises(TypeError):
        pickle.dumps(err)
    record = portable.to_portable(err)
    assert isinstance(record, PortableError)
    raw = record.attrs["raw"]
    assert isinstance(raw, PortableError) and raw.type_name == "SDKError"
    assert raw.attrs["status_code"] == 529
    assert isinstance(raw.attrs["lock"], PortableObject)
    assert raw.attrs["lock"].module == "_thread"
    assert pickle.loads(pickle.dumps(record)) == record


def test_gen_agent_errors_rebuild_with_the_same_type_reason_and_attributes() -> None:
    sdk = _raised(SDKError("overloaded"))
    errors: list[GenAgentError] = [
        TurnError(("task_crashed", _crash_in_a_callback())),
        TurnError("interrupted"),
        AgentDown(("callback_failed", "error", "ValueError")),
        AgentNotFound("worker-1"),
        CallTimeout(2.5),
        DispatchError(("http_error", 500)),
        BackendError.new("openai", "transport", sdk, retryable=True, status=None,
                         message="connection reset"),
    ]
    for err in errors:
        rebuilt = portable.from_portable(pickle.loads(pickle.dumps(portable.to_portable(err))))
        assert type(rebuilt) is type(err)
        assert str(rebuilt) == str(err) and rebuilt.args == err.args
        assert rebuilt.reason == portable.to_portable(err.reason)
    timeout = portable.from_portable(portable.to_portable(CallTimeout(2.5)))
    assert isinstance(timeout, TimeoutError) and timeout.timeout == 2.5
    not_found = portable.from_portable(portable.to_portable(AgentNotFound("worker-1")))
    assert isinstance(not_found, LookupError) and not_found.name == "worker-1"
    backend = portable.from_portable(portable.to_portable(errors[-1]))
    assert (backend.provider, backend.kind, backend.retryable, backend.message) == (
        "openai", "transport", True, "connection reset")
    assert isinstance(backend.raw, PortableError) and backend.raw.type_name == "SDKError"
    assert backend == portable.from_portable(portable.to_portable(errors[-1]))


def test_a_rebuilt_error_carries_the_original_traceback_as_a_note() -> None:
    err = _raised(TurnError("timeout"))
    rebuilt = portable.from_portable(portable.to_portable(err))
    assert rebuilt.__traceback__ is None
    assert "_raised" in rebuilt.__notes__[0]


def test_an_agent_ref_becomes_a_record_with_its_name(agent_system: Any) -> None:
    from gen_agent.backends.mock import MockBackend

    ref = gen_agent.start_agent(Scripted, name=("w", 1), backend=MockBackend)
    with pytest.raises(AlreadyStarted) as info:
        gen_agent.start_agent(Scripted, name=("w", 1), backend=MockBackend)
    record = portable.to_portable(info.value)
    agent = record.attrs["agent"]
    assert agent == PortableObject("AgentRef", "gen_agent._agent_ref", {"name": ("w", 1)})
    rebuilt = portable.from_portable(portable.decode(portable.encode(info.value)))
    assert type(rebuilt) is AlreadyStarted and rebuilt.name == ("w", 1)
    assert rebuilt.reason == ("already_started", agent)
    ref.stop()


def test_a_foreign_record_is_never_rebuilt_as_what_it_is_not() -> None:
    record = portable.to_portable(_crash_in_a_callback())
    assert portable.from_portable(record) is record
    exc = portable.to_exception(record)
    assert type(exc) is GenAgentError and exc.reason == ("remote_error", record)
    own = portable.to_exception(portable.to_portable(TurnError("timeout")))
    assert type(own) is TurnError and own.reason == "timeout"
    with pytest.raises(TypeError, match="expected a PortableError"):
        portable.to_exception("timeout")
    # A record naming a module outside gen_agent never makes anything be imported.
    fake = PortableError("TurnError", "os", mro=("os.TurnError",))
    assert portable.from_portable(fake) is fake


def test_causes_are_kept_and_a_cycle_does_not_recurse() -> None:
    try:
        try:
            raise KeyError("inner")
        except KeyError as inner:
            raise RuntimeError("outer") from inner
    except RuntimeError as exc:
        outer = exc
    record = portable.to_portable(outer)
    assert record.cause is not None and record.cause.type_name == "KeyError"
    looped: list[Any] = []
    looped.append(looped)
    assert isinstance(portable.to_portable(looped), list)  # cut at depth 32, no RecursionError
    a = ValueError("a")
    a.__context__ = b = ValueError("b")
    b.__context__ = a
    assert portable.to_portable(a).cause.cause is None


def test_encode_decode_keeps_tuples_sets_structs_and_records() -> None:
    response = Response(text="hi", session_id="s-1")
    term = ("task_crashed", _crash_in_a_callback(), {"n": (1, 2)}, {3}, frozenset({"x"}),
            response, [("a", None)], datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC))
    decoded = portable.decode(portable.encode(term))
    assert decoded == portable.to_portable(term)
    assert type(decoded) is tuple and type(decoded[2]["n"]) is tuple
    assert type(decoded[3]) is set and type(decoded[4]) is frozenset
    assert type(decoded[5]) is Response and decoded[5].text == "hi"
    assert isinstance(decoded[1], PortableError) and decoded[1].frames


class UserStruct(msgspec.Struct):
    a: int
    b: tuple[int, ...] = ()


def test_structs_outside_gen_agent_decode_only_when_named() -> None:
    data = portable.encode(("s", UserStruct(1, (2,))))
    assert portable.decode(data, structs=(UserStruct,)) == ("s", UserStruct(1, (2,)))
    anonymous = portable.decode(data)[1]
    assert anonymous == PortableObject("UserStruct", __name__, {"a": 1, "b": (2,)})
    with pytest.raises(msgspec.DecodeError):
        portable.decode(b"\xc1")


def test_a_struct_holding_an_exception_is_made_portable_inside() -> None:
    response = Response(text="x", extra={"error": ValueError("in raw")})
    made = portable.to_portable(response)
    assert type(made) is Response and isinstance(made.extra["error"], PortableError)
    assert portable.decode(portable.encode(response)) == made
    assert not portable.is_portable(response) and portable.is_portable(made)


def test_non_data_values_and_mappings() -> None:
    class Handle:
        pass

    class Headers(dict):
        pass

    made = portable.to_portable({"h": Handle(), "headers": Headers({"x": "1"}), Handle: 1})
    assert made["h"] == PortableObject("test_non_data_values_and_mappings.<locals>.Handle",
                                       __name__)
    assert made["headers"] == {"x": "1"} and type(made["headers"]) is dict
    assert PortableObject("type", "builtins") in made


_leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1), st.text(),
                  st.binary(), st.floats(allow_nan=False))
_terms = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=5), inner, max_size=4),
        st.builds(lambda m: ("task_crashed", ValueError(m)), st.text(max_size=10)),
        st.builds(lambda r: TurnError(r), inner),
    ),
    max_leaves=12,
)


@given(_terms)
def test_any_reason_round_trips_through_encode_and_pickle(term: Any) -> None:
    made = portable.to_portable(term)
    assert portable.is_portable(made)
    assert portable.to_portable(made) == made
    assert portable.decode(portable.encode(term)) == made
    assert pickle.loads(pickle.dumps(made)) == made


def test_a_portable_error_is_described_by_its_type_never_its_message() -> None:
    from gen_agent._portable import to_portable
    from gen_agent._reasons import describe_reason

    reason = to_portable(("task_crashed", UnicodeEncodeError("utf-8", "secret text", 0, 1, "x")))
    assert describe_reason(reason) == "task_crashed: UnicodeEncodeError"
    assert describe_reason(to_portable(ValueError("secret text"))) == "ValueError"
