"""Structured output (gen_agent._output) through the runtime on the mock: `ask(output=T)`,
`tell_with_completion(output=T)`, `Pool.map(output=T)`, the agent-wide `output` start option,
the backend seeing the type in `context.options`, `("invalid_output", InvalidOutput)` with the
validation message and the raw text, and `Response[T]` decoding."""

from __future__ import annotations

import dataclasses
import enum
import pickle
import queue
from typing import Any, TypedDict

import _agents as agents
import msgspec
import pytest

import gen_agent
from gen_agent import RequestOptions
from gen_agent._errors import TurnError
from gen_agent._output import InvalidOutput, parse_output, schema_name, schema_of
from gen_agent._pool import Pool
from gen_agent._response import Response
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend

T = 5.0  # seconds: the bound of every wait in this file


class Verdict(msgspec.Struct, frozen=True):
    answer: str
    confidence: float


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Counts(TypedDict):
    n: int


class Seeing(MockBackend):
    """The mock, recording the output type each dispatch saw in its context."""

    seen: list[Any] = []

    @classmethod
    def prompt(cls, session: Any, prompt: str, context: Any = None) -> Any:
        cls.seen.append(context.options.output)
        return super().prompt(session, prompt, context)


def start(scripts: list[Any], name: str = "typed", **opts: Any) -> Any:
    Seeing.seen = []
    return agents.start(agents.Scripted, name, scripts, backend=Seeing, **opts)


def test_ask_with_output_gives_a_validated_value_and_the_raw_text() -> None:
    start([mock.text_turn('{"answer": "yes", "confidence": 0.9}'), mock.text_turn("plain")])

    response = gen_agent.ask("typed", "judge", timeout=T, output=Verdict)
    plain = gen_agent.ask("typed", "chat", timeout=T)

    assert response.parsed == Verdict(answer="yes", confidence=0.9)
    assert response.text == '{"answer": "yes", "confidence": 0.9}'
    assert (plain.parsed, plain.text) == (None, "plain")
    assert Seeing.seen == [Verdict, None]


def test_a_reply_that_does_not_validate_fails_the_turn_with_the_message_and_the_text() -> None:
    start([mock.text_turn('{"answer": "yes", "confidence": "high"}', usage={
        "input_tokens": 3, "output_tokens": 4}), mock.text_turn("not json")])

    with pytest.raises(TurnError) as wrong_type:
        gen_agent.ask("typed", "judge", timeout=T, output=Verdict)
    with pytest.raises(TurnError) as not_json:
        gen_agent.ask("typed", "judge", timeout=T, options=RequestOptions(output=Verdict))

    kind, invalid = wrong_type.value.reason
    assert kind == "invalid_output" and type(invalid) is InvalidOutput
    assert invalid.message == "Expected `float`, got `str` - at `$.confidence`"
    assert invalid.response.text == '{"answer": "yes", "confidence": "high"}'
    assert invalid.response.parsed is None
    assert invalid.response.usage is not None and invalid.response.usage["output_tokens"] == 4
    # The spent tokens count even though the reply was refused.
    assert invalid.response.session_usage == {"input_tokens": 3, "output_tokens": 4}
    kind, invalid = not_json.value.reason
    assert kind == "invalid_output" and invalid.message.startswith("JSON is malformed")
    assert invalid.response.text == "not json"
    # str() says what was wrong (the validation message), never the reply's text.
    assert str(wrong_type.value) == (
        "invalid_output: InvalidOutput(Expected `float`, got `str` - at `$.confidence`)")
    assert "not json" not in str(not_json.value)


class _Mood(enum.Enum):
    CALM = "calm"


class _Feeling(msgspec.Struct, frozen=True):
    mood: _Mood


def test_an_invalid_output_message_elides_the_values_it_quotes() -> None:
    with pytest.raises(msgspec.ValidationError) as caught:
        msgspec.json.decode(b'{"mood": "a private word"}', type=_Feeling)
    invalid = InvalidOutput(message=str(caught.value), response=Response())
    assert invalid.message == "Invalid enum value 'a private word' - at `$.mood`"
    assert str(TurnError(("invalid_output", invalid))) == (
        "invalid_output: InvalidOutput(Invalid enum value '…' - at `$.mood`)")


def test_the_agent_wide_default_applies_unless_the_request_names_a_type() -> None:
    start([mock.text_turn('{"x": 1, "y": 2}'), mock.text_turn("[1, 2]"),
           mock.text_turn("```json\n{\"n\": 3}\n```")], output=Point)

    default = gen_agent.ask("typed", "where", timeout=T)
    listed = gen_agent.ask("typed", "list", timeout=T, output=list[int])
    fenced = gen_agent.ask("typed", "count", timeout=T, output=Counts)

    assert default.parsed == Point(1, 2)
    assert listed.parsed == [1, 2]
    assert fenced.parsed == {"n": 3}  # one surrounding code fence is tolerated
    assert Seeing.seen == [Point, list[int], Counts]


