"""`OpenAIResponses`: the OpenAI Responses API backend, on the official `openai` SDK, streaming.

Install with `pip install 'gen-agent[openai]'`; importing this module does not import the SDK
(`start_session` does, and refuses the session with a clear error when it is missing).

Continuity between turns, two modes:

- `store=True` (default): the provider keeps the conversation; each turn sends only the new
  user message with `previous_response_id` = the last successful response's id.
- `store=False` (stateless): nothing is kept by the provider; the session keeps the
  conversation (bounded by `max_history_messages` / `max_history_bytes`) and resends it.

`instructions` are sent with every turn (the API does not carry them over). `reset_session`
starts a new conversation.

Normalization (stream events, as dicts, to `Event`s; `OpenAIStreamTranslator`):

- `response.created` → nothing (its id and model are remembered);
- `response.output_text.delta` → `text` {text}, the first delta of each further message item
  with `message_boundary: True`; `response.output_text.done` adds only text that no delta
  carried (so a done event repeating the deltas never duplicates text);
- a completed `function_call` item → `tool_use` {id (the call id), name, arguments, input
  (`{}` for empty arguments), item_id}; other completed items (reasoning, web search...) →
  `openai.<item type>`;
- refusal deltas are collected, never shown as text;
- `response.completed` → `usage` {input_tokens, output_tokens, total_tokens,
  reasoning_tokens, cached_tokens} then the terminal `result` {text, session_id,
  response_id, model, provider_model, stop_reason, finish_reason, service_tier, served_by
  (a router's top-level `provider` field of the response, e.g. OpenRouter's upstream host;
  None without one), provider, messages}; or, when the reply was a refusal, the terminal
  `error` with a `BackendError` of kind `"refusal"`;
- `response.failed` → `usage` then terminal `error`, kind `"response_failed"`;
  `response.incomplete` → `usage` then kind `"response_incomplete"` (docs/pages/contract.md#s7-6;
  docs: the backend guide), whose
  `diagnostics` keep the partial text, the incomplete reason (`stop_reason`) and the usage;
  an `error` event → kind `"stream_error"`;
  a final response in another status → `"unexpected_response_status"`;
- an HTTP error or a lost connection → terminal `error` (`_error_from_sdk` is the one place
  SDK exceptions are translated); a `previous_response_id` the API no longer has (400
  `previous_response_not_found`) → kind `"session_not_found"`: the agent then resets the
  session, so the next turn starts a new conversation; a stream that ends without an outcome →
  `"stream_truncated"`.

SDK retries are off by default (`max_retries=0`): the agent's retry policy owns retries.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Final

import msgspec

from gen_agent._conversation import (
    Dropped,
    Message,
    ToolResultPart,
    arguments_input,
    from_openai,
    to_openai,
)
from gen_agent._event import Event
from gen_agent._output import schema_name, schema_of
from gen_agent.backend import Backend, BackendError, TurnContext
from gen_agent.backends._http.sdk import (
    SDK,
    SDK_CHECKS,
    SDKOptions,
    SDKSession,
    StreamTranslator,
    after_loop,
    connection_error,
    export_history,
    restored,
    seed_history,
    split_tools,
    status_error,
    stream_turn,
    with_prompt,
)
from gen_agent.backends._http.tool_loop import run_loop
from gen_agent.backends._option_checks import (
    int_at_least,
    is_bool,
    is_str,
    is_text,
    keys_other_than,
    validate_options,
)

__all__ = [
    "DEFAULT_MODEL",
    "OPTIONS",
    "PROVIDER",
    "OpenAIOptions",
    "OpenAIResponses",
    "OpenAISession",
    "OpenAIStreamTranslator",
]

PROVIDER: Final = "openai"
_SDK: Final = SDK(
    provider=PROVIDER, module="openai", client="OpenAI", key_env="OPENAI_API_KEY", label="OpenAI"
)

DEFAULT_MODEL: Final = "gpt-5"
"""The model used when the `model` option is not given."""

# Failure codes that say "try again": the same request may succeed later.
_RETRYABLE_CODES: Final = frozenset(
    {"server_error", "server_is_overloaded", "rate_limit_exceeded", "slow_down"}
)


# -- options -------------------------------------------------------------------------------


class OpenAIOptions(SDKOptions, frozen=True, kw_only=True):
    """The validated options of an `OpenAIResponses` session (see `OPTIONS` for the keys).

    Fields:
        api_key: the API key; None reads `OPENAI_API_KEY` (missing → start error).
        base_url: the API root including `/v1` (e.g. `"http://127.0.0.1:PORT/v1"`); None:
            the SDK's default (or `OPENAI_BASE_URL`).
        model: the model (default `DEFAULT_MODEL`).
        instructions: the system/developer instructions, resent every turn, or None.
        store: True keeps the conversation at the provider (`previous_response_id`); False
            is stateless (the session resends the kept conversation).
        max_output_tokens: the reply's token budget (tokens, >= 1), or None.
        reasoning: the `reasoning` request field (e.g. `{"effort": "low"}`), or None.
        tools: tool definitions sent with every request (dicts, as the API takes them).
        params: further `responses.create` arguments, as given.
        timeout: the SDK timeout (seconds; also the longest wait between two stream events).
        max_retries: the SDK's own retries (count; default 0: the agent owns retries).
        default_headers: extra HTTP headers on every request.
        max_history_messages: stateless mode: the most messages kept (count).
        max_history_bytes: stateless mode: the most `term_size` bytes kept (bytes).
        session_id: the session id reported in results; None mints `"openai-<hex>"`.
        previous_response_id: a stored response to continue from on the first turn, or None.
    """

    model: str = DEFAULT_MODEL
    instructions: str | None = None
    store: bool = True
    max_output_tokens: int | None = None
    reasoning: dict[str, Any] | None = None
    previous_response_id: str | None = None


OPTIONS: Final = frozenset(OpenAIOptions.__struct_fields__)
"""The option keys `OpenAIResponses.start_session` accepts."""


_CHECKS: Final = {
    **SDK_CHECKS,
    "instructions": (is_str, "a str"),
    "store": (is_bool, "a bool"),
    "max_output_tokens": (int_at_least(1), "an int >= 1 (tokens)"),
    "reasoning": (lambda v: isinstance(v, Mapping), "a dict"),
    "params": (
        keys_other_than(
            {"input", "stream", "model", "previous_response_id", "store", "instructions"}
        ),
        "a dict of str keys other than the ones this backend sets",
    ),
    "previous_response_id": (is_text, "a non-empty str"),
}


# -- the pure translator ----------------------------------------------------------------


class OpenAIStreamTranslator(StreamTranslator):
    """Turns the stream events of one Responses API reply (as dicts) into `Event`s. Pure.

    Feed every event, in order, to `translate(event)`; after the terminal event further
    events produce nothing. `truncated()` gives the terminal error for a stream that ended
    without an outcome.

    Args:
        session_id: the session id put in the result.
        model: the requested model (reported unless the reply names one).

    Not thread-safe: one turn, one owner.
    """

    _PROVIDER = PROVIDER
    _TRUNCATED = "the OpenAI stream ended before response.completed"

    def __init__(self, session_id: str, model: str | None = None) -> None:
        super().__init__(session_id, model)
        self.response_id: str | None = None
        self._streamed: dict[tuple[Any, Any], str] = {}
        self._message_items: list[Any] = []
        self._texts: list[str] = []
        self._refusals: list[str] = []
        self._stop_reason: str | None = None
        self._usage: dict[str, int] = {}
        self._items: list[Any] = []  # output items in arrival order (dicts or _Pending)
        self._served: str | None = None
        self.service_tier: str | None = None
        self.served_by: str | None = None  # a router's top-level `provider` (OpenRouter)
        self.sent: tuple[Message, ...] = ()
        self.history_dropped: tuple[Dropped, ...] = ()

    def _error_fields(self) -> dict[str, Any]:
        return {"response_id": self.response_id}

    def diagnostics(self) -> dict[str, Any]:
        """The base fields plus the text streamed so far, the response id, and the
        incomplete reason and usage of a final response that reported them."""
        return {
            **super().diagnostics(),
            "partial_text": "\n\n".join(self._texts),
            "response_id": self.response_id,
            "stop_reason": self._stop_reason,
            "usage": self._usage or None,
        }

    # -- per event type -------------------------------------------------------------

    def _created(self, event: Mapping[str, Any]) -> list[Event]:
        self._note_response(event.get("response"))
        return []

    def _text_delta(self, event: Mapping[str, Any]) -> list[Event]:
        delta = event.get("delta")
        if not isinstance(delta, str) or not delta:
            return []
        return [self._text(event, delta)]

    def _text_done(self, event: Mapping[str, Any]) -> list[Event]:
        text = event.get("text")
        if not isinstance(text, str):
            return []
        streamed = self._streamed.get(_part_key(event), "")
        if text.startswith(streamed) and len(text) > len(streamed):
            return [self._text(event, text[len(streamed) :])]
        return []

    def _text(self, event: Mapping[str, Any], text: str) -> Event:
        key = _part_key(event)
        item = key[0]
        data: dict[str, Any] = {"text": text}
        if item not in self._message_items:
            if self._message_items:
                data["message_boundary"] = True
            self._message_items.append(item)
            self._texts.append("")
            self._items.append(_Pending(item))
        self._texts[-1] += text
        self._streamed[key] = self._streamed.get(key, "") + text
        return Event.new("text", data)

    def _refusal(self, event: Mapping[str, Any]) -> list[Event]:
        delta = event.get("delta")
        if isinstance(delta, str):
            self._refusals.append(delta)
        return []

    def _refusal_done(self, event: Mapping[str, Any]) -> list[Event]:
        refusal = event.get("refusal")
        if isinstance(refusal, str) and refusal.startswith("".join(self._refusals)):
            self._refusals = [refusal]
        return []

    def _item_done(self, event: Mapping[str, Any]) -> list[Event]:
        item = event.get("item")
        if not isinstance(item, Mapping):
            return []
        item_type = item.get("type")
        events = self._message_done(item) if item_type == "message" else []
        pending = next((i for i, seen in enumerate(self._items)
                        if isinstance(seen, _Pending) and seen.item_id == item.get("id")), None)
        if pending is None:
            self._items.append(dict(item))
        else:
            self._items[pending] = dict(item)
        if item_type == "message":
            return events
        if item_type == "function_call":
            arguments = item.get("arguments")
            data = {
                "id": item.get("call_id"),
                "name": item.get("name"),
                "arguments": arguments,
                "input": arguments_input(arguments),
                "item_id": item.get("id"),
            }
            return [Event.new("tool_use", data)]
        name = item_type if is_text(item_type) else "item"
        return [Event.new(f"openai.{name}", dict(item))]

    def _message_done(self, item: Mapping[str, Any]) -> list[Event]:
        # A message whose parts never streamed (nor came as text.done) still counts.
        events: list[Event] = []
        content = item.get("content")
        for index, part in enumerate(content if isinstance(content, list) else []):
            if not isinstance(part, Mapping):
                continue
            if part.get("type") == "output_text" and isinstance(part.get("text"), str):
                done = {"item_id": item.get("id"), "content_index": index, "text": part["text"]}
                events += self._text_done(done)
            elif (
                part.get("type") == "refusal"
                and isinstance(part.get("refusal"), str)
                and not self._refusals
            ):
                self._refusals = [part["refusal"]]
        return events

    def _completed(self, event: Mapping[str, Any]) -> list[Event]:
        response = event.get("response")
        self._note_response(response)
        response = response if isinstance(response, Mapping) else {}
        events = self._usage_events(response)
        status = response.get("status", "completed")
        if status != "completed":
            reason = BackendError.new(
                PROVIDER, "unexpected_response_status", response,
                message=f"response.completed with status {status!r}",
            )  # fmt: skip
            return [*events, self.error(reason)]
        if self._refusals:
            text = "".join(self._refusals)
            reason = BackendError.new(PROVIDER, "refusal", response, message=text)
            return [*events, self.error(reason)]
        self.finished = True
        # The final response's output is the whole reply; the streamed items stand in for it
        # (a message whose item never came: its streamed text, in arrival order).
        output = response.get("output")
        if isinstance(output, list) and output:
            items = [dict(item) for item in output if isinstance(item, Mapping)]
        else:
            items = [
                _message_item(self._texts[self._message_items.index(item.item_id)])
                if isinstance(item, _Pending) else item
                for item in self._items
            ]
        called = any(item.get("type") == "function_call" for item in items)
        finish = "tool_calls" if called else "stop"
        reply = from_openai(items, response_id=self.response_id, finish_reason=finish)
        data = {
            "text": "\n\n".join(self._texts),
            "session_id": self.session_id,
            "response_id": self.response_id,
            "model": self.model,
            "provider_model": self._served,
            "stop_reason": status,
            "finish_reason": finish,
            "service_tier": self.service_tier,
            "served_by": self.served_by,
            "provider": PROVIDER,
            "messages": (*self.sent, reply),
        }
        if self.history_dropped:
            data["history_dropped"] = self.history_dropped
        return [*events, Event.new("result", data)]

    def _failed(self, event: Mapping[str, Any]) -> list[Event]:
        response = event.get("response")
        self._note_response(response)
        response = response if isinstance(response, Mapping) else {}
        found = response.get("error")
        error: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        code = error.get("code")
        if is_text(code):
            self._stop_reason = code
        reason = BackendError.new(
            PROVIDER,
            "response_failed",
            response,
            retryable=code in _RETRYABLE_CODES,
            message=error.get("message") if isinstance(error.get("message"), str) else None,
        )
        return [*self._usage_events(response), self.error(reason)]

    def _incomplete(self, event: Mapping[str, Any]) -> list[Event]:
        response = event.get("response")
        self._note_response(response)
        response = response if isinstance(response, Mapping) else {}
        details = response.get("incomplete_details")
        why = details.get("reason") if isinstance(details, Mapping) else None
        if is_text(why):
            self._stop_reason = why
        message = f"the response is incomplete: {why}" if why else "the response is incomplete"
        reason = BackendError.new(PROVIDER, "response_incomplete", response, message=message)
        return [*self._usage_events(response), self.error(reason)]

    def _error_event(self, event: Mapping[str, Any]) -> list[Event]:
        code = event.get("code")
        message = event.get("message")
        reason = BackendError.new(
            PROVIDER,
            "stream_error",
            dict(event),
            retryable=code in _RETRYABLE_CODES,
            message=message if isinstance(message, str) else None,
        )
        return [self.error(reason)]

    def _note_response(self, response: Any) -> None:
        if not isinstance(response, Mapping):
            return
        if is_text(response.get("id")):
            self.response_id = response["id"]
        if is_text(response.get("model")):
            self._served = response["model"]
        if is_text(response.get("service_tier")):
            self.service_tier = response["service_tier"]
        if is_text(response.get("provider")):
            # A router's name for the upstream host that served it (OpenRouter's top-level
            # `provider`, e.g. "DeepInfra"); the provider itself sends no such field.
            self.served_by = response["provider"]

    def _usage_events(self, response: Mapping[str, Any]) -> list[Event]:
        usage = _usage_data(response.get("usage"))
        self._usage = usage
        return [Event.new("usage", usage)] if usage else []


_HANDLERS: Final = {
    "response.created": OpenAIStreamTranslator._created,
    "response.in_progress": OpenAIStreamTranslator._created,
    "response.output_text.delta": OpenAIStreamTranslator._text_delta,
    "response.output_text.done": OpenAIStreamTranslator._text_done,
    "response.refusal.delta": OpenAIStreamTranslator._refusal,
    "response.refusal.done": OpenAIStreamTranslator._refusal_done,
    "response.output_item.done": OpenAIStreamTranslator._item_done,
    "response.completed": OpenAIStreamTranslator._completed,
    "response.failed": OpenAIStreamTranslator._failed,
    "response.incomplete": OpenAIStreamTranslator._incomplete,
    "error": OpenAIStreamTranslator._error_event,
}
OpenAIStreamTranslator._HANDLERS = _HANDLERS


class _Pending:
    """A message item whose text streamed before (or without) its `output_item.done`."""

    __slots__ = ("item_id",)

    def __init__(self, item_id: Any) -> None:
        self.item_id = item_id


def _message_item(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": text}]}


def _part_key(event: Mapping[str, Any]) -> tuple[Any, Any]:
    return event.get("item_id"), event.get("content_index", 0)


def _usage_data(usage: Any) -> dict[str, int]:
    if not isinstance(usage, Mapping):
        return {}
    data: dict[str, int] = {}
    for key in ("input_tokens", "output_tokens", "total_tokens"):
        if isinstance(usage.get(key), int):
            data[key] = usage[key]
    for details, key, name in (
        ("output_tokens_details", "reasoning_tokens", "reasoning_tokens"),
        ("input_tokens_details", "cached_tokens", "cached_tokens"),
    ):
        section = usage.get(details)
        if isinstance(section, Mapping) and isinstance(section.get(key), int):
            data[name] = section[key]
    return data


# -- the SDK error boundary ---------------------------------------------------------------


def _error_from_sdk(exc: BaseException, sdk: Any) -> BackendError | None:
    """The one place an `openai` SDK exception becomes a `BackendError`.

    - `APIStatusError` → `BackendError.http` (status, body, `retry-after` header), except a
      `previous_response_not_found` error → kind `"session_not_found"`, not retryable;
    - `APITimeoutError` → `"timeout"`; `APIConnectionError` → `"transport"` (retryable);
    - any other `APIError` (the SDK raises one for a stream event carrying an `error`
      object) → `"stream_error"`, retryable when its code says so.

    Returns:
        The `BackendError`, or None for an exception that is not the SDK's (a bug, which
        the caller lets crash the turn).
    """
    lost = connection_error(PROVIDER, exc, sdk)
    if lost is not None:
        return lost
    if isinstance(exc, sdk.APIStatusError):
        error = status_error(PROVIDER, exc)
        if _previous_response_missing(exc.body):
            # The continued response is gone (expired, or never stored): the conversation
            # cannot go on; the agent forgets it (reset_session) and the next turn starts anew.
            return BackendError(
                PROVIDER, "session_not_found", False, error.status, None, error.message, exc
            )
        return error
    if isinstance(exc, sdk.APIError):
        code = getattr(exc, "code", None)
        return BackendError.new(
            PROVIDER, "stream_error", exc, retryable=code in _RETRYABLE_CODES, message=exc.message
        )
    return None


def _previous_response_missing(body: Any) -> bool:
    """True for the error body of a `previous_response_id` the API does not have
    (`{"error": {"code": "previous_response_not_found", ...}}`, or that inner object)."""
    if isinstance(body, Mapping) and isinstance(body.get("error"), Mapping):
        body = body["error"]
    if not isinstance(body, Mapping):
        return False
    return body.get("code") == "previous_response_not_found" or (
        body.get("param") == "previous_response_id"
        and "not found" in str(body.get("message", "")).lower()
    )


# -- the session and the backend -------------------------------------------------------------


class OpenAISession(SDKSession, frozen=True, kw_only=True):
    """An `OpenAIResponses` session. Immutable value.

    Fields:
        options: the validated `OpenAIOptions`.
        session_id: the id reported in results (`"openai-<hex>"` unless given).
        previous_response_id: the response the next turn continues (`store=True`), or None.
        history: stateless mode: the kept conversation (`{"role", "content"}` dicts).
        turns: successful turns so far (count).
        transport: the SDK client and cancel support (shared by copies).

    Thread-safety: immutable; the transport inside is thread-safe.
    """

    options: OpenAIOptions
    previous_response_id: str | None = None


class OpenAIResponses(Backend):
    """The OpenAI Responses API backend; pass the class itself as the agent's backend.

    Backend options (see `OpenAIOptions` for each one's meaning, default and unit):
    `api_key`, `base_url`, `model`, `instructions`, `store`, `max_output_tokens`,
    `reasoning`, `tools`, `params`, `timeout`, `max_retries`, `default_headers`,
    `max_history_messages`, `max_history_bytes`, `session_id`, `previous_response_id`.

    Errors (reasons are data): option errors at start are `SessionStartError` with
    `("unknown_option", key)` or `("invalid_option", key, value)`; a missing SDK or API key
    is a `SessionStartError` whose reason is a `BackendError` (`"missing_sdk"`,
    `"missing_api_key"`); every failure of a turn is a terminal `error` event whose reason
    is a `BackendError` with provider `"openai"`.

    Thread-safety: every hook may run in any thread; `cancel` may run while `prompt`'s stream
    is being read in another thread (it shuts the connection down).

    Mirrors: `GenAgentOpenAI` (docs/pages/contract.md#s7-6, fourth bullet; docs: the backend guide),
    on the official SDK.
    """

    supports_rollback = True  # the session is the conversation (busy="rollback")

    PROVIDER: ClassVar[str] = "openai"
    """The provider name in trails and reasons."""

    @classmethod
    def start_session(cls, opts: Mapping[str, Any]) -> OpenAISession:
        """Validate `opts`, check for an API key and build the SDK client (no request).

        Raises:
            SessionStartError: `("unknown_option", key)`, `("invalid_option", key, value)`,
                `("invalid_options", type_name)`, or a `BackendError` of kind
                `"missing_sdk"` (the message says `pip install 'gen-agent[openai]'`) or
                `"missing_api_key"`.

        Mirrors: `start_session/1` (docs/pages/contract.md#s7-1, #s7-6; docs: the backend guide).
        """
        options = validate_options(opts, OpenAIOptions, _CHECKS, backend=cls.__name__)
        tool_defs, python_tools = split_tools(options.tools)
        transport, session_id = _SDK.open(options)
        history = seed_history(options.history, options)
        previous = options.previous_response_id
        if options.store and history:
            last = history[-1]
            if previous is None and last.provider == PROVIDER and is_text(last.id):
                previous, history = last.id, ()  # the provider has it: continue from its id
        return OpenAISession(
            options=options,
            session_id=session_id,
            previous_response_id=previous,
            history=history,
            transport=transport,
            tool_defs=tool_defs,
            python_tools=python_tools,
        )

    @classmethod
    def prompt(
        cls, session: OpenAISession, prompt: str, context: TurnContext
    ) -> tuple[Iterator[Event], OpenAISession]:
        """Return the lazily streamed reply to `prompt`.

        Runs in the turn task. The request is made when the stream is first read, so every
        failure is a terminal `error` event.

        Returns:
            `(events, session)`; in stateless mode the session's history ends with the new
            user message (a previous unanswered one dropped).

        Raises:
            TypeError: `prompt` is not a str.

        Mirrors: `prompt/2` (docs/pages/contract.md#s7-1, #s7-6; docs: the backend guide).
        """
        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
        messages = with_prompt(session.history, prompt)
        stateless = not session.options.store
        replay = to_openai(messages) if session.history or stateless else None
        if stateless:
            session = msgspec.structs.replace(session, history=messages)
        output = context.options.output
        turn_session = session

        def request(wire: Any, previous: str | None, sent: tuple[Message, ...],
                    dropped: Any = ()) -> Iterator[Event]:
            translator = OpenAIStreamTranslator(turn_session.session_id,
                                                turn_session.options.model)
            translator.sent = sent
            translator.history_dropped = dropped
            step_session = msgspec.structs.replace(turn_session, previous_response_id=previous)
            return stream_turn(
                step_session,
                context,
                translator,
                sdk=_SDK,
                create=lambda client: client.responses.create(
                    **_request(step_session, prompt, wire, output)
                ),
                error_from_sdk=_error_from_sdk,
            )

        first_wire = None if replay is None else replay.wire
        first_dropped = () if replay is None else replay.dropped
        if not session.python_tools:
            stream = request(first_wire, session.previous_response_id, (messages[-1],),
                             first_dropped)
        else:  # the tool loop: Python tools run inside the turn (gen_agent.tools)
            stream = run_loop(sent=(messages[-1],), history=messages,
                              step=_loop_step(request, first_wire, first_dropped, stateless,
                                              session.previous_response_id),
                              tools=session.python_tools, context=context, provider=PROVIDER,
                              max_steps=session.options.max_steps)
        return stream, session

    @classmethod
    def update_session(
        cls, session: OpenAISession, result_data: Mapping[str, Any]
    ) -> OpenAISession:
        """After a successful turn: continue from its response (`store=True`) or append its
        text to the kept conversation (stateless; an empty reply drops the user message)."""
        turns = session.turns + 1
        if session.options.store:
            response_id = result_data.get("response_id")
            if not is_text(response_id):
                response_id = session.previous_response_id
            return msgspec.structs.replace(
                session, previous_response_id=response_id, history=(), turns=turns
            )
        messages = tuple(result_data.get("messages") or ())
        added = messages[1:] if messages and messages[0].role == "user" else messages
        if not any(m.role == "assistant" for m in added):
            added = ()
        kept = after_loop(session.history, added, session.options)
        return msgspec.structs.replace(session, history=kept, turns=turns)

    @classmethod
    def export_session(cls, session: OpenAISession) -> dict[str, Any]:
        """The resumable session for a session store: session id, kept history (stateless
        mode), turns, and the response the next turn continues (`store=True`)."""
        return export_history(session, previous_response_id=session.previous_response_id)

    @classmethod
    def restore_session(cls, data: Mapping[str, Any], opts: Mapping[str, Any]) -> OpenAISession:
        """`start_session(opts)` with the conversation of `export_session`'s `data`.

        Raises:
            SessionStartError: as `start_session`. ValueError: `data` is no such record.
        """
        session = cls.start_session(opts)
        previous = data.get("previous_response_id") if isinstance(data, Mapping) else None
        return msgspec.structs.replace(
            session, **restored(session, data),
            previous_response_id=previous if is_text(previous) else session.previous_response_id)

    @classmethod
    def reset_session(cls, session: OpenAISession) -> OpenAISession:
        """Start a new conversation: forget the previous response id and the history.

        Mirrors `reset_session/1` (docs/pages/contract.md#s2-15; docs: the client API reference).
        """
        return msgspec.structs.replace(session, previous_response_id=None, history=(), turns=0)

    @classmethod
    def cancel(cls, session: OpenAISession) -> None:
        """End the current turn's request now (any thread; idempotent; quick)."""
        session.transport.cancel()

    @classmethod
    def idle_session(cls, session: Any) -> None:
        """The agent hibernates: close the session's connections and drop its SDK client
        (the next turn builds one; a `client=`/`http_client=` of your own is kept as is)."""
        session.transport.release_idle()

    @classmethod
    def terminate_session(cls, session: OpenAISession) -> None:
        """Cancel any request and close the SDK client. Idempotent."""
        session.transport.close()


def _function_tool(tool: Any) -> dict[str, Any]:
    # A Python tool as a Responses API function tool (not strict: msgspec schemas may leave
    # properties optional).
    return {"type": "function", "name": tool.name, "description": tool.description,
            "parameters": tool.input_schema, "strict": False}


def _loop_step(request: Any, first_wire: Any, first_dropped: Any, stateless: bool,
               previous: str | None) -> Any:
    """The tool loop's `step` for OpenAI: stateless, each step sends the whole conversation;
    with server-side state, the first step is the turn's usual request and each later one
    continues the step before it (`previous_response_id`) with the tool results only."""
    last: list[str | None] = [previous]
    steps = [0]

    def step(history: tuple[Message, ...]) -> Iterator[Event]:
        steps[0] += 1
        if steps[0] == 1:
            events = request(first_wire, last[0], (), first_dropped)
        elif stateless:
            replay = to_openai(history)
            events = request(replay.wire, None, (), replay.dropped)
        else:
            results = [part for part in history[-1].content if isinstance(part, ToolResultPart)]
            wire = tuple({"type": "function_call_output", "call_id": part.tool_call_id,
                          "output": part.content if isinstance(part.content, str)
                          else msgspec.json.encode(part.content).decode()} for part in results)
            events = request(wire, last[0], ())
        for event in events:
            if event.kind == "result" and is_text(event.data.get("response_id")):
                last[0] = event.data["response_id"]
            yield event

    return step


def _request(
    session: OpenAISession,
    prompt: str,
    wire: tuple[dict[str, Any], ...] | None,
    output: Any = None,
) -> dict[str, Any]:
    o = session.options
    request: dict[str, Any] = {"model": o.model, "stream": True, "store": o.store}
    if o.params:
        request["extra_body"] = dict(o.params)  # fields the installed SDK may not know
    # With `wire`: stateless, the first stored turn of a seeded history from elsewhere, or
    # a tool loop's next step continuing its stored response with the tool results.
    request["input"] = prompt if wire is None else list(wire)
    if session.previous_response_id is not None:
        request["previous_response_id"] = session.previous_response_id
    if o.instructions is not None:
        request["instructions"] = o.instructions
    if o.max_output_tokens is not None:
        request["max_output_tokens"] = o.max_output_tokens
    if o.reasoning is not None:
        request["reasoning"] = dict(o.reasoning)
    tools = [*session.tool_defs, *(_function_tool(tool) for tool in session.python_tools)]
    if tools:
        request["tools"] = tools
    if output is not None:
        # Structured outputs: the schema as `text.format` (gen_agent._output); not strict,
        # since msgspec schemas may leave properties optional.
        fmt = {
            "type": "json_schema",
            "name": schema_name(output),
            "schema": schema_of(output),
            "strict": False,
        }
        extra = request.get("extra_body")
        if isinstance(extra, dict) and isinstance(extra.get("text"), Mapping):
            extra["text"] = {**extra["text"], "format": fmt}  # `params` set other text fields
        else:
            request["text"] = {"format": fmt}
    return request
