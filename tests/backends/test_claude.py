"""ClaudeCLI: the pure translator on recorded real-CLI output, options, and the process layer
against a byte-exact fake CLI (tests/fakes/fake_claude.py)."""

from __future__ import annotations

import itertools
import signal
import threading
import time
from pathlib import Path

import msgspec
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import gen_agent
from gen_agent._errors import AgentStartError, CheckpointError
from gen_agent._event import Event
from gen_agent._response import Response
from gen_agent.backend import BackendError, DispatchError, SessionStartError
from gen_agent.backends._subprocess import process as _process
from gen_agent.backends._subprocess.jsonl import translate_line
from gen_agent.backends._subprocess.process import (
    ChildProcess,
    LineBuffer,
    LineTooLong,
    spawn_error,
)
from gen_agent.backends.claude import (
    INSTALL_HINT,
    OPTIONS,
    ClaudeCLI,
    ClaudeOptions,
    ClaudeStreamTranslator,
    translate_lines,
)

from .conftest import (
    FIXTURES,
    Agent,
    FakeClaude,
    TurnRecorder,
    kinds,
    pid_alive,
    process_group_alive,
    response_of,
    run_turn,
    wait_until,
)

pytestmark = pytest.mark.usefixtures("no_child_left")


def fixture_events(name: str) -> list[Event]:
    return translate_lines((FIXTURES / f"{name}.jsonl").read_bytes().splitlines())


# -- the translator on real CLI output (claude 2.1.332 and 2.1.197) ---------------------------


