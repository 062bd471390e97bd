"""The provider-neutral conversation: `Message`s made of content parts, and their wire forms.

A turn's `Response.messages` is the list of messages the turn appended to the conversation
(its *delta*): the user message it sent and the assistant message it received. Store the
deltas and pass their concatenation as the `history` backend option to continue the
conversation later, on the same provider or on another one (`AnthropicAPI`,
`OpenAIResponses`).

Every part keeps the provider's own form in `raw` (a JSON-like value, the block or item as
the provider sent it), and the message says which provider it came from (`provider`). A
backend converts messages to its wire shape with `to_anthropic` / `to_openai`: the same
provider gets its raw blocks back where they carry more than the neutral fields (signed
thinking); another provider gets the neutral fields. What cannot cross is left out and
reported in the returned `Replay.dropped`:

- thinking from another provider (a signature is valid only where it was made, and reasoning
  items are the provider's own): `"foreign_thinking"`;
- a tool call that no later message answers (both APIs reject an unanswered call):
  `"unanswered_tool_call"`;
- a user message whose reply had no content left (an empty reply, `"empty_reply"`) or was
  a refusal (`finish_reason` `"refusal"`, `"refused_reply"`): the pair is not replayed,
  as the live session does not resend it.

All records are frozen msgspec Structs; they round-trip through `msgspec.json` (parts are a
tagged union on `type`) and pickle.

Mirrors: nothing in the Elixir original (its conversation lives in the CLI); the design
follows the `messages` delta of AgentOS's `GenerateTextResult`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal

import msgspec

__all__ = [
    "Dropped",
    "Message",
    "Part",
    "Replay",
    "TextPart",
    "ThinkingPart",
    "ToolCallPart",
    "ToolResultPart",
    "delta_from_events",
    "from_anthropic",
    "from_openai",
    "omitted_data",
    "to_anthropic",
    "to_openai",
    "user_message",
]


class TextPart(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="text"):
    """Text said by the user or the assistant.

    Fields:
        text: the text (`str`).
        raw: the provider's form (an Anthropic `text` block, an OpenAI `output_text` part),
            or None for text gen_agent made (the user's prompt).
    """

    text: str
    raw: Any = None


class ToolCallPart(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="tool_call"):
    """A tool call the assistant made.

    Fields:
        id: the call id the result must name (Anthropic `toolu_...`, OpenAI `call_...`).
        name: the tool name.
        input: the call's arguments (decoded JSON, usually a dict).
        raw: the provider's form (a `tool_use` block, a `function_call` item), or None.
    """

    id: str
    name: str
    input: Any = None
    raw: Any = None


class ToolResultPart(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="tool_result"
):
    """The result of a tool call, sent back to the model.

    Fields:
        tool_call_id: the `ToolCallPart.id` it answers.
        content: the result (a `str`, or a provider's list of content blocks).
        is_error: whether the tool failed.
        raw: the provider's form, or None.
    """

    tool_call_id: str
    content: Any = ""
    is_error: bool = False
    raw: Any = None


class ThinkingPart(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="thinking"):
    """The model's reasoning, as far as the provider shows it.

    Fields:
        text: the visible reasoning text (`""` when redacted or only summarized elsewhere).
        signature: the provider's signature or encrypted form (Anthropic `signature`,
            OpenAI `encrypted_content`), or None. Valid only on the provider that made it.
        raw: the provider's form (a `thinking`/`redacted_thinking` block, a `reasoning`
            item), or None.
    """

    text: str = ""
    signature: str | None = None
    raw: Any = None


Part = TextPart | ToolCallPart | ToolResultPart | ThinkingPart
"""One content part of a `Message` (a tagged union on `type`)."""


class Message(msgspec.Struct, frozen=True, kw_only=True):
    """One message of a conversation, in provider-neutral form.

    Fields:
        role: `"user"` or `"assistant"`.
        content: the parts, in order (tuple of `Part`).
        provider: the provider that produced it (`"anthropic"`, `"openai"`, `"claude"`,
            `"codex"`, `"mock"`), or None for messages gen_agent made (the user's prompt).
        id: the provider's id of the message or response (`msg_...`, `resp_...`), or None.
        finish_reason: an assistant message's normalized finish reason
            (`gen_agent.backend.FINISH_REASONS`), or None.
    """

    role: Literal["user", "assistant"]
    content: tuple[Part, ...] = ()
    provider: str | None = None
    id: str | None = None
    finish_reason: str | None = None

    @property
    def text(self) -> str:
        """The message's text parts joined with a blank line (`""` when it has none)."""
        return "\n\n".join(part.text for part in self.content if type(part) is TextPart)


class Dropped(msgspec.Struct, frozen=True, kw_only=True):
    """A part (or a message) left out when a history was converted to a wire form.

    Fields:
        message_index: the index of its message in the converted history.
        part_index: the index of the part in that message, or None for a whole message.
        part_type: the part's `type` (`"thinking"`, `"tool_call"`, ...) or `"message"`.
        reason: `"foreign_thinking"`, `"unanswered_tool_call"`, `"empty_reply"` or
            `"refused_reply"`.
    """

    message_index: int
    part_index: int | None
    part_type: str
    reason: str


class Replay(msgspec.Struct, frozen=True, kw_only=True):
    """A history converted to one provider's wire form.

    Fields:
        wire: the provider's messages (Anthropic `messages`, OpenAI `input` items), dicts.
        dropped: what could not be carried (tuple of `Dropped`), in order.
    """

    wire: tuple[dict[str, Any], ...]
    dropped: tuple[Dropped, ...] = ()


def user_message(text: str) -> Message:
    """The user message of a prompt: one `TextPart`, no provider."""
    return Message(role="user", content=(TextPart(text=text),))


# -- from the providers ---------------------------------------------------------------------


def from_anthropic(
    blocks: Iterable[Mapping[str, Any]],
    *,
    message_id: str | None = None,
    finish_reason: str | None = None,
) -> Message:
    """The assistant `Message` of an Anthropic reply's content blocks (in order).

    Args:
        blocks: the content blocks as the API returned them (`text`, `tool_use`, `thinking`,
            `redacted_thinking`, others); each is kept as its part's `raw`.
        message_id: the reply's `msg_...` id.
        finish_reason: the reply's normalized finish reason.

    Returns:
        A `Message` with provider `"anthropic"`: `text` → `TextPart`, `tool_use` (and
        `server_tool_use`) → `ToolCallPart`, `thinking` / `redacted_thinking` →
        `ThinkingPart` (signature: `signature` or the redacted `data`); any other block
        (e.g. a server tool's result) → a `ToolResultPart` when it names a `tool_use_id`,
        else a `TextPart` of its `text` (`""` without one), raw kept.
    """
    parts: list[Part] = []
    for block in blocks:
        raw = dict(block)
        kind = raw.get("type")
        if kind == "text":
            parts.append(TextPart(text=_str(raw.get("text")), raw=raw))
        elif kind in ("tool_use", "server_tool_use"):
            parts.append(ToolCallPart(id=_str(raw.get("id")), name=_str(raw.get("name")),
                                      input=raw.get("input"), raw=raw))
        elif kind == "thinking":
            parts.append(ThinkingPart(text=_str(raw.get("thinking")),
                                      signature=raw.get("signature"), raw=raw))
        elif kind == "redacted_thinking":
            parts.append(ThinkingPart(signature=raw.get("data"), raw=raw))
        elif isinstance(raw.get("tool_use_id"), str):
            parts.append(ToolResultPart(tool_call_id=raw["tool_use_id"],
                                        content=raw.get("content"), raw=raw))
        else:
            parts.append(TextPart(text=_str(raw.get("text")), raw=raw))
    return Message(role="assistant", content=tuple(parts), provider=_ANTHROPIC, id=message_id,
                   finish_reason=finish_reason)


def from_openai(
    items: Iterable[Mapping[str, Any]],
    *,
    response_id: str | None = None,
    finish_reason: str | None = None,
) -> Message:
    """The assistant `Message` of an OpenAI Responses reply's output items (in order).

    Args:
        items: the output items as the API returned them (`message`, `function_call`,
            `reasoning`, others); each part keeps its item (a message's text part: the
            `output_text` part plus the item's `id`) as `raw`.
        response_id: the `resp_...` id.
        finish_reason: the reply's normalized finish reason.

    Returns:
        A `Message` with provider `"openai"`: each `output_text` part of a `message` item →
        `TextPart`; `function_call` → `ToolCallPart` (id: the `call_id`; input: the decoded
        `arguments`); `reasoning` → `ThinkingPart` (text: the summary texts joined;
        signature: `encrypted_content`); any other item → `TextPart` of `""`, raw kept.
    """
    parts: list[Part] = []
    for item in items:
        raw = dict(item)
        kind = raw.get("type")
        if kind == "message":
            content = raw.get("content")
            for piece in content if isinstance(content, list) else []:
                if isinstance(piece, Mapping) and piece.get("type") == "output_text":
                    parts.append(TextPart(text=_str(piece.get("text")),
                                          raw={**piece, "item_id": raw.get("id")}))
        elif kind == "function_call":
            parts.append(ToolCallPart(id=_str(raw.get("call_id")), name=_str(raw.get("name")),
                                      input=arguments_input(raw.get("arguments")), raw=raw))
        elif kind == "reasoning":
            summary = raw.get("summary")
            texts = [_str(s.get("text")) for s in summary if isinstance(s, Mapping)] if (
                isinstance(summary, list)) else []
            parts.append(ThinkingPart(text="\n\n".join(texts),
                                      signature=raw.get("encrypted_content"), raw=raw))
        else:
            parts.append(TextPart(text="", raw=raw))
    return Message(role="assistant", content=tuple(parts), provider=_OPENAI, id=response_id,
                   finish_reason=finish_reason)


_IDENTITY_KEYS = ("type", "id", "tool_use_id", "call_id", "name", "is_error", "signature")


def omitted_data(data: dict[str, Any], size: int) -> dict[str, Any]:
    """What a stream-made delta keeps of an event past its byte budget: the keys that name
    the part (`id`, `tool_use_id`, `name`, `is_error`, ...) and `omitted_bytes` (the event's
    `term_size` in bytes); its content is left out.

    Args:
        data: the event's data.
        size: the event's `term_size` in bytes.

    Returns:
        A new dict, e.g. `{"tool_use_id": "toolu_1", "omitted_bytes": 1000077}`.
    """
    kept = {key: data[key] for key in _IDENTITY_KEYS if key in data}
    kept["omitted_bytes"] = size
    return kept


def delta_from_events(
    prompt: str | None, events: Iterable[tuple[str, dict[str, Any]]], provider: str | None
) -> tuple[Message, ...]:
    """A turn's delta as its stream showed it (for backends whose result names no messages:
    the CLIs, the mock, third-party backends).

    Args:
        prompt: the prompt sent (the user message), or None to leave it out.
        events: `(kind, data)` of the turn's `text`, `tool_use`, `tool_result` and
            `<provider>.thinking` events, in order.
        provider: the provider named on the assistant messages.

    Returns:
        The user message, then assistant messages: text deltas joined into text parts (a
        `message_boundary` starts a new part), each `tool_use` a `ToolCallPart` (id, name and input
        from the event, `raw` its data), each `<provider>.thinking` a `ThinkingPart`; each run of
        `tool_result` events a user message of `ToolResultPart`s (the tool's output: `content`,
        `aggregated_output` or `output`; an empty text between results does not end the run). An
        assistant message with no parts is left out. The runtime keeps tool calls, results and
        thinking whole while their sizes fit `max_event_bytes_per_turn`; a part past that budget has
        no content (None) and `raw` from `omitted_data` (its ids and `omitted_bytes`), so a turn of
        huge tool results stays bounded in memory.
    """
    # One pass, no closures made per call (it runs once per turn).
    messages: list[Message] = [] if prompt is None else [user_message(prompt)]
    parts: list[Part] = []
    results: list[Part] = []
    text: list[str] | None = None  # the text run being joined
    for kind, data in events:
        if kind == "tool_result":
            _close_text(text, parts)
            text = None
            _flush(messages, "assistant", parts, provider)
            call_id = data.get("tool_use_id", data.get("id"))
            output = data.get("content", data.get("aggregated_output", data.get("output")))
            results.append(ToolResultPart(tool_call_id=_str(call_id), content=output,
                                          is_error=data.get("is_error") is True, raw=data))
            continue
        if kind == "text":
            piece = data.get("text")
            boundary = data.get("message_boundary")
            if boundary is not None and boundary is not False:
                _close_text(text, parts)
                text = None
            if isinstance(piece, str) and piece:  # an empty text does not end a result run
                if results:
                    _flush(messages, "user", results, None)
                if text is None:
                    text = [piece]
                else:
                    text.append(piece)
            continue
        if results:
            _flush(messages, "user", results, None)
        _close_text(text, parts)
        text = None
        if kind == "tool_use":
            name = data.get("name", data.get("type"))
            args = data.get("input", data.get("arguments", data.get("command")))
            parts.append(ToolCallPart(id=_str(data.get("id")), name=_str(name), input=args,
                                      raw=data))
        else:  # <provider>.thinking
            parts.append(ThinkingPart(text=_str(data.get("thinking", data.get("text"))),
                                      signature=data.get("signature"), raw=data))
    _close_text(text, parts)
    _flush(messages, "assistant", parts, provider)
    _flush(messages, "user", results, None)
    return tuple(messages)


# -- to the providers -----------------------------------------------------------------------


def to_anthropic(messages: Sequence[Message]) -> Replay:
    """The Messages API `messages` for a history (see the module doc for what is dropped).

    A message made of one text part is sent as a plain string (`{"role", "content": str}`);
    otherwise `content` is a list of blocks: text → `text`; thinking made by Anthropic → its
    raw block (signature kept); a tool call → `tool_use` (an Anthropic call: its raw block);
    a tool result → `tool_result`.

    Args:
        messages: the history, oldest first.

    Returns:
        A `Replay` (wire messages and what was dropped).
    """
    return _convert(messages, _ANTHROPIC, _anthropic_part, _anthropic_message)


def to_openai(messages: Sequence[Message]) -> Replay:
    """The Responses API `input` items for a history (see the module doc for what is dropped).

    A message's text parts become one easy input message (`{"role", "content": str}`, texts
    joined with a blank line); a tool call → a `function_call` item; a tool result → a
    `function_call_output` item; thinking made by OpenAI with `encrypted_content` → its raw
    `reasoning` item (other reasoning: dropped, `"foreign_thinking"`).

    Args:
        messages: the history, oldest first.

    Returns:
        A `Replay` (wire items and what was dropped).
    """
    return _convert(messages, _OPENAI, _openai_part, _openai_message)


# -- internals ------------------------------------------------------------------------------

_ANTHROPIC: Final = "anthropic"
_OPENAI: Final = "openai"


def _close_text(text: list[str] | None, parts: list[Part]) -> None:
    """End a text run of `delta_from_events`: its joined text becomes a `TextPart` (none when
    empty)."""
    if text is not None:
        joined = "".join(text)
        if joined:
            parts.append(TextPart(text=joined))


def _flush(messages: list[Message], role: Literal["user", "assistant"], pending: list[Part],
           provider: str | None) -> None:
    """Append the parts in `pending` (if any) to `messages` as one message, then clear it."""
    if pending:
        messages.append(Message(role=role, content=tuple(pending), provider=provider))
        pending.clear()


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def arguments_input(arguments: Any) -> Any:
    """A function call's input from its `arguments` JSON text (OpenAI): `{}` for none (a
    call without arguments), else the decoded JSON, or None when it is not JSON. Shared with
    the `OpenAIResponses` stream translation."""
    if not isinstance(arguments, str) or not arguments.strip():
        return {}
    try:
        return msgspec.json.decode(arguments)
    except msgspec.DecodeError:
        return None


def _answered(messages: Sequence[Message]) -> set[str]:
    return {part.tool_call_id for message in messages for part in message.content
            if type(part) is ToolResultPart}


def _convert(messages: Sequence[Message], provider: str, part_fn: Any, message_fn: Any) -> Replay:
    answered = _answered(messages)
    dropped: list[Dropped] = []
    kept: list[tuple[int, Message, list[Any]]] = []
    for index, message in enumerate(messages):
        blocks: list[Any] = []
        for part_index, part in enumerate(message.content):
            why = _why_dropped(part, message, provider, answered)
            if why is not None:
                dropped.append(Dropped(message_index=index, part_index=part_index,
                                       part_type=str(type(part).__struct_config__.tag), reason=why))
                continue
            blocks.append(part_fn(part, message))
        kept.append((index, message, blocks))
    wire: list[dict[str, Any]] = []
    position = 0
    while position < len(kept):
        index, message, blocks = kept[position]
        reply = kept[position + 1] if position + 1 < len(kept) else None
        why = _unreplayed(reply)
        if message.role == "user" and reply is not None and why is not None:
            # A turn whose reply kept nothing (or refused): its pair is not resent.
            for skipped in (index, reply[0]):
                dropped.append(Dropped(message_index=skipped, part_index=None,
                                       part_type="message", reason=why))
            position += 2
            continue
        if message.role == "assistant" and not _has_content(blocks):
            dropped.append(Dropped(message_index=index, part_index=None, part_type="message",
                                   reason="empty_reply"))
            position += 1
            continue
        wire.extend(message_fn(message, blocks))
        position += 1
    return Replay(wire=tuple(wire), dropped=tuple(dropped))


def _unreplayed(entry: tuple[int, Message, list[Any]] | None) -> str | None:
    if entry is None or entry[1].role != "assistant":
        return None
    if entry[1].finish_reason == "refusal":
        return "refused_reply"
    return None if _has_content(entry[2]) else "empty_reply"


def _has_content(blocks: list[Any]) -> bool:
    # Anything but empty text counts.
    return any(block[0] != "text" or block[1] for block in blocks)


def _why_dropped(part: Any, message: Message, provider: str, answered: set[str]) -> str | None:
    kind = type(part)
    if kind is ThinkingPart:
        if message.provider != provider:
            return "foreign_thinking"
        if provider == _OPENAI and not part.signature:
            return "foreign_thinking"  # a reasoning item without its encrypted form cannot
        return None
    if kind is ToolCallPart and part.id not in answered:
        return "unanswered_tool_call"
    return None


# Each part becomes ("text", str) or ("block", dict) or ("item", dict).


def _anthropic_part(part: Any, message: Message) -> tuple[str, Any]:
    kind = type(part)
    same = message.provider == _ANTHROPIC and isinstance(part.raw, Mapping)
    if kind is TextPart:
        return ("text", part.text)
    if kind is ThinkingPart:
        return ("block", dict(part.raw))
    if kind is ToolCallPart:
        if same and part.raw.get("type") == "tool_use":
            return ("block", dict(part.raw))
        return ("block", {"type": "tool_use", "id": part.id, "name": part.name,
                          "input": part.input if isinstance(part.input, Mapping) else {}})
    block = {"type": "tool_result", "tool_use_id": part.tool_call_id, "content": part.content}
    if part.is_error:
        block["is_error"] = True
    return ("block", block)


def _anthropic_message(message: Message, blocks: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    if len(blocks) == 1 and blocks[0][0] == "text":
        return [{"role": message.role, "content": blocks[0][1]}]
    content = [{"type": "text", "text": value} if kind == "text" else value
               for kind, value in blocks if not (kind == "text" and not value)]
    return [{"role": message.role, "content": content}]


def _openai_part(part: Any, message: Message) -> tuple[str, Any]:
    kind = type(part)
    if kind is TextPart:
        return ("text", part.text)
    if kind is ThinkingPart:
        return ("item", dict(part.raw) if isinstance(part.raw, Mapping) else
                {"type": "reasoning", "encrypted_content": part.signature, "summary": []})
    if kind is ToolCallPart:
        return ("item", {"type": "function_call", "call_id": part.id, "name": part.name,
                         "arguments": msgspec.json.encode(part.input).decode()})
    content = part.content if isinstance(part.content, str) else (
        msgspec.json.encode(part.content).decode())
    return ("item", {"type": "function_call_output", "call_id": part.tool_call_id,
                     "output": content})


def _openai_message(message: Message, blocks: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    texts = [value for kind, value in blocks if kind == "text" and value]
    items = [value for kind, value in blocks if kind != "text"]
    # Reasoning precedes the message it led to; calls and results follow it.
    out.extend(item for item in items if item.get("type") == "reasoning")
    if texts:
        out.append({"role": message.role, "content": "\n\n".join(texts)})
    out.extend(item for item in items if item.get("type") != "reasoning")
    return out
