"""Tests for gen_agent.telemetry: the in-process :telemetry stand-in (contract §8)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from loguru import logger

from gen_agent import telemetry
from gen_agent.telemetry import (
    EVENTS,
    TURN_ERROR,
    TURN_START,
    TURN_STOP,
    Handler,
    HandlerAlreadyAttached,
    TelemetryRecord,
    TelemetryRecorder,
)

ALPHA = ("test_telemetry", "alpha")
BETA = ("test_telemetry", "beta")
OTHER = ("elsewhere", "gamma")


@pytest.fixture(autouse=True)
def no_handler_leaks() -> Iterator[None]:
    before = telemetry.list_handlers()
    yield
    assert telemetry.list_handlers() == before


@pytest.fixture
def handler_id() -> Iterator[str]:
    hid = f"test-{uuid.uuid4().hex}"
    yield hid
    telemetry.detach(hid)


@pytest.fixture
def log_lines() -> Iterator[list[str]]:
    lines: list[str] = []
    logger.enable("gen_agent")
    sink = logger.add(lines.append, level="WARNING", format="{level} {message}")
    yield lines
    logger.remove(sink)
    logger.disable("gen_agent")


def recorder_fn(calls: list[Any], tag: str = "") -> Any:
    def fn(name: Any, measurements: Any, metadata: Any, config: Any) -> None:
        calls.append((tag, name, measurements, metadata, config))

    return fn


def test_event_name_constants_cover_contract_section_8() -> None:
    # The 14 names of contract §8, SUPERVISOR_RESTART, TOOL_PERMISSION, and the busy
    # policies' TURN_DISCARDED and TURN_JOINED.
    assert len(EVENTS) == 18
    assert len(set(EVENTS)) == 18
    assert telemetry.TURN_JOINED == ("gen_agent", "turn", "joined")
    assert telemetry.TOOL_PERMISSION == ("gen_agent", "tool_permission")
    assert all(name[0] == "gen_agent" and all(isinstance(p, str) for p in name) for name in EVENTS)
    assert TURN_START == ("gen_agent", "turn", "start")
    assert telemetry.MAILBOX_QUEUED == ("gen_agent", "mailbox", "queued")
    assert telemetry.HALTED == ("gen_agent", "halted")
    assert telemetry.TERMINATED == ("gen_agent", "terminated")
    assert telemetry.SUPERVISOR_RESTART == ("gen_agent", "supervisor", "restart")


def test_execute_calls_the_handler_with_config(handler_id: str) -> None:
    calls: list[Any] = []
    telemetry.attach(handler_id, ALPHA, recorder_fn(calls), config={"k": 1})
    telemetry.execute(ALPHA, {"system_time": 5}, {"agent": "a"})
    assert calls == [("", ALPHA, {"system_time": 5}, {"agent": "a"}, {"k": 1})]


def test_execute_without_handlers_does_nothing() -> None:
    assert telemetry.execute(("test_telemetry", "nobody"), {}, {}) is None


def test_event_names_may_be_given_as_lists(handler_id: str) -> None:
    calls: list[Any] = []
    telemetry.attach(handler_id, list(ALPHA), recorder_fn(calls))
    telemetry.execute(list(ALPHA), {}, {})
    assert [c[1] for c in calls] == [ALPHA]


def test_handlers_run_in_attach_order_in_the_emitting_thread() -> None:
    calls: list[Any] = []
    threads: list[threading.Thread] = []
    ids = [f"order-{i}-{uuid.uuid4().hex}" for i in range(3)]
    try:
        for i, hid in enumerate(ids):
            telemetry.attach(hid, ALPHA, recorder_fn(calls, str(i)))
        telemetry.attach_many(
            ids[0] + "-threads", [ALPHA], lambda *_: threads.append(threading.current_thread())
        )
        telemetry.execute(ALPHA, {}, {})
        assert [c[0] for c in calls] == ["0", "1", "2"]
        assert threads == [threading.current_thread()]
    finally:
        for hid in [*ids, ids[0] + "-threads"]:
            telemetry.detach(hid)


def test_only_handlers_of_the_executed_name_run(handler_id: str) -> None:
    calls: list[Any] = []
    telemetry.attach(handler_id, ALPHA, recorder_fn(calls))
    telemetry.execute(BETA, {}, {})
    telemetry.execute(("test_telemetry",), {}, {})
    assert calls == []


def test_duplicate_handler_id_is_rejected(handler_id: str) -> None:
    calls: list[Any] = []
    telemetry.attach(handler_id, ALPHA, recorder_fn(calls))
    with pytest.raises(HandlerAlreadyAttached) as info:
        telemetry.attach(handler_id, BETA, recorder_fn(calls))
    assert isinstance(info.value, ValueError)
    assert info.value.handler_id == handler_id
    telemetry.execute(BETA, {}, {})
    assert calls == []


def test_detach_reports_whether_the_id_was_attached(handler_id: str) -> None:
    calls: list[Any] = []
    telemetry.attach(handler_id, ALPHA, recorder_fn(calls))
    assert telemetry.detach(handler_id) is True
    assert telemetry.detach(handler_id) is False
    telemetry.execute(ALPHA, {}, {})
    assert calls == []


def test_attach_many_and_detach_all_names(handler_id: str) -> None:
    calls: list[Any] = []
    telemetry.attach_many(handler_id, [ALPHA, BETA, ALPHA], recorder_fn(calls))
    assert [h.event_name for h in telemetry.list_handlers(("test_telemetry",))] == [ALPHA, BETA]
    telemetry.execute(ALPHA, {}, {})
    telemetry.execute(BETA, {}, {})
    assert [c[1] for c in calls] == [ALPHA, BETA]
    assert telemetry.detach(handler_id) is True
    telemetry.execute(BETA, {}, {})
    assert len(calls) == 2
    assert telemetry.list_handlers(("test_telemetry",)) == []


def test_list_handlers_filters_by_prefix(handler_id: str) -> None:
    fn = recorder_fn([])
    telemetry.attach_many(handler_id, [ALPHA, OTHER], fn, config=7)
    assert telemetry.list_handlers(("elsewhere",)) == [Handler(handler_id, OTHER, fn, 7)]
    assert telemetry.list_handlers(ALPHA) == [Handler(handler_id, ALPHA, fn, 7)]
    mine = [h for h in telemetry.list_handlers() if h.id == handler_id]
    assert [h.event_name for h in mine] == [ALPHA, OTHER]
    assert telemetry.list_handlers(("test_telemetry", "alpha", "deeper")) == []


@pytest.mark.parametrize(
    ("handler", "names", "fn"),
    [
        (["unhashable"], [ALPHA], print),
        ("ok", [()], print),
        ("ok", ["gen_agent"], print),
        ("ok", [("gen_agent", 1)], print),
        ("ok", [], print),
        ("ok", [ALPHA], "not callable"),
    ],
)
def test_attach_many_rejects_malformed_arguments(handler: Any, names: Any, fn: Any) -> None:
    with pytest.raises(TypeError):
        telemetry.attach_many(handler, names, fn)


def test_a_raising_handler_is_detached_and_others_still_run(log_lines: list[str]) -> None:
    calls: list[Any] = []
    bad_id = f"bad-{uuid.uuid4().hex}"
    good_id = f"good-{uuid.uuid4().hex}"

    def bad(*_: Any) -> None:
        raise KeyError("secret prompt text")

    telemetry.attach_many(bad_id, [ALPHA, BETA], bad)
    telemetry.attach(good_id, ALPHA, recorder_fn(calls))
    try:
        telemetry.execute(ALPHA, {}, {})
        telemetry.execute(ALPHA, {}, {})
        assert len(calls) == 2
        assert [h.id for h in telemetry.list_handlers(("test_telemetry",))] == [good_id]
    finally:
        telemetry.detach(good_id)
    assert len(log_lines) == 1
    assert log_lines[0].startswith("WARNING")
    assert bad_id in log_lines[0]
    assert "KeyError" in log_lines[0]
    assert "secret" not in log_lines[0]


def test_a_failed_handler_does_not_detach_a_newer_handler_with_the_same_id(
    handler_id: str,
) -> None:
    calls: list[Any] = []
    attached_again = threading.Event()

    def bad_then_replace(*_: Any) -> None:
        # Simulates another thread re-attaching the id while this call is failing.
        telemetry.detach(handler_id)
        telemetry.attach(handler_id, ALPHA, recorder_fn(calls))
        attached_again.set()
        raise RuntimeError("boom")

    telemetry.attach(handler_id, ALPHA, bad_then_replace)
    telemetry.execute(ALPHA, {}, {})
    assert attached_again.is_set()
    telemetry.execute(ALPHA, {}, {})
    assert len(calls) == 1


def test_attach_and_detach_are_safe_while_another_thread_executes() -> None:
    stop = threading.Event()
    errors: list[BaseException] = []
    executed = [0]

    def emitter() -> None:
        try:
            while not stop.is_set():
                telemetry.execute(ALPHA, {}, {})
                executed[0] += 1
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=emitter)
    thread.start()
    try:
        for i in range(300):
            hid = f"churn-{i}"
            telemetry.attach_many(hid, [ALPHA, BETA], lambda *_: None)
            assert telemetry.detach(hid) is True
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()
    assert errors == []
    assert executed[0] > 0


# --- TelemetryRecorder ----------------------------------------------------------------------


def test_recorder_records_and_detaches_on_exit() -> None:
    with TelemetryRecorder([TURN_START, TURN_STOP]) as rec:
        assert len(telemetry.list_handlers(("gen_agent",))) >= 2
        telemetry.execute(TURN_START, {"system_time": 1}, {"agent": "a"})
        telemetry.execute(TURN_ERROR, {}, {"agent": "a"})
        telemetry.execute(TURN_STOP, {"duration_ms": 3}, {"agent": "a"})
        assert rec.records == [
            TelemetryRecord(TURN_START, {"system_time": 1}, {"agent": "a"}),
            TelemetryRecord(TURN_STOP, {"duration_ms": 3}, {"agent": "a"}),
        ]
        assert rec.named(TURN_STOP) == [(TURN_STOP, {"duration_ms": 3}, {"agent": "a"})]
        rec.clear()
        assert rec.records == []
    assert all(h.id != rec.handler_id for h in telemetry.list_handlers())


def test_recorder_defaults_to_every_event() -> None:
    with TelemetryRecorder() as rec:
        names = {h.event_name for h in telemetry.list_handlers() if h.id == rec.handler_id}
    assert names == set(EVENTS)


def test_recorder_wait_for_returns_an_existing_record() -> None:
    with TelemetryRecorder([TURN_STOP]) as rec:
        telemetry.execute(TURN_STOP, {"duration_ms": 1}, {"agent": "x"})
        record = rec.wait_for(TURN_STOP, timeout=0.01)
    assert record.metadata == {"agent": "x"}


def test_recorder_wait_for_wakes_on_an_event_from_another_thread() -> None:
    with TelemetryRecorder([TURN_STOP]) as rec:
        go = threading.Event()

        def emit() -> None:
            go.wait(5)
            telemetry.execute(TURN_STOP, {"duration_ms": 1}, {"agent": "skip"})
            telemetry.execute(TURN_STOP, {"duration_ms": 2}, {"agent": "want"})

        thread = threading.Thread(target=emit)
        thread.start()
        go.set()
        record = rec.wait_for(lambda r: r.metadata["agent"] == "want", timeout=5)
        thread.join(5)
    assert not thread.is_alive()
    assert record.measurements == {"duration_ms": 2}


def test_recorder_wait_for_times_out() -> None:
    with TelemetryRecorder([TURN_STOP]) as rec:
        telemetry.execute(TURN_STOP, {}, {"agent": "other"})
        with pytest.raises(TimeoutError):
            rec.wait_for(lambda r: r.metadata["agent"] == "never", timeout=0.05)
