"""CodexCLI: the pure translator on recorded real-CLI output, options, the command line, and the
process layer against a byte-exact fake CLI (tests/fakes/codex_fake.py)."""

from __future__ import annotations

import gc
import json
import threading
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

import gen_agent
from gen_agent._errors import CheckpointError, TurnError
from gen_agent._event import Event
from gen_agent._output import strict_schema_of
from gen_agent._request_options import RequestOptions
from gen_agent._response import Response, normalize_usage
from gen_agent.backend import BackendError, DispatchError, SessionStartError, TurnContext
from gen_agent.backends._subprocess.base import CLIBackend
from gen_agent.backends._subprocess.jsonl import translate_line
from gen_agent.backends.codex import (
    INSTALL_HINT,
    OPTIONS,
    CodexCLI,
    CodexOptions,
    CodexStreamTranslator,
    translate_lines,
)

from .conftest import (
    Agent,
    FakeCodex,
    TurnRecorder,
    kinds,
    pid_alive,
    process_group_alive,
    reason_of,
    response_of,
    run_turn,
    wait_until,
)

pytestmark = pytest.mark.usefixtures("no_child_left")

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "codex-cli"
FAKE_THREAD = "0199a000-0000-7000-8000-00000000fake"
WAIT_S = 10.0


def fixture_events(name: str, model: str | None = None) -> list[Event]:
    return translate_lines((FIXTURES / f"{name}.jsonl").read_bytes().splitlines(), model)


def fixture_thread(name: str) -> str:
    first = json.loads((FIXTURES / f"{name}.jsonl").read_text().splitlines()[0])
    return first["thread_id"]


# -- the translator on real CLI output --------------------------------------------------------


def test_real_text_turn_normalizes_field_by_field() -> None:
    events = fixture_events("text_turn", model="gpt-test")
    thread = fixture_thread("text_turn")

    assert kinds(events) == ["codex.item", "text", "usage", "result"]
    warning = events[0].data
    assert (warning["type"], warning["id"]) == ("error", "item_0")
    assert warning["message"].startswith("Model metadata for `gpt-test` not found.")
    assert events[1].data == {
        "text": "Hello from codex loopback.",
        "message_boundary": True,
        "item_id": "item_1",
    }
    assert events[2].data == {
        "input_tokens": 20,
        "cached_input_tokens": 0,
        "cache_write_input_tokens": 0,
        "output_tokens": 6,
        "reasoning_output_tokens": 0,
    }
    result = events[3].data
    assert "text" not in result
    assert (result["session_id"], result["model"], result["provider"]) == (
        thread,
        "gpt-test",
        "codex",
    )
    assert result["raw"]["type"] == "turn.completed"

    response = response_of(events)
    assert (response.text, response.final_message) == (
        "Hello from codex loopback.",
        "Hello from codex loopback.",
    )
    assert (response.session_id, response.model, response.provider) == (thread, "gpt-test", "codex")
    assert response.usage == normalize_usage(events[2].data)
    assert response.tool_calls == []


def test_real_tool_turn_reports_the_command_as_tool_use_and_tool_result() -> None:
    events = fixture_events("tool_turn")

    assert kinds(events) == [
        "codex.item", "codex.tool_started", "tool_use", "tool_result", "text", "usage", "result",
    ]  # fmt: skip
    start, call, outcome = events[1].data, events[2].data, events[3].data
    assert call == outcome
    assert start == {**call, "aggregated_output": "", "exit_code": None, "status": "in_progress"}
    assert call == {
        "id": "item_1",
        "type": "command_execution",
        "command": "/bin/bash -lc 'echo tool-ran'",
        "aggregated_output": "tool-ran\n",
        "exit_code": 0,
        "status": "completed",
    }
    response = response_of(events)
    assert response.text == "The command printed tool-ran."
    assert [e.data["command"] for e in response.tool_calls] == ["/bin/bash -lc 'echo tool-ran'"]
    assert response.usage is not None and response.usage["output_tokens"] == 10
    assert response.session_id == fixture_thread("tool_turn")


def test_real_failed_stream_is_a_terminal_error_keeping_the_partial_text() -> None:
    events = fixture_events("stream_failed")

    assert kinds(events) == ["codex.item", "text", "codex.error", "error"]
    assert events[1].data["text"] == "Partial "
    assert events[2].data == {"message": "stream disconnected before completion: boom"}
    reason = reason_of(events)
    assert (reason.provider, reason.kind, reason.retryable, reason.status) == (
        "codex",
        "turn_failed",
        False,
        None,
    )
    assert reason.message == "stream disconnected before completion: boom"
    assert reason.raw == {"type": "turn.failed", "error": {"message": reason.message}}
    assert events[-1].data["session_id"] == fixture_thread("stream_failed")
    assert Response.from_events(events).text == "Partial "


