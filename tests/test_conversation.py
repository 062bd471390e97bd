"""gen_agent._conversation: the neutral message form, its wire conversions, what they drop, the
stream-made delta, and how `Response.messages` carries it (JSON and pickle round trips)."""

from __future__ import annotations

import pickle

import msgspec

from gen_agent._conversation import (
    Dropped,
    Message,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    delta_from_events,
    from_anthropic,
    from_openai,
    to_anthropic,
    to_openai,
    user_message,
)
from gen_agent._event import Event
from gen_agent._response import Response


def _tool_conversation(provider: str) -> list[Message]:
    raw = {"type": "tool_use", "id": "c1", "name": "ls", "input": {"d": "."}}
    return [
        user_message("list"),
        Message(role="assistant", provider=provider, content=(
            TextPart(text="Looking."),
            ToolCallPart(id="c1", name="ls", input={"d": "."}, raw=raw),
        )),
        Message(role="user", content=(ToolResultPart(tool_call_id="c1", content="a b"),)),
        Message(role="assistant", provider=provider, content=(TextPart(text="a and b"),)),
    ]


def test_to_anthropic_carries_answered_tool_calls_and_results() -> None:
    replay = to_anthropic(_tool_conversation("openai"))

    assert replay.wire == (
        {"role": "user", "content": "list"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "c1", "name": "ls", "input": {"d": "."}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": "a b"},
        ]},
        {"role": "assistant", "content": "a and b"},
    )
    assert replay.dropped == ()


def test_to_openai_makes_function_call_items_and_outputs() -> None:
    replay = to_openai(_tool_conversation("anthropic"))

    assert replay.wire == (
        {"role": "user", "content": "list"},
        {"role": "assistant", "content": "Looking."},
        {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": '{"d":"."}'},
        {"type": "function_call_output", "call_id": "c1", "output": "a b"},
        {"role": "assistant", "content": "a and b"},
    )


def test_an_unanswered_tool_call_and_foreign_thinking_are_dropped_and_recorded() -> None:
    history = [
        user_message("q"),
        Message(role="assistant", provider="openai", content=(
            ThinkingPart(text="r", signature="enc", raw={"type": "reasoning", "id": "rs_1",
                                                         "encrypted_content": "enc"}),
            TextPart(text="answer"),
            ToolCallPart(id="c9", name="x", input={}),
        )),
    ]

    to_claude = to_anthropic(history)
    assert to_claude.wire == (
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "answer"},
    )
    assert to_claude.dropped == (
        Dropped(message_index=1, part_index=0, part_type="thinking", reason="foreign_thinking"),
        Dropped(message_index=1, part_index=2, part_type="tool_call",
                reason="unanswered_tool_call"),
    )
    # On its own provider the encrypted reasoning item goes back as it came.
    same = to_openai(history)
    assert same.wire[1] == {"type": "reasoning", "id": "rs_1", "encrypted_content": "enc"}
    assert [d.reason for d in same.dropped] == ["unanswered_tool_call"]


def test_an_empty_or_refused_reply_is_not_replayed() -> None:
    history = [
        user_message("a"), Message(role="assistant", content=(TextPart(text=""),)),
        user_message("b"), Message(role="assistant", finish_reason="refusal",
                                   content=(TextPart(text="no"),)),
        user_message("c"), Message(role="assistant", content=(TextPart(text="yes"),)),
    ]

    replay = to_anthropic(history)

    assert replay.wire == (
        {"role": "user", "content": "c"}, {"role": "assistant", "content": "yes"},
    )
    assert [(d.message_index, d.reason) for d in replay.dropped] == [
        (0, "empty_reply"), (1, "empty_reply"), (2, "refused_reply"), (3, "refused_reply"),
    ]


def test_from_anthropic_and_from_openai_keep_every_raw_block() -> None:
    blocks = [
        {"type": "thinking", "thinking": "hm", "signature": "s"},
        {"type": "redacted_thinking", "data": "xyz"},
        {"type": "text", "text": "hi", "citations": None},
        {"type": "tool_use", "id": "t1", "name": "f", "input": {}},
        {"type": "web_search_tool_result", "tool_use_id": "t1", "content": []},
    ]
    message = from_anthropic(blocks, message_id="msg_1", finish_reason="stop")
    assert [type(p) for p in message.content] == [
        ThinkingPart, ThinkingPart, TextPart, ToolCallPart, ToolResultPart,
    ]
    assert [p.raw for p in message.content] == blocks
    assert message.content[1].signature == "xyz"

    items = [
        {"type": "reasoning", "id": "rs", "summary": [{"type": "summary_text", "text": "S"}]},
        {"type": "message", "id": "m1", "content": [{"type": "output_text", "text": "T"}]},
        {"type": "function_call", "call_id": "c", "name": "g", "arguments": '{"a":1}'},
        {"type": "web_search_call", "id": "ws"},
    ]
    message = from_openai(items, response_id="resp_1")
    assert [(type(p).__name__, getattr(p, "text", None)) for p in message.content] == [
        ("ThinkingPart", "S"), ("TextPart", "T"), ("ToolCallPart", None), ("TextPart", ""),
    ]
    assert message.content[1].raw == {"type": "output_text", "text": "T", "item_id": "m1"}
    assert message.content[2].input == {"a": 1}
    assert (message.provider, message.id) == ("openai", "resp_1")


def test_a_stream_made_delta_keeps_the_order_of_text_tools_and_results() -> None:
    events = [
        ("text", {"text": "Let me "}), ("text", {"text": "look."}),
        ("claude.thinking", {"type": "thinking", "thinking": "ok", "signature": "s"}),
        ("tool_use", {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"c": "ls"}}),
        ("tool_result", {"type": "tool_result", "tool_use_id": "t1", "content": "x"}),
        ("text", {"text": "Found x.", "message_boundary": True}),
    ]

    user, first, results, last = delta_from_events("go", events, "claude")

    assert user == user_message("go")
    assert [type(p).__name__ for p in first.content] == ["TextPart", "ThinkingPart",
                                                         "ToolCallPart"]
    assert first.content[0].text == "Let me look."
    assert (first.content[2].id, first.content[2].input) == ("t1", {"c": "ls"})
    assert results.role == "user" and results.content[0].tool_call_id == "t1"
    assert results.content[0].content == "x"
    assert (last.text, last.provider) == ("Found x.", "claude")


def test_a_response_without_backend_messages_gets_the_stream_delta() -> None:
    response = Response.from_events([
        Event.new("text", {"text": "hi"}),
        Event.new("result", {"text": "hi", "provider": "mock"}),
    ])
    assert response.messages == (Message(role="assistant", content=(TextPart(text="hi"),),
                                         provider="mock"),)
    assert response.finish_reason == "stop"


def test_a_response_with_messages_round_trips_through_json_and_pickle() -> None:
    messages = tuple(_tool_conversation("anthropic"))
    response = Response.from_events([Event.new("result", {"text": "x", "messages": messages,
                                                          "stop_reason": "max_tokens"})])
    assert response.messages == messages
    assert response.finish_reason == "length"
    decoded = msgspec.json.decode(msgspec.json.encode(response), type=Response)
    # The modeled field decodes to Messages (the terminal's free-form data to plain JSON).
    assert decoded.messages == messages
    assert (decoded.finish_reason, decoded.text) == ("length", "x")
    assert pickle.loads(pickle.dumps(response)) == response