def test_real_text_turn_normalizes_field_by_field():
    events = fixture_events("text_turn")
    assert kinds(events) == ["session", "text", "usage", "result"]
    session, text, usage, result = events
    assert session.data["session_id"] == "589aa25d-fd5e-49e1-9293-7ad8b729197e"
    assert session.data["model"] == "claude-opus-5-5"
    assert session.data["claude_code_version"] == "2.1.332"
    assert session.data["permission_mode"] == "default"
    assert text.data == {"text": "Hello from the loopback model.", "message_boundary": True}
    assert usage.data == {
        "input_tokens": 12,
        "output_tokens": 7,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    data = result.data
    assert data["text"] == "Hello from the loopback model."
    assert data["session_id"] == "589aa25d-fd5e-49e1-9293-7ad8b729197e"
    assert data["model"] == "claude-opus-5-5"
    assert data["cost_usd"] == 0.000188
    assert data["num_turns"] == 1
    assert data["duration_ms"] == 86
    assert data["duration_api_ms"] == 17
    assert data["is_error"] is False
    assert data["subtype"] == "success"
    assert data["stop_reason"] == "end_turn"
    assert data["provider"] == "claude"
    assert data["raw"]["terminal_reason"] == "completed"  # fields we do not model are kept

    response = response_of(events)
    assert response.text == "Hello from the loopback model."
    assert response.final_message == "Hello from the loopback model."
    assert response.usage == usage.data
    assert response.session_id == "589aa25d-fd5e-49e1-9293-7ad8b729197e"
    assert response.model == "claude-opus-5-5"
    assert response.num_turns == 1
    assert response.cost_usd == 0.000188
    assert response.duration_api_ms == 17
    assert response.stop_reason == "end_turn"
    assert response.is_error is False
    assert response.subtype == "success"
    assert response.provider == "claude"
    assert response.tool_calls == []
    assert response.extra["duration_ms"] == 86
    assert response.extra["raw"]["permission_denials"] == []


def test_real_tool_turn_normalizes_field_by_field():
    events = fixture_events("tool_turn")
    assert kinds(events) == [
        "session", "text", "tool_use", "tool_result", "text", "usage", "result",
    ]  # fmt: skip
    _, first, tool_use, tool_result, second, usage, result = events
    assert first.data == {"text": "Let me check.", "message_boundary": True}
    assert tool_use.data == {
        "type": "tool_use",
        "id": "toolu_01",
        "name": "Bash",
        "input": {"command": "echo tool-ran", "description": "say"},
    }
    assert tool_result.data == {
        "tool_use_id": "toolu_01",
        "type": "tool_result",
        "content": "tool-ran",
        "is_error": False,
    }
    assert second.data == {"text": "The command printed tool-ran.", "message_boundary": True}
    assert usage.data["input_tokens"] == 60 and usage.data["output_tokens"] == 29
    assert result.data["num_turns"] == 2
    assert result.data["cost_usd"] == 0.0008200000000000001

    response = response_of(events)
    assert response.text == "The command printed tool-ran."
    assert response.final_message == "The command printed tool-ran."
    assert response.tool_calls == [tool_use]
    assert response.usage == usage.data
    assert response.session_id == "f4fae7af-4a65-476e-b143-88294b420d74"
    assert response.model == "claude-opus-5-5"
    assert response.num_turns == 2
    assert response.cost_usd == 0.0008200000000000001


def test_real_tool_turn_without_result_text_assembles_both_messages():
    events = fixture_events("tool_turn")
    without_text = {k: v for k, v in events[-1].data.items() if k != "text"}
    response = Response.from_events([*events[:-1], Event.new("result", without_text)])
    assert response.text == "Let me check.\n\nThe command printed tool-ran."
    assert response.final_message == "The command printed tool-ran."


def test_real_api_retry_lines_are_visible_non_terminal_events():
    events = fixture_events("api_retry_401_partial")
    assert kinds(events) == ["session", "claude.api_retry", "claude.api_retry"]
    retry = events[1].data
    assert retry["attempt"] == 1
    assert retry["max_retries"] == 10
    assert retry["retry_delay_ms"] == 527
    assert retry["error_status"] == 401
    assert retry["error"] == "authentication_failed"
    assert not any(event.is_terminal for event in events)


def test_real_partial_messages_stream_deltas_and_never_repeat_them():
    events = fixture_events("partial_text_turn")
    texts = [event.data for event in events if event.kind == "text"]
    assert texts == [
        {"text": "Hello ", "message_boundary": True},
        {"text": "from "},
        {"text": "the "},
        {"text": "loopback "},
        {"text": "model."},
    ]
    assert "claude.status" in kinds(events)
    response = response_of(events)
    assert response.text == "Hello from the loopback model."
    assert response.model == "claude-sonnet-4-5"
    assert response.cost_usd == 0.000141


def test_real_partial_tool_turn_keeps_message_boundaries():
    events = fixture_events("partial_tool_turn")
    assert [e.kind for e in events if e.kind in ("text", "tool_use", "tool_result")] == [
        "text", "text", "text", "tool_use", "tool_result", "text", "text", "text", "text",
    ]  # fmt: skip
    without_text = {k: v for k, v in events[-1].data.items() if k != "text"}
    response = Response.from_events([*events[:-1], Event.new("result", without_text)])
    assert response.text == "Let me check.\n\nThe command printed tool-ran."
    assert response.final_message == "The command printed tool-ran."
    assert [call.data["id"] for call in response.tool_calls] == ["toolu_01"]


# -- the translator on hand-made lines ------------------------------------------------------


def assistant(text_blocks, msg_id="m1", parent=None, model="claude-x"):
    content = [b if isinstance(b, dict) else {"type": "text", "text": b} for b in text_blocks]
    return {
        "type": "assistant",
        "message": {"id": msg_id, "model": model, "content": content},
        "parent_tool_use_id": parent,
        "session_id": "s-1",
    }


def result_line(**fields):
    line = {
        "type": "result", "subtype": "success", "is_error": False, "result": "ok",
        "session_id": "s-1", "total_cost_usd": 0.5, "num_turns": 1,
        "usage": {"input_tokens": 1, "output_tokens": 2},
    }  # fmt: skip
    line.update(fields)
    return line


def test_adjacent_text_blocks_are_joined_and_other_blocks_keep_order():
    translator = ClaudeStreamTranslator()
    tool = {"type": "tool_use", "id": "t1", "name": "Read", "input": {}}
    thinking = {"type": "thinking", "thinking": "hmm"}
    events = translator.translate(assistant(["a", "b", tool, thinking, "c"]))
    assert kinds(events) == ["text", "tool_use", "claude.thinking", "text"]
    assert events[0].data == {"text": "ab", "message_boundary": True}
    assert events[3].data == {"text": "c", "message_boundary": True}


def test_tool_use_and_tool_result_are_deduplicated_by_id():
    translator = ClaudeStreamTranslator()
    tool = {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}
    user = {
        "type": "user",
        "message": {"content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]},
    }
    events = []
    for line in (assistant([tool]), assistant([tool]), user, user):
        events += translator.translate(line)
    events += translator.translate({"type": "tool_use", "id": "t1", "name": "Bash"})
    events += translator.translate({"type": "tool_result", "tool_use_id": "t1"})
    events += translator.translate({"type": "tool_use", "id": "t2", "name": "Bash"})
    assert kinds(events) == ["tool_use", "tool_result", "tool_use"]
    assert events[2].data == {"type": "tool_use", "id": "t2", "name": "Bash"}


def test_user_text_is_not_assistant_text():
    translator = ClaudeStreamTranslator()
    user = {"type": "user", "message": {"role": "user", "content": "replayed prompt"}}
    assert translator.translate(user) == []


def test_completed_message_adds_only_text_not_yet_streamed():
    translator = ClaudeStreamTranslator()

    def frame(event):
        return {"type": "stream_event", "event": event, "session_id": "s-1"}

    events = []
    events += translator.translate(frame({"type": "message_start", "message": {"id": "m1"}}))
    events += translator.translate(
        frame({"type": "content_block_start", "index": 0, "content_block": {"type": "text"}})
    )
    for piece in ("Hel", "lo"):
        delta = {"type": "text_delta", "text": piece}
        events += translator.translate(frame({"type": "content_block_delta", "delta": delta}))
    events += translator.translate(assistant(["Hello world"], msg_id="m1"))
    assert [e.data for e in events] == [
        {"text": "Hel", "message_boundary": True},
        {"text": "lo"},
        {"text": " world"},
    ]
    assert Response.from_events([*events, Event.new("result", {})]).text == "Hello world"


def test_top_level_content_block_delta_is_text():
    translator = ClaudeStreamTranslator()
    line = {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "hi"}}
    assert [e.data for e in translator.translate(line)] == [{"text": "hi"}]


def test_subagent_text_never_joins_the_turn_text():
    translator = ClaudeStreamTranslator()
    events = translator.translate(assistant(["inner"], parent="toolu_task"))
    assert kinds(events) == ["claude.subagent_text"]
    assert events[0].data == {"text": "inner", "parent_tool_use_id": "toolu_task"}


def test_unknown_lines_become_non_terminal_events():
    translator = ClaudeStreamTranslator()
    assert kinds(translator.translate({"type": "mystery", "n": 1})) == ["claude.mystery"]
    assert translator.translate({"type": "mystery", "n": 1})[0].data == {"n": 1}
    assert kinds(translator.translate({"no_type": True})) == ["claude.unknown"]
    assert kinds(translator.translate([1, 2])) == ["claude.unknown"]
    assert kinds(translator.translate({"type": "system", "subtype": "hook"})) == ["claude.hook"]
    assert kinds(translator.translate({"type": "assistant", "message": 3})) == ["claude.assistant"]
    unparsed = translator.unparsed(b"not json \xff")
    assert unparsed.kind == "claude.unparsed"
    assert unparsed.data == {"size_bytes": 10, "line": "not json \ufffd"}
    assert not translator.finished


def test_result_is_error_with_subtype_success_is_an_error():
    translator = ClaudeStreamTranslator()
    events = translator.translate(result_line(is_error=True, result="Credit balance too low"))
    assert kinds(events) == ["usage", "error"]
    reason = events[1].data["reason"]
    assert isinstance(reason, BackendError)
    assert reason.provider == "claude"
    assert reason.kind == "error_result"
    assert reason.message == "Credit balance too low"
    assert reason.retryable is False
    assert reason.raw["is_error"] is True
    assert events[1].data["session_id"] == "s-1"
    assert events[1].data["subtype"] == "success"
    assert events[1].data["is_error"] is True


def test_result_with_api_error_status_maps_like_http():
    translator = ClaudeStreamTranslator()
    line = result_line(is_error=True, api_error_status=429, result="API Error: rate limited")
    reason = translator.translate(line)[-1].data["reason"]
    assert (reason.kind, reason.status, reason.retryable) == ("rate_limited", 429, True)
    assert reason.message == "API Error: rate limited"
    assert reason.raw == line


def test_result_error_subtypes_are_errors_with_their_messages():
    translator = ClaudeStreamTranslator()
    line = result_line(subtype="error_max_turns", result="", errors=["hit 3 turns"])
    reason = translator.translate(line)[-1].data["reason"]
    assert reason.kind == "error_max_turns"
    assert reason.message == "hit 3 turns"
    plain = ClaudeStreamTranslator().translate(result_line(subtype="error", result=None))
    assert plain[-1].data["reason"].kind == "error"


def test_cli_error_line_is_a_terminal_error():
    translator = ClaudeStreamTranslator()
    events = translator.translate({"type": "error", "error": "stream_truncated"})
    assert kinds(events) == ["error"]
    reason = events[0].data["reason"]
    assert (reason.kind, reason.message) == ("stream_truncated", "stream_truncated")
    nested = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    reason = ClaudeStreamTranslator().translate(nested)[0].data["reason"]
    assert (reason.kind, reason.message) == ("overloaded_error", "Overloaded")


def test_nothing_after_the_first_terminal_event():
    translator = ClaudeStreamTranslator()
    assert kinds(translator.translate(result_line())) == ["usage", "result"]
    assert translator.finished
    assert translator.translate(assistant(["late"])) == []
    assert translator.translate(result_line(result="second")) == []


def test_empty_result_text_is_omitted_and_model_falls_back_to_model_usage():
    translator = ClaudeStreamTranslator()
    line = result_line(result="", modelUsage={"claude-haiku-4-5": {}}, usage=None)
    events = translator.translate(line)
    assert kinds(events) == ["result"]
    assert "text" not in events[0].data
    assert events[0].data["model"] == "claude-haiku-4-5"


def with_usage(line, usage):
    line["message"]["usage"] = usage
    return line


@pytest.mark.parametrize("path", ["typed", "dict"])
def test_result_without_usage_sums_the_latest_counts_of_each_message(path: str):
    lines = [
        with_usage(assistant(["a"], msg_id="m1"), {"input_tokens": 10, "output_tokens": 1}),
        with_usage(assistant(["b"], msg_id="m2"), {"input_tokens": 7, "output_tokens": 3}),
        with_usage(assistant(["c"], msg_id="m1"), {"output_tokens": 5, "input_tokens": 10}),
        with_usage(assistant(["d"], msg_id="m1"), {"service_tier": "standard"}),  # no counts
        with_usage(assistant(["e"], msg_id="m2"), None),
        with_usage(assistant(["f"], msg_id=""), {"input_tokens": 99}),  # no message id
        result_line(usage=None),
    ]
    translator = ClaudeStreamTranslator()
    events = []
    for line in lines:
        if path == "typed":
            events += translate_line(translator, msgspec.json.encode(line))
        else:
            events += translator.translate(line)
    usage = [event.data for event in events if event.kind == "usage"]
    # m1's latest line with counts (output 5, not 1) plus m2's; key order as `_USAGE_KEYS`.
    assert usage == [{"input_tokens": 17, "output_tokens": 8}]
    assert list(usage[0]) == ["input_tokens", "output_tokens"]


def test_session_id_is_reported_once_per_distinct_id():
    translator = ClaudeStreamTranslator()
    assert translator.take_session_id() is None
    translator.translate({"type": "system", "subtype": "init", "session_id": "a"})
    assert translator.take_session_id() == "a"
    translator.translate(assistant(["x"]) | {"session_id": "a"})
    assert translator.take_session_id() is None
    translator.translate(result_line(session_id="b"))
    assert translator.take_session_id() == "b"


def test_translate_lines_skips_blank_lines_and_stops_at_the_terminal():
    lines = [b"", b'{"type":"mystery"}', b"{oops", msgspec.json.encode(result_line()), b"{}"]
    assert kinds(translate_lines(lines)) == ["claude.mystery", "claude.unparsed", "usage", "result"]


# -- the typed fast path (translate_raw) against the dict path -------------------------------


def comparable(value):
    """`value` with what `==` ignores made visible: dict key order, bool vs int, float vs
    int, and the fields of a `BackendError`."""
    if isinstance(value, dict):
        return ("dict", [(key, comparable(item)) for key, item in value.items()])
    if isinstance(value, list | tuple):
        return (type(value).__name__, [comparable(item) for item in value])
    if isinstance(value, BackendError):
        fields = ("provider", "kind", "retryable", "status", "retry_after", "message")
        return ("BackendError", [getattr(value, name) for name in fields], comparable(value.raw))
    return (type(value).__name__, value)


def reference_line(translator: ClaudeStreamTranslator, raw: bytes) -> list[Event]:
    """One raw line through the dict path: nothing for a blank line, `claude.unparsed` for
    one that is not JSON, else `translate` of msgspec's generic decode."""
    if not raw.strip():
        return []
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return [translator.unparsed(raw)]
    return translator.translate(value)


def assert_paths_agree(lines: list[bytes]) -> None:
    """Feed `lines` to a fresh translator through `translate_line` (the typed path) and to
    another through `reference_line`: same events, data (in order), `finished` and session
    ids checkpointed after every line; same end of stream."""
    fast, slow = ClaudeStreamTranslator(), ClaudeStreamTranslator()
    for raw in lines:
        fast_events = translate_line(fast, raw)
        slow_events = reference_line(slow, raw)
        assert [(e.kind, comparable(e.data)) for e in fast_events] == [
            (e.kind, comparable(e.data)) for e in slow_events
        ], raw
        assert fast.finished == slow.finished
        assert fast.take_session_id() == slow.take_session_id()
    fast_end, slow_end = fast.end_of_stream(1, "tail"), slow.end_of_stream(1, "tail")
    assert comparable(None if fast_end is None else fast_end.data) == comparable(
        None if slow_end is None else slow_end.data
    )


FIXTURE_LINES = {
    path.stem: path.read_bytes().splitlines() for path in sorted(FIXTURES.glob("*.jsonl"))
}


@pytest.mark.parametrize("name", sorted(FIXTURE_LINES))
def test_typed_path_matches_the_dict_path_on_real_turns(name: str):
    assert_paths_agree(FIXTURE_LINES[name])
    assert_paths_agree([line for lines in FIXTURE_LINES.values() for line in lines])


MEANINGFUL_STRINGS = (
    "init", "text", "text_delta", "tool_use", "tool_result", "message_start",
    "content_block_start", "content_block_delta", "<synthetic>", "toolu_01", "s-2", "é—😀",
)  # fmt: skip
# Values a mutation puts into a line: the shapes each handler checks for, and the wrong ones.
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
    | st.sampled_from(MEANINGFUL_STRINGS),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(["type", "id", "text", "content"]), children, max_size=3)
    ),
    max_leaves=6,
)
KEY_NAMES = (
    "type", "subtype", "session_id", "parent_tool_use_id", "event", "message", "delta",
    "content", "content_block", "id", "model", "text", "cwd", "tools", "permissionMode",
)  # fmt: skip
KEYS = st.sampled_from(KEY_NAMES)