def test_real_401_is_an_authentication_error_that_is_not_retryable() -> None:
    reason = reason_of(fixture_events("http_401"))

    assert (reason.kind, reason.status, reason.retryable) == ("authentication", 401, False)
    assert reason.message is not None and "bad key" in reason.message


def test_real_incomplete_response_fails_the_turn() -> None:
    events = fixture_events("incomplete")

    assert kinds(events) == ["codex.item", "text", "codex.error", "error"]
    reason = reason_of(events)
    assert reason.kind == "turn_failed"
    assert reason.message == "Incomplete response returned, reason: max_output_tokens"


def test_real_resumed_turn_keeps_the_thread_id() -> None:
    first, second = fixture_events("resumed_1"), fixture_events("resumed_2")

    assert response_of(first).text == "First answer."
    assert response_of(second).text == "Second answer."
    assert response_of(first).session_id == response_of(second).session_id


def test_translator_reports_the_thread_id_once() -> None:
    translator = CodexStreamTranslator()
    assert translator.translate({"type": "thread.started", "thread_id": "t-1"}) == []
    assert translator.take_thread_id() == "t-1"
    assert translator.take_thread_id() is None
    translator.translate({"type": "thread.started", "thread_id": "t-1"})
    assert translator.take_thread_id() is None


def test_translator_first_terminal_wins() -> None:
    events = translate_lines(
        [
            {"type": "turn.failed", "error": {"message": "first"}},
            {"type": "turn.completed", "usage": {"input_tokens": 1}},
        ]
    )
    assert kinds(events) == ["error"]
    assert reason_of(events).message == "first"


def test_translator_turn_failed_without_message_uses_the_last_notification() -> None:
    events = translate_lines(
        [
            {"type": "error", "message": "Reconnecting... 1/5"},
            {"type": "error", "message": "the real cause"},
            {"type": "turn.failed"},
        ]
    )
    assert kinds(events) == ["codex.error", "codex.error", "error"]
    assert reason_of(events).message == "the real cause"


def test_rate_limit_message_gives_a_retryable_rate_limited_reason() -> None:
    text = "exceeded retry limit, last status: 429 Too Many Requests"
    events = translate_lines([{"type": "turn.failed", "error": {"message": text}}])
    reason = reason_of(events)
    assert (reason.kind, reason.status, reason.retryable) == ("rate_limited", 429, True)


def test_translator_keeps_unknown_shapes_as_non_terminal_events() -> None:
    translator = CodexStreamTranslator()
    assert [e.kind for e in translator.translate([1, 2])] == ["codex.unknown"]
    assert [e.kind for e in translator.translate({"type": "mystery", "n": 1})] == ["codex.mystery"]
    assert translator.translate({"no": "type"})[0].kind == "codex.unknown"
    assert translator.translate({"type": "item.completed", "item": "odd"})[0].kind == "codex.item"
    odd_message = {"type": "item.completed", "item": {"type": "agent_message", "text": 3}}
    assert translator.translate(odd_message)[0].kind == "codex.item"
    assert translator.translate({"type": "item.started", "item": {}}) == []
    assert translator.translate({"type": "item.started", "item": {"type": "reasoning"}}) == []
    assert translator.translate({"type": "item.updated", "item": {"type": "file_change"}}) == []
    assert translator.unparsed(b"x" * 2000).data == {"size_bytes": 2000, "line": "x" * 1024}
    assert not translator.finished


def test_translate_line_decodes_raw_lines_through_the_shared_base() -> None:
    translator = CodexStreamTranslator("gpt-x")
    seen: list[bytes] = []
    lines = (FIXTURES / "text_turn.jsonl").read_bytes().splitlines()
    events = [
        e
        for raw in [b"  ", *lines]
        for e in translate_line(translator, raw, on_unparsed=seen.append)
    ]
    assert [(e.kind, e.data) for e in events] == [
        (e.kind, e.data) for e in fixture_events("text_turn", "gpt-x")
    ]
    assert translator.take_thread_id() == fixture_thread("text_turn")
    assert translate_line(translator, b'{"type":"turn.completed"}') == []  # after the terminal
    assert kinds(translate_line(translator, b"{oops", on_unparsed=seen.append)) == [
        "codex.unparsed"
    ]
    assert seen == [b"{oops"]  # blank lines are skipped, not reported