def test_tell_with_completion_and_pool_map_carry_the_type() -> None:
    start([mock.text_turn('{"answer": "a", "confidence": 1}')])
    inbox: queue.Queue[Any] = queue.Queue()

    gen_agent.tell_with_completion("typed", "judge", inbox, output=Verdict)
    completion = inbox.get(timeout=T)

    assert completion[4][1].parsed == Verdict(answer="a", confidence=1.0)
    with Pool(agents.Scripted, size=2, name_prefix="pw", backend=MockBackend, scripts=[
            mock.text_turn('{"x": 0, "y": 0}')] * 3) as pool:
        responses = pool.map(["a", "b", "c"], timeout=T, output=Point)
    assert [r.parsed for r in responses] == [Point(0, 0)] * 3


def test_a_result_s_structured_output_value_wins_over_the_text() -> None:
    events = [mock.text_turn("I made it.", result={"structured_output": {"x": 5, "y": 6}})]
    start(events)

    response = gen_agent.ask("typed", "make", timeout=T, output=Point)

    assert (response.parsed, response.text) == (Point(5, 6), "I made it.")


def test_response_is_generic_so_decoding_gives_the_type_back() -> None:
    start([mock.text_turn('{"answer": "no", "confidence": 0.25}')])
    response = gen_agent.ask("typed", "judge", timeout=T, output=Verdict)

    blob = msgspec.json.encode(response)
    decoded = msgspec.json.decode(blob, type=Response[Verdict])

    assert decoded.parsed == Verdict(answer="no", confidence=0.25)
    assert msgspec.json.decode(blob, type=Response).parsed == {"answer": "no",
                                                                "confidence": 0.25}
    assert pickle.loads(pickle.dumps(response)) == response


def test_bad_output_types_are_refused_at_the_client_boundary() -> None:
    start([])
    with pytest.raises(TypeError, match="ask: output must be a type msgspec can validate"):
        gen_agent.ask("typed", "x", timeout=T, output=object())
    with pytest.raises(TypeError, match="RequestOptions: output"):
        RequestOptions(output=threading_lock_type())
    with pytest.raises(gen_agent.AgentStartError):
        gen_agent.start_agent(agents.Scripted, name="bad", backend=MockBackend, scripts=[],
                              output=complex)


def threading_lock_type() -> Any:
    import threading

    return type(threading.Lock())


def test_schema_of_puts_the_struct_at_the_root_and_parse_output_validates() -> None:
    schema = schema_of(Verdict)

    assert schema["type"] == "object"
    assert schema["required"] == ["answer", "confidence"]
    assert "$ref" not in schema and "$defs" not in schema
    assert schema_of(list[int]) == {"type": "array", "items": {"type": "integer"}}
    assert (schema_name(Verdict), schema_name(list[int])) == ("Verdict", "list")
    response = Response.from_events([gen_agent.Event.new("result", {"text": '{"n": 1}'})])
    assert parse_output(Counts, response) == {"n": 1}


class Leaf(msgspec.Struct):
    n: int


class Tree(msgspec.Struct):
    name: str
    leaf: Leaf | None = None
    leaves: list[Leaf] = []
    size: int = 3


def test_strict_schema_of_pins_every_object_for_openai_strict_mode() -> None:
    from gen_agent._output import schema_of, strict_schema_of

    plain = schema_of(Tree)
    strict = strict_schema_of(Tree)
    assert plain["required"] == ["name"] and "additionalProperties" not in plain  # unchanged
    assert strict["required"] == ["name", "leaf", "leaves", "size"]
    assert strict["additionalProperties"] is False
    assert strict["properties"] == {
        "name": {"type": "string"},
        "leaf": {"anyOf": [{"$ref": "#/$defs/Leaf"}, {"type": "null"}]},  # default dropped
        "leaves": {"type": "array", "items": {"$ref": "#/$defs/Leaf"}},
        "size": {"type": "integer"},
    }
    assert strict["$defs"]["Leaf"] == {"title": "Leaf", "type": "object",
                                       "properties": {"n": {"type": "integer"}},
                                       "required": ["n"], "additionalProperties": False}
    # What strict mode refuses is left for the provider to say: a mapping's value schema.
    assert strict_schema_of(dict[str, int]) == {"type": "object",
                                                "additionalProperties": {"type": "integer"}}
    # A value msgspec produced for the strict schema still validates as the type.
    assert msgspec.json.decode(b'{"name": "t", "leaf": null, "leaves": [], "size": 1}',
                               type=Tree) == Tree(name="t", size=1)