def json_paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from json_paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from json_paths(item, (*prefix, index))


def mutate(draw, raw: bytes) -> bytes:
    """`raw` with one change: a value replaced, a key removed or added, a key repeated (in
    JSON text the last one wins), or a byte replaced, inserted or removed. Half the time the
    change is at a key the translator reads."""
    how = draw(st.sampled_from(["replace", "remove", "add", "repeat", "byte"]))
    if how != "byte":
        try:
            line = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            how = "byte"  # an earlier change broke the JSON
    if how == "byte":
        at = draw(st.integers(min_value=0, max_value=len(raw)))
        byte = draw(st.sampled_from(b'{}[]",:\\ 09eE.-tn\xc3\xa9\xff\x80'))
        return raw[:at] + bytes([byte]) + raw[at + draw(st.integers(0, 1)) :]
    if how == "repeat":
        value = msgspec.json.encode(draw(JSON_VALUES))
        return raw[:-1] + b',"' + draw(KEYS).encode() + b'":' + value + b"}"
    paths = [path for path in json_paths(line) if path]
    read = [path for path in paths if path[-1] in KEY_NAMES]
    path = draw(st.sampled_from(read if read and draw(st.booleans()) else paths))
    parent = line
    for key in path[:-1]:
        parent = parent[key]
    if how == "replace":
        parent[path[-1]] = draw(JSON_VALUES)
    elif isinstance(parent, dict) and how == "remove":
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent[draw(KEYS)] = draw(JSON_VALUES)
    return msgspec.json.encode(line)