@pytest.mark.parametrize(
    ("item_type", "expected"),
    [
        ("mcp_tool_call", ["tool_use", "tool_result"]),
        ("file_change", ["tool_use", "tool_result"]),
        ("web_search", ["tool_use", "tool_result"]),
        ("tool_call", ["tool_use"]),
        ("tool_result", ["tool_result"]),
        ("reasoning", ["codex.item"]),
        ("todo_list", ["codex.item"]),
    ],
)
def test_item_types_map_to_event_kinds(item_type: str, expected: list[str]) -> None:
    item = {"id": "item_7", "type": item_type, "status": "completed"}
    events = CodexStreamTranslator().translate({"type": "item.completed", "item": item})
    assert kinds(events) == expected
    assert all(event.data == item for event in events)
    running = {**item, "status": "in_progress"}
    started = CodexStreamTranslator().translate({"type": "item.started", "item": running})
    tool = expected == ["tool_use", "tool_result"]  # the items run by the CLI itself
    assert kinds(started) == (["codex.tool_started"] if tool else
                              ["codex.item"] if item_type == "todo_list" else [])
    assert all(event.data == running for event in started)


def test_end_of_stream_without_notification_is_no_result_with_exit_code_and_stderr() -> None:
    translator = CodexStreamTranslator()
    translator.translate({"type": "thread.started", "thread_id": "t-2"})
    event = translator.end_of_stream(2, "fatal: broke\n")
    assert event is not None and event.kind == "error"
    reason = event.data["reason"]
    assert (reason.kind, reason.raw["exit_code"]) == ("no_result", 2)
    assert (
        reason.message == "codex exited with status 2 before turn.completed; stderr tail: "
        "fatal: broke"
    )
    assert event.data["session_id"] == "t-2"
    assert translator.end_of_stream(0, "") is None


def test_end_of_stream_after_a_notification_carries_it() -> None:
    events = translate_lines([{"type": "error", "message": "stream disconnected"}])
    reason = reason_of(events)
    assert (reason.kind, reason.message) == ("cli_error", "stream disconnected")


# -- options and the command line ---------------------------------------------------------


def test_options_are_the_struct_fields() -> None:
    assert frozenset(CodexOptions.__struct_fields__) == OPTIONS
    assert "ephemeral" not in OPTIONS


@pytest.mark.parametrize(
    ("opts", "reason"),
    [
        ({"colour": "red"}, ("unknown_option", "colour")),
        ({"sandbox": "everything"}, ("invalid_option", "sandbox", "everything")),
        ({"max_line_bytes": 0}, ("invalid_option", "max_line_bytes", 0)),
        ({"config": {"a": {"nested": 1}}}, ("invalid_option", "config", {"a": {"nested": 1}})),
        ({"env": {"A=B": "x"}}, ("invalid_option", "env", {"A=B": "x"})),
        ({"cwd": ""}, ("invalid_option", "cwd", "")),
        ({"ephemeral": True}, ("invalid_option", "ephemeral", True)),
        ([("model", "x")], ("invalid_options", "list")),
    ],
)
def test_bad_options_are_refused_at_start(opts: Any, reason: tuple[Any, ...]) -> None:
    with pytest.raises(SessionStartError) as info:
        CodexCLI.start_session(opts)
    assert info.value.reason == reason


def test_a_missing_cli_is_a_start_error_naming_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(SessionStartError) as info:
        CodexCLI.start_session({"cli_path": str(tmp_path / "no-codex")})
    reason = info.value.reason
    assert isinstance(reason, BackendError)
    assert (reason.provider, reason.kind) == ("codex", "cli_not_found")
    assert reason.message is not None and INSTALL_HINT in reason.message
    assert "@openai/codex" in INSTALL_HINT