@st.composite
def mutated_turn(draw) -> list[bytes]:
    """A real turn with one to four of its lines changed (`mutate`), sometimes reordered."""
    lines = list(draw(st.sampled_from(list(FIXTURE_LINES.values()))))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        index = draw(st.integers(min_value=0, max_value=len(lines) - 1))
        lines[index] = mutate(draw, lines[index])
    if draw(st.integers(min_value=0, max_value=3)) == 0:
        lines = draw(st.permutations(lines))
    return lines


def out_of_msgspec_range(raw: bytes) -> bool:
    """Whether the line holds a number msgspec's generic decode rejects (see
    `test_typed_path_does_not_look_at_numbers_in_skipped_fields`)."""
    try:
        msgspec.json.decode(raw)
    except msgspec.ValidationError:
        return True
    except msgspec.DecodeError:
        return False
    return False


@settings(max_examples=200, deadline=None)
@given(lines=mutated_turn())
def test_typed_path_matches_the_dict_path_on_mutated_turns(lines: list[bytes]):
    assume(not any(out_of_msgspec_range(raw) for raw in lines))
    assert_paths_agree(lines)


def test_line_not_valid_utf8_in_a_skipped_field_is_still_unparsed():
    line = b'{"type":"stream_event","uuid":"\xff","session_id":"s-1","event":null}'
    translator = ClaudeStreamTranslator()
    seen: list[bytes] = []
    events = translate_line(translator, line, on_unparsed=seen.append)
    assert kinds(events) == ["claude.unparsed"]
    assert seen == [line]
    assert translator.take_session_id() is None


def test_non_ascii_text_takes_the_typed_path_unchanged():
    delta = {"type": "text_delta", "text": "café — 😀"}
    frame = {"type": "content_block_delta", "index": 0, "delta": delta}
    line = msgspec.json.encode({"type": "stream_event", "event": frame, "uuid": "ü"})
    assert not line.isascii()
    assert [e.data for e in translate_lines([line])] == [{"text": "café — 😀"}]


def test_lines_after_the_terminal_give_nothing_unless_they_are_not_json():
    translator = ClaudeStreamTranslator()
    assert kinds(translate_line(translator, msgspec.json.encode(result_line()))) == [
        "usage", "result",
    ]  # fmt: skip
    assert translate_line(translator, FIXTURE_LINES["partial_text_turn"][4]) == []
    assert translate_line(translator, b"   ") == []
    assert kinds(translate_line(translator, b"{oops")) == ["claude.unparsed"]


def test_typed_path_does_not_look_at_numbers_in_skipped_fields():
    # The one documented difference (ClaudeStreamTranslator.translate_raw): msgspec's generic
    # decode rejects a float beyond 1.8e308; the typed decode skips the field unread.
    line = b'{"type":"stream_event","ttft_ms":1e999,"session_id":"s-1","event":null}'
    assert out_of_msgspec_range(line)
    translator = ClaudeStreamTranslator()
    assert translate_line(translator, line) == []
    assert translator.take_session_id() == "s-1"
    assert kinds(reference_line(ClaudeStreamTranslator(), line)) == ["claude.unparsed"]


# -- options ------------------------------------------------------------------------------


def test_start_session_validates_options(fake_claude: FakeClaude):
    session = ClaudeCLI.start_session(fake_claude.options(model="m", allowed_tools=["Bash"]))
    assert session.options.model == "m"
    assert session.options.allowed_tools == ("Bash",)
    assert session.session_id is None
    assert set(OPTIONS) == set(ClaudeOptions.__struct_fields__)


@pytest.mark.parametrize(
    ("opts", "reason"),
    [
        ({"bogus": 1}, ("unknown_option", "bogus")),
        ({"max_turns": 0}, ("invalid_option", "max_turns", 0)),
        ({"max_turns": True}, ("invalid_option", "max_turns", True)),
        ({"permission_mode": "yolo"}, ("invalid_option", "permission_mode", "yolo")),
        ({"allowed_tools": "Bash"}, ("invalid_option", "allowed_tools", "Bash")),
        ({"env": {"A": 1}}, ("invalid_option", "env", {"A": 1})),
        ({"cwd": ""}, ("invalid_option", "cwd", "")),
        ({"max_line_bytes": -1}, ("invalid_option", "max_line_bytes", -1)),
        ({"no_session_persistence": True}, ("invalid_option", "no_session_persistence", True)),
    ],
)
def test_start_session_rejects_bad_options(fake_claude: FakeClaude, opts, reason):
    with pytest.raises(SessionStartError) as info:
        ClaudeCLI.start_session({**fake_claude.options(), **opts})
    assert info.value.reason == reason
    assert repr(next(iter(opts))) in str(info.value)


def test_start_session_rejects_a_non_dict():
    with pytest.raises(SessionStartError) as info:
        ClaudeCLI.start_session(["cli_path"])  # type: ignore[arg-type]
    assert info.value.reason == ("invalid_options", "list")


def test_missing_cli_fails_the_start_naming_what_to_install(tmp_path: Path):
    with pytest.raises(SessionStartError) as info:
        ClaudeCLI.start_session({"cli_path": str(tmp_path / "claude")})
    reason = info.value.reason
    assert isinstance(reason, BackendError)
    assert (reason.provider, reason.kind) == ("claude", "cli_not_found")
    assert "@anthropic-ai/claude-code" in reason.message
    assert "@anthropic-ai/claude-code" in str(info.value)


def test_a_relative_cli_path_is_resolved_against_the_caller_s_cwd_at_start(
        fake_claude: FakeClaude, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agent_system):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(tmp_path)
    options = fake_claude.options(cli_path="bin/claude", cwd=str(work))
    gen_agent.start_agent(Agent, name="relative", backend=ClaudeCLI, backend_opts=options)
    assert gen_agent.backend_session("relative").cli == str(fake_claude.cli)
    # The turn runs in `work`, where "bin/claude" names nothing: the absolute path works.
    assert gen_agent.ask("relative", "hi", timeout=30).text == "you said: hi"
    assert fake_claude.calls()[0]["cwd"] == str(work)


def test_a_relative_cli_path_missing_from_the_caller_s_cwd_fails_the_start(
        fake_claude: FakeClaude, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agent_system):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # bin/claude is in tmp_path, the CLI's cwd, not here
    options = fake_claude.options(cli_path="bin/claude", cwd=str(tmp_path))
    with pytest.raises(AgentStartError) as info:
        gen_agent.start_agent(Agent, name="missing", backend=ClaudeCLI, backend_opts=options)
    kind, reason = info.value.reason
    assert kind == "backend_start_failed"
    assert (reason.provider, reason.kind, reason.raw) == ("claude", "cli_not_found", "bin/claude")
    assert gen_agent.list_agents() == []


def test_command_line_puts_the_prompt_after_the_option_terminator(fake_claude: FakeClaude):
    session = ClaudeCLI.start_session(
        fake_claude.options(
            model="claude-sonnet-4-5",
            allowed_tools=["Bash", "Read"],
            permission_mode="acceptEdits",
            max_turns=3,
            include_partial_messages=True,
            session_id="abc",
            extra_args=["--debug-file", "/tmp/x"],
        )
    )
    argv = ClaudeCLI.command(session, "--help me")
    assert argv[0] == str(fake_claude.cli)
    assert argv[1:5] == ["-p", "--output-format", "stream-json", "--verbose"]
    assert argv[-2:] == ["--", "--help me"]
    joined = " ".join(argv)
    for part in (
        "--include-partial-messages",
        "--resume abc",
        "--model claude-sonnet-4-5",
        "--allowedTools Bash --allowedTools Read",
        "--permission-mode acceptEdits",
        "--max-turns 3",
        "--debug-file /tmp/x",
    ):
        assert part in joined


def test_a_turn_s_json_schema_goes_before_the_extra_args(fake_claude: FakeClaude):
    session = ClaudeCLI.start_session(fake_claude.options(extra_args=["--debug-file", "/x"]))
    assert "--json-schema" not in ClaudeCLI.command(session, "hi")
    typed = msgspec.structs.replace(session, json_schema='{"type":"integer"}')
    assert ClaudeCLI.command(typed, "hi")[-6:] == [
        "--json-schema", '{"type":"integer"}', "--debug-file", "/x", "--", "hi"]


# -- the process layer, pure parts ------------------------------------------------------


def test_line_buffer_splits_joins_and_bounds():
    buffer = LineBuffer(5)
    assert buffer.feed(b"ab") == []
    assert buffer.feed(b"c\nde") == [b"abc"]
    assert buffer.feed(b"\n\n") == [b"de", b""]
    assert buffer.feed(b"123456") == []
    assert buffer.feed(b"78\nok\n") == [LineTooLong(8, 5), b"ok"]
    assert buffer.feed(b"12345\n") == [b"12345"]
    assert buffer.feed(b"tail") == []
    assert buffer.finish() == b"tail"
    assert buffer.finish() is None
    with pytest.raises(ValueError, match="max_line_bytes"):
        LineBuffer(0)