def test_a_relative_cli_path_becomes_absolute_at_start(
        fake_codex: FakeCodex, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    session = CodexCLI.start_session(fake_codex.options(cli_path="bin/codex", cwd="/"))
    assert session.cli == str(fake_codex.cli)
    assert CodexCLI.command(session, "hi")[0] == str(fake_codex.cli)


def test_command_for_a_new_thread_and_for_a_resumed_one(fake_codex: FakeCodex) -> None:
    session = CodexCLI.start_session(
        fake_codex.options(
            model="gpt-test",
            sandbox="read-only",
            profile="ci",
            config={"model_reasoning_effort": "low", "n": 3, "flag": True, "list": ["a", 1]},
            images=["/tmp/a.png"],
            extra_args=["--color", "never"],
        )
    )
    head = [
        str(fake_codex.cli), "exec", "--json", "--skip-git-repo-check",
        "--model", "gpt-test", "--profile", "ci", "--sandbox", "read-only",
        "--config", 'model_reasoning_effort="low"', "--config", "n=3",
        "--config", "flag=true", "--config", 'list=["a", 1]',
        "--image", "/tmp/a.png", "--color", "never",
    ]  # fmt: skip
    assert CodexCLI.command(session, "-starts with a dash") == [*head, "--", "-starts with a dash"]

    resumed = CodexCLI.checkpoint_session(session, "thread-9")
    assert CodexCLI.command(resumed, "next") == [*head, "resume", "--", "thread-9", "next"]


def test_the_prompt_dash_is_refused_at_dispatch(fake_codex: FakeCodex) -> None:
    session = CodexCLI.start_session(fake_codex.options())
    with pytest.raises(DispatchError) as info:
        CodexCLI.prompt(session, "-", TurnRecorder().context)
    assert info.value.reason.kind == "invalid_prompt"
    assert fake_codex.calls() == []


# -- the process layer against the fake CLI -------------------------------------------------


def test_a_turn_checkpoints_the_thread_and_the_next_turn_resumes_it(
    fake_codex: FakeCodex, tmp_path: Path
) -> None:
    home = tmp_path / "codex-home"
    home.mkdir()
    session = CodexCLI.start_session(fake_codex.options(codex_home=str(home), cwd=str(tmp_path)))

    events, session, recorder = run_turn(CodexCLI, session, "hello")

    assert recorder.checkpoints == [FAKE_THREAD]
    assert kinds(events) == ["codex.item", "text", "usage", "result"]
    assert events[1].data["text"] == "you said: hello"
    assert (session.thread_id, session.turns) == (FAKE_THREAD, 1)

    events, session, _ = run_turn(CodexCLI, session, "again")
    first, second = fake_codex.calls()
    assert first["argv"][-2:] == ["--", "hello"]
    assert second["argv"][-4:] == ["resume", "--", FAKE_THREAD, "again"]
    assert "--cd" in first["argv"] and first["cwd"] == str(tmp_path)
    assert first["env"]["CODEX_HOME"] == str(home)
    assert first["pgid"] == first["pid"]  # its own process group
    assert response_of(events).text == "you said: again"
    assert session.turns == 2

    session = CodexCLI.reset_session(session)
    assert (session.thread_id, session.turns) == (None, 0)


def test_a_rich_turn_keeps_every_item_in_order(fake_codex: FakeCodex) -> None:
    fake_codex.script("rich_turn")
    session = CodexCLI.start_session(fake_codex.options())

    events, _, _ = run_turn(CodexCLI, session, "do things")

    assert kinds(events) == [
        "codex.item", "codex.tool_started", "tool_use", "tool_result", "text", "tool_use",
        "tool_result", "text", "usage", "result",
    ]  # fmt: skip
    response = response_of(events)
    assert response.text == "Ran it.\n\nSecond message."
    assert response.final_message == "Second message."
    assert [e.data["type"] for e in response.tool_calls] == ["command_execution", "file_change"]
    assert response.usage == {
        "input_tokens": 20,
        "cached_input_tokens": 4,
        "cache_write_input_tokens": 0,
        "output_tokens": 6,
        "reasoning_output_tokens": 2,
        # the normalized keys beside the raw ones
        "cache_read_input_tokens": 4,
        "cache_creation_input_tokens": 0,
        "reasoning_tokens": 2,
    }


@pytest.mark.parametrize(
    ("scenario", "text"),
    [("split_line", "split across reads"), ("utf8_split", "héllo ✓ 😀 done")],
)
def test_lines_cut_across_reads_are_reassembled(
    fake_codex: FakeCodex, scenario: str, text: str
) -> None:
    fake_codex.script(scenario)
    session = CodexCLI.start_session(fake_codex.options())

    events, _, _ = run_turn(CodexCLI, session, "x")

    assert kinds(events) == ["text", "usage", "result"]
    assert events[0].data["text"] == text


def test_an_oversize_line_fails_the_turn_and_the_next_turn_works(fake_codex: FakeCodex) -> None:
    fake_codex.script("oversize", "echo")
    session = CodexCLI.start_session(
        fake_codex.options(max_line_bytes=1000, env={"FAKE_CODEX_SIZE": "5000"})
    )

    events, session, _ = run_turn(CodexCLI, session, "big")

    reason = reason_of(events)
    assert reason.kind == "line_too_long"
    assert reason.raw["limit_bytes"] == 1000 and reason.raw["size_bytes"] > 5000
    assert "max_line_bytes=1000" in (reason.message or "")
    assert events[-1].data["session_id"] == FAKE_THREAD

    events, _, _ = run_turn(CodexCLI, session, "small")
    assert response_of(events).text == "you said: small"


def test_unknown_and_non_json_lines_are_never_fatal(fake_codex: FakeCodex) -> None:
    fake_codex.script("unknown_lines")
    session = CodexCLI.start_session(fake_codex.options())

    events, _, _ = run_turn(CodexCLI, session, "x")

    assert kinds(events) == [
        "codex.mystery.event", "codex.unparsed", "codex.unknown", "codex.item", "text", "usage",
        "result",
    ]  # fmt: skip
    assert events[1].data == {"size_bytes": 23, "line": "this is not json at all"}
    assert response_of(events).text == "still fine"


def test_turn_failed_after_text_is_an_error_not_a_success(fake_codex: FakeCodex) -> None:
    fake_codex.script("turn_failed")
    session = CodexCLI.start_session(fake_codex.options())

    events, session, recorder = run_turn(CodexCLI, session, "x")

    assert kinds(events) == ["text", "codex.error", "error"]
    assert reason_of(events).message == "stream disconnected before completion: boom"
    assert recorder.checkpoints == [FAKE_THREAD]  # the thread survives a failed turn


@pytest.mark.parametrize(
    ("scenario", "kind", "status", "retryable"),
    [("http_401", "authentication", 401, False), ("rate_limited", "rate_limited", 429, True)],
)
def test_http_failures_reported_by_the_cli_keep_their_status(
    fake_codex: FakeCodex, scenario: str, kind: str, status: int, retryable: bool
) -> None:
    fake_codex.script(scenario)
    session = CodexCLI.start_session(fake_codex.options())

    events, _, _ = run_turn(CodexCLI, session, "x")

    reason = reason_of(events)
    assert (reason.kind, reason.status, reason.retryable) == (kind, status, retryable)


@pytest.mark.parametrize(
    ("scenario", "terminal"),
    [
        ("failed_then_completed", "error"),
        ("completed_then_more", "result"),
        ("completed_then_nonzero", "result"),
    ],
)
def test_the_first_outcome_wins(fake_codex: FakeCodex, scenario: str, terminal: str) -> None:
    fake_codex.script(scenario)
    session = CodexCLI.start_session(fake_codex.options())

    events, _, _ = run_turn(CodexCLI, session, "x")

    assert events[-1].kind == terminal
    assert sum(event.is_terminal for event in events) == 1
    assert "late text" not in Response.from_events(events).text


def test_eof_without_outcome_is_a_prompt_error_with_exit_code_and_stderr(
    fake_codex: FakeCodex,
) -> None:
    fake_codex.script("eof_no_result")
    session = CodexCLI.start_session(fake_codex.options())

    started = time.monotonic()
    events, _, _ = run_turn(CodexCLI, session, "x")

    assert time.monotonic() - started < WAIT_S
    assert kinds(events) == ["text", "error"]
    reason = reason_of(events)
    assert reason.kind == "no_result"
    assert reason.raw["exit_code"] == 2
    assert "fatal: the model connection broke" in reason.raw["stderr_tail"]
    assert "status 2" in (reason.message or "")


def test_eof_after_an_error_notification_fails_with_that_notification(
    fake_codex: FakeCodex,
) -> None:
    fake_codex.script("eof_after_error")
    session = CodexCLI.start_session(fake_codex.options())

    events, _, _ = run_turn(CodexCLI, session, "x")

    assert kinds(events) == ["codex.error", "error"]
    reason = reason_of(events)
    assert (reason.kind, reason.message) == (
        "cli_error",
        "stream disconnected before completion: reset by peer",
    )
    assert reason.raw["exit_code"] == 1


def test_retry_notifications_are_visible_non_terminal_events(fake_codex: FakeCodex) -> None:
    fake_codex.script("retry_then_ok")
    session = CodexCLI.start_session(fake_codex.options())

    events, _, _ = run_turn(CodexCLI, session, "x")

    assert kinds(events) == ["codex.error", "text", "usage", "result"]
    assert events[0].data["message"].startswith("Reconnecting... 1/5")


@pytest.mark.parametrize("scenario", ["linger", "linger_ignore_term"])
def test_a_cli_that_lingers_after_its_outcome_is_ended_without_a_zombie(
    fake_codex: FakeCodex, scenario: str
) -> None:
    fake_codex.script(scenario)
    session = CodexCLI.start_session(fake_codex.options(exit_grace_ms=100, term_grace_ms=200))

    events, session, _ = run_turn(CodexCLI, session, "x")

    assert events[-1].kind == "result"
    child = session.last_child
    assert child is not None and child.wait_reaped(WAIT_S)
    expected = -15 if scenario == "linger" else -9
    assert child.returncode == expected
    assert wait_until(lambda: not process_group_alive(child.pid), WAIT_S)


def test_stderr_flood_before_stdout_does_not_deadlock(fake_codex: FakeCodex) -> None:
    fake_codex.script("stderr_flood")
    session = CodexCLI.start_session(fake_codex.options(stderr_tail_bytes=4096))

    events, session, _ = run_turn(CodexCLI, session, "x")

    assert response_of(events).text == "you said: x"
    child = session.last_child
    assert child is not None and child.wait_reaped(WAIT_S)
    assert child.stderr_bytes > 200 * 1024
    assert child.stderr_tail().endswith(b"END-OF-STDERR\n")
    assert len(child.stderr_tail()) == 4096


def test_cancel_kills_the_whole_process_group(fake_codex: FakeCodex) -> None:
    fake_codex.script("slow")
    session = CodexCLI.start_session(fake_codex.options())
    recorder = TurnRecorder()
    stream, session = CodexCLI.prompt(session, "x", recorder.context)
    iterator = iter(stream)

    assert wait_until(lambda: (fake_codex.dir / "helper.pid").exists(), WAIT_S)
    helper = fake_codex.helper_pid()
    recorder.cancel_event.set()
    CodexCLI.cancel(session)
    CodexCLI.cancel(session)  # idempotent

    rest = list(iterator)
    assert kinds(rest)[-1] == "error"
    assert reason_of(rest).kind == "cancelled"
    child = session.last_child
    assert child is not None and child.wait_reaped(WAIT_S)
    # SIGKILL reaches the other members of the group asynchronously: bounded wait
    assert wait_until(lambda: not process_group_alive(child.pid), WAIT_S)
    assert wait_until(lambda: not pid_alive(helper), WAIT_S)


def test_a_rejected_checkpoint_fails_the_turn(fake_codex: FakeCodex) -> None:
    def reject(_: str) -> None:
        raise CheckpointError("conflicting_session_id")

    session = CodexCLI.start_session(fake_codex.options())
    with pytest.raises(CheckpointError):
        run_turn(CodexCLI, session, "x", TurnRecorder(reject))


def test_a_cli_removed_after_start_is_a_dispatch_error(fake_codex: FakeCodex) -> None:
    session = CodexCLI.start_session(fake_codex.options())
    fake_codex.cli.unlink()

    with pytest.raises(DispatchError) as info:
        CodexCLI.prompt(session, "x", TurnRecorder().context)

    reason = info.value.reason
    assert (reason.provider, reason.kind) == ("codex", "cli_not_found")
    assert INSTALL_HINT in (reason.message or "")


def test_inherit_env_false_gives_the_cli_only_its_env(
    fake_codex: FakeCodex, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CODEX_LEAK_CHECK", "secret")
    session = CodexCLI.start_session(fake_codex.options())
    run_turn(CodexCLI, session, "x")
    assert "CODEX_LEAK_CHECK" not in fake_codex.calls()[0]["env"]

    inheriting = CodexCLI.start_session({**fake_codex.options(), "inherit_env": True})
    run_turn(CodexCLI, inheriting, "x")
    assert fake_codex.calls()[1]["env"]["CODEX_LEAK_CHECK"] == "secret"


# -- through an agent ----------------------------------------------------------------------


def test_an_agent_resumes_its_thread_and_survives_an_interrupt(fake_codex: FakeCodex) -> None:
    fake_codex.script("echo", "slow", "echo")
    agent = gen_agent.start_agent(
        Agent, name="codex-agent", backend=CodexCLI, backend_opts=fake_codex.options()
    )

    first = agent.ask("one", timeout=WAIT_S)
    assert (first.text, first.session_id, first.provider) == ("you said: one", FAKE_THREAD, "codex")

    request = gen_agent.tell("codex-agent", "slow one")
    assert wait_until(lambda: (fake_codex.dir / "helper.pid").exists(), WAIT_S)
    helper = fake_codex.helper_pid()
    gen_agent.interrupt("codex-agent")
    assert gen_agent.poll("codex-agent", request).status in {"pending", "failed"}
    assert wait_until(lambda: not pid_alive(helper), WAIT_S)
    assert wait_until(lambda: gen_agent.poll("codex-agent", request).status == "failed", WAIT_S)
    assert gen_agent.poll("codex-agent", request).reason == "interrupted"

    third = agent.ask("three", timeout=WAIT_S)
    assert third.text == "you said: three"
    argvs = [call["argv"] for call in fake_codex.calls()]
    assert argvs[1][-4:] == ["resume", "--", FAKE_THREAD, "slow one"]
    assert argvs[2][-4:] == ["resume", "--", FAKE_THREAD, "three"]
    gen_agent.stop("codex-agent")


def test_an_agent_turn_that_fails_reports_the_backend_error(fake_codex: FakeCodex) -> None:
    fake_codex.script("http_401")
    gen_agent.start_agent(
        Agent, name="codex-401", backend=CodexCLI, backend_opts=fake_codex.options()
    )

    with pytest.raises(TurnError) as info:
        gen_agent.ask("codex-401", "x", timeout=WAIT_S)

    reason = info.value.reason
    assert isinstance(reason, BackendError)
    assert (reason.provider, reason.kind, reason.status) == ("codex", "authentication", 401)
    gen_agent.stop("codex-401")


# -- structured output and per-turn usage (issue 18) ----------------------------------------


def test_the_translator_reports_this_turns_usage_from_the_threads_totals() -> None:
    totals = {"input_tokens": 42, "cached_input_tokens": 4, "output_tokens": 8}
    line = {"type": "turn.completed", "usage": totals}
    fresh = CodexStreamTranslator("m")
    usage, result = fresh.translate(line)
    assert usage.data == totals  # a new thread: the totals are this turn's
    assert result.data["thread_usage"] == totals

    before = {"input_tokens": 12, "cached_input_tokens": 0, "output_tokens": 5}
    usage, result = CodexStreamTranslator("m", thread_usage=before).translate(line)
    assert usage.data == {"input_tokens": 30, "cached_input_tokens": 4, "output_tokens": 3}
    assert result.data["thread_usage"] == totals
    assert result.data["raw"]["usage"] == totals  # what the CLI said stays visible
    # Totals below the kept ones belong to another thread: taken as they are.
    usage, _ = CodexStreamTranslator("m", thread_usage={"input_tokens": 99}).translate(line)
    assert usage.data == totals


def test_the_command_passes_the_schema_file_before_resume(fake_codex: FakeCodex) -> None:
    session = CodexCLI.start_session(fake_codex.options(model="gpt-test"))
    with_schema = msgspec.structs.replace(session, schema_file="/tmp/s.json")
    head = [str(fake_codex.cli), "exec", "--json", "--skip-git-repo-check", "--model",
            "gpt-test", "--output-schema", "/tmp/s.json"]
    assert CodexCLI.command(with_schema, "q") == [*head, "--", "q"]
    resumed = CodexCLI.checkpoint_session(with_schema, "thread-9")
    assert CodexCLI.command(resumed, "q") == [*head, "resume", "--", "thread-9", "q"]


class _Verdict(msgspec.Struct, frozen=True):
    answer: str
    confidence: float


def test_structured_turns_pass_a_schema_file_that_is_removed_and_report_per_turn_usage(
    fake_codex: FakeCodex, schema_dir: Path
) -> None:
    fake_codex.script("schema_echo")
    agent = gen_agent.start_agent(Agent, name="codex-schema", backend=CodexCLI,
                                  backend_opts=fake_codex.options())
    schema = strict_schema_of(_Verdict)

    first = agent.ask("one", timeout=WAIT_S, output=dict[str, Any])
    second = agent.ask("two", timeout=WAIT_S, output=dict[str, Any])
    plain = agent.ask("three", timeout=WAIT_S)
    with pytest.raises(TurnError) as failed:
        agent.ask("four", timeout=WAIT_S, output=_Verdict)
    gen_agent.stop("codex-schema")

    # The CLI read the strict schema from the file it was given (the fake echoes it).
    assert first.parsed == strict_schema_of(dict[str, Any])
    assert second.parsed == strict_schema_of(dict[str, Any])
    assert (plain.text, plain.parsed) == ("{}", None)
    kind, invalid = failed.value.reason
    assert kind == "invalid_output"
    assert msgspec.json.decode(invalid.response.text) == schema
    argvs = [call["argv"] for call in fake_codex.calls()]
    assert "--output-schema" in argvs[1] and "--output-schema" not in argvs[2]
    assert argvs[1].index("--output-schema") < argvs[1].index("resume")
    # Every schema file is gone once its turn ended.
    assert list(schema_dir.iterdir()) == []
    # The fake reports the thread's totals (20/6 per turn); each Response has its turn's.
    for response in (first, second, plain, invalid.response):
        assert response.usage is not None
        assert (response.usage["input_tokens"], response.usage["output_tokens"]) == (20, 6)
    assert invalid.response.session_usage is not None
    assert invalid.response.session_usage["input_tokens"] == 80


def test_a_dispatch_error_removes_the_schema_file(
    fake_codex: FakeCodex, schema_dir: Path
) -> None:
    session = CodexCLI.start_session(fake_codex.options())
    fake_codex.cli.unlink()
    context = TurnContext(agent="a", ref="r", attempt=1, cancel_event=threading.Event(),
                          checkpoint=lambda _: None, options=RequestOptions(output=_Verdict))
    with pytest.raises(DispatchError) as info:
        CodexCLI.prompt(session, "x", context)
    assert info.value.reason.kind == "cli_not_found"
    assert list(schema_dir.iterdir()) == []


def test_a_structured_stream_closed_early_removes_its_file(
    fake_codex: FakeCodex, schema_dir: Path
) -> None:
    session = CodexCLI.start_session(fake_codex.options())
    context = TurnContext(agent="a", ref="r", attempt=1, cancel_event=threading.Event(),
                          checkpoint=lambda _: None, options=RequestOptions(output=_Verdict))
    stream, _ = CodexCLI.prompt(session, "x", context)
    (path,) = schema_dir.iterdir()
    assert msgspec.json.decode(path.read_bytes()) == strict_schema_of(_Verdict)
    next(stream)
    stream.close()  # the runtime closes a stream it stops reading (§4.6)
    assert list(schema_dir.iterdir()) == []

    CodexCLI.terminate_session(session)


def test_a_structured_stream_never_started_removes_its_file_when_collected(
    fake_codex: FakeCodex, schema_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (No child here: the exec runner's own stream is replaced by one that spawns nothing.)
    def no_child(cls: Any, session: Any, prompt: str, context: Any) -> Any:
        return iter([Event.new("result", {})]), session

    monkeypatch.setattr(CLIBackend, "prompt", classmethod(no_child))
    session = CodexCLI.start_session(fake_codex.options())
    context = TurnContext(agent="a", ref="r", attempt=1, cancel_event=threading.Event(),
                          checkpoint=lambda _: None, options=RequestOptions(output=_Verdict))
    stream, _ = CodexCLI.prompt(session, "x", context)
    assert len(list(schema_dir.iterdir())) == 1
    del stream  # never started, so its `finally` never runs: removed when collected
    gc.collect()
    assert list(schema_dir.iterdir()) == []


def test_thread_totals_follow_the_thread(fake_codex: FakeCodex) -> None:
    session = CodexCLI.start_session(fake_codex.options())
    totals = {"input_tokens": 42, "output_tokens": 8}
    updated = CodexCLI.update_session(
        CodexCLI.checkpoint_session(session, "t-1"), {"session_id": "t-1", "thread_usage": totals})
    assert (updated.thread_id, updated.thread_usage) == ("t-1", totals)
    assert CodexCLI.checkpoint_session(updated, "t-1").thread_usage == totals
    assert CodexCLI.checkpoint_session(updated, "t-2").thread_usage is None
    assert CodexCLI.reset_session(updated).thread_usage is None
    record = CodexCLI.export_session(updated)
    assert record == {"session_id": "t-1", "thread_usage": totals}
    restored = CodexCLI.restore_session(record, fake_codex.options())
    assert (restored.thread_id, restored.thread_usage) == ("t-1", totals)
    older = CodexCLI.restore_session({"session_id": "t-1"}, fake_codex.options())
    assert (older.thread_id, older.thread_usage) == ("t-1", None)