@settings(max_examples=150, deadline=None)
@given(
    lines=st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=12),
    cuts=st.lists(st.integers(min_value=0, max_value=600), max_size=12),
    limit=st.integers(min_value=1, max_value=30),
)
def test_line_buffer_is_independent_of_read_boundaries(lines, cuts, limit):
    stream = b"".join(line + b"\n" for line in lines)
    points = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    buffer = LineBuffer(limit)
    items = []
    for start, end in itertools.pairwise(points):
        items += buffer.feed(stream[start:end])
    assert buffer.finish() is None
    expected = [line if len(line) <= limit else LineTooLong(len(line), limit) for line in lines]
    assert items == expected


def test_spawn_errors_map_to_backend_errors():
    missing = spawn_error(
        FileNotFoundError(2, "nope", "claude"),
        provider="claude", executable="claude", cwd=None, install_hint=INSTALL_HINT,
    )  # fmt: skip
    assert missing.kind == "cli_not_found" and INSTALL_HINT in missing.message
    cwd = spawn_error(FileNotFoundError(2, "x", "/w"), provider="claude", executable="c", cwd="/w")
    assert cwd.kind == "cwd_not_found"
    denied = spawn_error(PermissionError(13, "x"), provider="codex", executable="c", cwd=None)
    assert (denied.provider, denied.kind) == ("codex", "cli_not_executable")
    too_long = spawn_error(OSError(7, "E2BIG"), provider="claude", executable="c", cwd=None)
    assert too_long.kind == "argument_list_too_long"
    other = spawn_error(OSError(5, "EIO"), provider="claude", executable="c", cwd=None)
    assert other.kind == "spawn_failed" and other.retryable is False


# -- the backend against the fake CLI -------------------------------------------------------


def test_text_turn_runs_the_cli_in_its_own_group_with_the_prompt_verbatim(
    fake_claude: FakeClaude,
):
    session = ClaudeCLI.start_session(fake_claude.options())
    prompt = "-rf; $(echo pwned) `id` 'quoted' \"dq\" \n second line ✓"
    events, session, recorder = run_turn(ClaudeCLI, session, prompt)
    assert kinds(events) == ["session", "text", "usage", "result"]
    assert events[-1].data["text"] == f"you said: {prompt}"
    assert events[-1].data["cost_usd"] == 0.25
    (call,) = fake_claude.calls()
    assert call["argv"][-2:] == ["--", prompt]
    assert call["pgid"] == call["pid"]  # its own process group
    assert recorder.checkpoints == ["fake-session-0001"]
    assert session.session_id == "fake-session-0001"
    assert session.turns == 1
    assert session.last_child.wait_reaped(10) and session.last_child.returncode == 0


def test_second_turn_resumes_the_checkpointed_session(fake_claude: FakeClaude):
    session = ClaudeCLI.start_session(fake_claude.options())
    _, session, _ = run_turn(ClaudeCLI, session, "one")
    events, session, recorder = run_turn(ClaudeCLI, session, "two")
    first, second = fake_claude.calls()
    assert "--resume" not in first["argv"]
    assert second["argv"][second["argv"].index("--resume") + 1] == "fake-session-0001"
    assert events[-1].data["text"] == "you said: two"
    assert recorder.checkpoints == ["fake-session-0001"]
    assert session.turns == 2


def test_a_json_line_split_across_reads_is_joined(fake_claude: FakeClaude):
    fake_claude.script("split_line")
    session = ClaudeCLI.start_session(fake_claude.options())
    events, _, _ = run_turn(ClaudeCLI, session, "x")
    assert kinds(events) == ["session", "text", "usage", "result"]
    assert events[1].data["text"] == "split across reads"


def test_a_utf8_character_cut_at_a_read_boundary_survives(fake_claude: FakeClaude):
    fake_claude.script("utf8_split")
    session = ClaudeCLI.start_session(fake_claude.options())
    events, _, _ = run_turn(ClaudeCLI, session, "x")
    assert events[1].data["text"] == "héllo ✓ 😀 done"
    assert events[-1].data["text"] == "héllo ✓ 😀 done"


def test_an_oversized_line_fails_the_turn_clearly_and_the_next_turn_works(
    fake_claude: FakeClaude,
):
    fake_claude.script("oversize", "echo")
    session = ClaudeCLI.start_session(
        fake_claude.options(max_line_bytes=2_000, env={"FAKE_CLAUDE_SIZE": "50000"})
    )
    events, session, _ = run_turn(ClaudeCLI, session, "big")
    assert kinds(events) == ["session", "error"]
    reason = events[-1].data["reason"]
    assert reason.kind == "line_too_long"
    size = reason.raw["size_bytes"]
    assert size > 50_000 and reason.raw["limit_bytes"] == 2_000
    assert f"{size} bytes" in reason.message and "max_line_bytes=2000" in reason.message
    events, session, _ = run_turn(ClaudeCLI, session, "small")
    assert kinds(events) == ["session", "text", "usage", "result"]
    assert events[-1].data["text"] == "you said: small"


def test_unknown_and_non_json_lines_are_kept_and_never_fatal(fake_claude: FakeClaude):
    fake_claude.script("unknown_lines")
    session = ClaudeCLI.start_session(fake_claude.options())
    events, _, _ = run_turn(ClaudeCLI, session, "x")
    assert kinds(events) == [
        "session", "claude.mystery", "claude.unparsed", "claude.hook_started",
        "claude.unknown", "text", "usage", "result",
    ]  # fmt: skip
    assert events[1].data == {"payload": {"n": 1}}
    assert events[2].data == {"size_bytes": 23, "line": "this is not json at all"}
    assert events[-1].data["text"] == "still fine"


def test_is_error_true_with_subtype_success_fails_the_turn(fake_claude: FakeClaude):
    fake_claude.script("is_error_success")
    session = ClaudeCLI.start_session(fake_claude.options())
    events, session, _ = run_turn(ClaudeCLI, session, "x")
    assert kinds(events) == ["session", "text", "usage", "error"]
    reason = events[-1].data["reason"]
    assert (reason.kind, reason.message) == ("error_result", "Something went wrong")
    assert session.turns == 0  # update_session only follows a result


def test_api_retries_are_visible_and_a_final_401_is_an_authentication_error(
    fake_claude: FakeClaude,
):
    fake_claude.script("api_error_401")
    session = ClaudeCLI.start_session(fake_claude.options())
    events, _, _ = run_turn(ClaudeCLI, session, "x")
    assert kinds(events) == ["session", "claude.api_retry", "claude.api_retry", "usage", "error"]
    assert [e.data["attempt"] for e in events[1:3]] == [1, 2]
    reason = events[-1].data["reason"]
    assert (reason.kind, reason.status, reason.retryable) == ("authentication", 401, False)
    assert reason.message == "Invalid API key · Fix external API key"


def test_api_retry_then_success(fake_claude: FakeClaude):
    fake_claude.script("api_retry_then_ok")
    session = ClaudeCLI.start_session(fake_claude.options())
    events, _, _ = run_turn(ClaudeCLI, session, "x")
    assert kinds(events) == ["session", "claude.api_retry", "text", "usage", "result"]
    assert events[1].data["error_status"] == 529


@pytest.mark.parametrize(
    ("scenario", "kind"), [("error_result", "error_max_turns"), ("error_line", "stream_truncated")]
)
def test_cli_failures_are_terminal_errors(fake_claude: FakeClaude, scenario, kind):
    fake_claude.script(scenario)
    session = ClaudeCLI.start_session(fake_claude.options())
    events, _, _ = run_turn(ClaudeCLI, session, "x")
    assert events[-1].kind == "error"
    assert events[-1].data["reason"].kind == kind


@pytest.mark.parametrize("scenario", ["result_then_more", "result_then_nonzero"])
def test_the_first_terminal_wins(fake_claude: FakeClaude, scenario):
    fake_claude.script(scenario)
    session = ClaudeCLI.start_session(fake_claude.options())
    stream, _ = ClaudeCLI.prompt(session, "x", TurnRecorder().context)
    events = list(stream)  # read to the end: the stream itself stops at the first terminal
    assert [e.kind for e in events if e.is_terminal] == ["result"]
    assert events[-1].data["text"] in ("first result", "fine")
    assert session.last_child.wait_reaped(10)


def test_eof_without_result_is_a_prompt_error_with_exit_status_and_stderr(
    fake_claude: FakeClaude,
):
    fake_claude.script("eof_no_result")
    session = ClaudeCLI.start_session(fake_claude.options(exit_grace_ms=60_000))
    started = time.monotonic()
    events, _, _ = run_turn(ClaudeCLI, session, "x")
    assert time.monotonic() - started < 30  # EOF, not the 60 s grace, ends the turn
    assert kinds(events) == ["session", "text", "error"]
    reason = events[-1].data["reason"]
    assert reason.kind == "no_result"
    assert reason.raw["exit_code"] == 2
    assert "fatal: the model connection broke" in reason.raw["stderr_tail"]
    assert "status 2" in reason.message and "model connection broke" in reason.message


@pytest.mark.parametrize(
    ("scenario", "exit_grace_ms", "status"),
    [("linger", 3_000, -signal.SIGTERM), ("linger_ignore_term", 300, -signal.SIGKILL)],
)
def test_a_cli_that_keeps_running_after_its_result(
    fake_claude: FakeClaude, scenario, exit_grace_ms, status
):
    fake_claude.script(scenario)
    session = ClaudeCLI.start_session(
        fake_claude.options(exit_grace_ms=exit_grace_ms, term_grace_ms=300)
    )
    events, _, _ = run_turn(ClaudeCLI, session, "x")
    assert events[-1].kind == "result"
    assert events[-1].data["text"] == "done but lingering"
    child = session.last_child
    if exit_grace_ms >= 3_000:
        assert child.returncode is None  # the turn ended on the result, not after the grace
    assert child.wait_reaped(15)
    assert child.returncode == status
    assert wait_until(lambda: not process_group_alive(child.pid))


def test_stderr_flood_before_stdout_does_not_deadlock(fake_claude: FakeClaude):
    fake_claude.script("stderr_flood")
    session = ClaudeCLI.start_session(fake_claude.options(stderr_tail_bytes=4096))
    events, _, _ = run_turn(ClaudeCLI, session, "x")
    assert events[-1].kind == "result"
    child = session.last_child
    assert child.wait_reaped(10)
    assert child.stderr_bytes >= 200 * 1024
    tail = child.stderr_tail()
    assert len(tail) == 4096
    assert tail.endswith(b"END-OF-STDERR\n")


def test_cancel_from_another_thread_kills_the_process_group(fake_claude: FakeClaude):
    fake_claude.script("slow")
    session = ClaudeCLI.start_session(fake_claude.options())
    recorder = TurnRecorder()
    stream, session = ClaudeCLI.prompt(session, "x", recorder.context)
    first = next(stream)  # the init line: the CLI is running and blocked after it
    assert first.kind == "session"
    helper = fake_claude.helper_pid()
    rest: list[Event] = []
    reader = threading.Thread(target=lambda: rest.extend(stream))
    reader.start()
    child = session.last_child
    ClaudeCLI.cancel(session)
    ClaudeCLI.cancel(session)  # idempotent
    reader.join(10)
    assert not reader.is_alive()
    assert kinds(rest) == ["error"]
    assert rest[0].data["reason"].kind == "cancelled"
    assert child.wait_reaped(10)
    assert child.returncode == -signal.SIGKILL
    assert wait_until(lambda: not pid_alive(helper))
    assert wait_until(lambda: not process_group_alive(child.pid))


def test_a_turn_cancelled_before_dispatch_ends_at_once(fake_claude: FakeClaude):
    fake_claude.script("slow")
    session = ClaudeCLI.start_session(fake_claude.options())
    recorder = TurnRecorder()
    recorder.cancel_event.set()
    events, _, _ = run_turn(ClaudeCLI, session, "x", recorder)
    assert kinds(events) == ["error"]
    assert events[0].data["reason"].kind == "cancelled"


def test_closing_the_stream_early_ends_the_child(fake_claude: FakeClaude):
    fake_claude.script("slow")
    session = ClaudeCLI.start_session(fake_claude.options(exit_grace_ms=100, term_grace_ms=100))
    stream, session = ClaudeCLI.prompt(session, "x", TurnRecorder().context)
    assert next(stream).kind == "session"
    stream.close()
    child = session.last_child
    assert child.wait_reaped(10)
    assert child.returncode == -signal.SIGTERM


def test_terminate_and_reset_kill_a_running_child_and_are_idempotent(fake_claude: FakeClaude):
    fake_claude.script("slow")
    session = ClaudeCLI.start_session(fake_claude.options())
    stream, session = ClaudeCLI.prompt(session, "x", TurnRecorder().context)
    assert next(stream).kind == "session"
    session = ClaudeCLI.checkpoint_session(session, "fake-session-0001")
    reset = ClaudeCLI.reset_session(session)
    assert reset.session_id is None and reset.turns == 0
    assert [e.data["reason"].kind for e in stream] == ["cancelled"]
    ClaudeCLI.terminate_session(session)
    ClaudeCLI.terminate_session(session)
    assert session.last_child.wait_reaped(10)


def test_a_rejected_checkpoint_fails_the_turn(fake_claude: FakeClaude):
    def reject(session_id: str) -> None:
        raise CheckpointError("conflicting_session_id")

    session = ClaudeCLI.start_session(fake_claude.options())
    recorder = TurnRecorder(checkpoint=reject)
    stream, session = ClaudeCLI.prompt(session, "x", recorder.context)
    with pytest.raises(CheckpointError) as info:
        list(stream)
    assert info.value.reason == "conflicting_session_id"
    assert session.last_child.wait_reaped(10)


def test_a_cli_removed_after_start_is_a_dispatch_error(fake_claude: FakeClaude):
    session = ClaudeCLI.start_session(fake_claude.options())
    fake_claude.cli.unlink()
    with pytest.raises(DispatchError) as info:
        ClaudeCLI.prompt(session, "x", TurnRecorder().context)
    reason = info.value.reason
    assert (reason.provider, reason.kind) == ("claude", "cli_not_found")
    assert "npm install -g @anthropic-ai/claude-code" in reason.message


def test_a_working_directory_removed_after_start_is_a_dispatch_error(
    fake_claude: FakeClaude, tmp_path: Path
):
    work = tmp_path / "work"
    work.mkdir()
    session = ClaudeCLI.start_session(fake_claude.options(cwd=str(work)))
    work.rmdir()
    with pytest.raises(DispatchError) as info:
        ClaudeCLI.prompt(session, "x", TurnRecorder().context)
    assert info.value.reason.kind == "cwd_not_found"


def test_resume_session_starts_resuming_the_given_id(fake_claude: FakeClaude):
    session = ClaudeCLI.resume_session("prior-session", fake_claude.options())
    assert session.session_id == "prior-session"
    events, _, recorder = run_turn(ClaudeCLI, session, "again")
    assert "--resume" in fake_claude.calls()[0]["argv"]
    assert recorder.checkpoints == ["prior-session"]
    assert events[-1].data["session_id"] == "prior-session"
    with pytest.raises(SessionStartError):
        ClaudeCLI.resume_session("", fake_claude.options())


def test_tool_events_from_the_cli_are_deduplicated(fake_claude: FakeClaude):
    fake_claude.script("tool_turn")
    session = ClaudeCLI.start_session(fake_claude.options())
    events, _, _ = run_turn(ClaudeCLI, session, "x")
    assert kinds(events) == ["session", "tool_use", "tool_result", "text", "usage", "result"]
    assert Response.from_events(events).tool_calls == [events[1]]


def test_child_process_reports_its_exit_and_stderr(tmp_path: Path):
    script = tmp_path / "child.sh"
    script.write_text("#!/bin/sh\necho out-line\nprintf 'no-newline'\necho err >&2\nexit 4\n")
    script.chmod(0o755)
    child = ChildProcess.spawn([str(script)], provider="test")
    assert list(child.read_lines()) == [b"out-line", b"no-newline"]
    assert child.close() == 4
    assert child.stderr_tail() == b"err\n"
    assert child.wait_reaped(5)
    assert child not in _process.live_children()


def test_prompt_rejects_a_non_str_prompt(fake_claude: FakeClaude):
    session = ClaudeCLI.start_session(fake_claude.options())
    with pytest.raises(TypeError, match="prompt must be a str"):
        ClaudeCLI.prompt(session, b"bytes", TurnRecorder().context)  # type: ignore[arg-type]


@pytest.mark.parametrize("inherit", [False, True])
def test_inherit_env_decides_whether_our_environment_reaches_the_cli(
    fake_claude: FakeClaude, monkeypatch, tmp_path: Path, inherit
):
    monkeypatch.setenv("GEN_AGENT_TEST_MARKER", "x")
    session = ClaudeCLI.start_session(
        fake_claude.options(inherit_env=inherit, env={"EXTRA": "1"}, cwd=str(tmp_path))
    )
    run_turn(ClaudeCLI, session, "x")
    (call,) = fake_claude.calls()
    assert "EXTRA" in call["env_keys"] and "FAKE_CLAUDE_DIR" in call["env_keys"]
    assert ("GEN_AGENT_TEST_MARKER" in call["env_keys"]) is inherit
    assert call["cwd"] == str(tmp_path)


def test_without_pidfd_the_exit_wait_falls_back_to_polling(fake_claude: FakeClaude, monkeypatch):
    monkeypatch.setattr(_process, "_pidfd_open", lambda pid: None)
    fake_claude.script("echo", "linger_ignore_term")
    session = ClaudeCLI.start_session(fake_claude.options(exit_grace_ms=100, term_grace_ms=100))
    events, session, _ = run_turn(ClaudeCLI, session, "x")
    assert events[-1].kind == "result"
    assert session.last_child.wait_reaped(10) and session.last_child.returncode == 0
    events, session, _ = run_turn(ClaudeCLI, session, "y")
    assert events[-1].kind == "result"
    assert session.last_child.wait_reaped(15)
    assert session.last_child.returncode == -signal.SIGKILL
