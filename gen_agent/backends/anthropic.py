"""`AnthropicAPI`: the Anthropic Messages API backend, on the official `anthropic` SDK, streaming.

Install with `pip install 'gen-agent[anthropic]'`; importing this module does not import the
SDK (`start_session` does, and refuses the session with a clear error when it is missing).

The conversation lives in the session: each turn sends the kept history plus the new user
message (`messages.create(..., stream=True)`); after a successful turn `update_session`
appends the assistant's text, or drops the unanswered user message when the reply is empty or
a refusal. A user message left unanswered by a failed turn is dropped by the next turn. The
history is bounded (`max_history_messages`, `max_history_bytes`, oldest pairs first) and
`reset_session` clears it.

Normalization (raw stream events, as dicts, to `Event`s; `AnthropicStreamTranslator`):

- `message_start` → nothing (its id, model and input usage are remembered);
- a text delta → `text` {text} (immediately, as it arrives);
- a `tool_use` block, once complete → `tool_use` {id, name, input}: the input assembled from
  its `input_json_delta` fragments (`{}` for a tool called without arguments);
- any other block type (`thinking`, `server_tool_use` with its input assembled the same way,
  ...), once complete → `anthropic.<type>` with the block;
- a delta of another kind (`citations_delta`, or one this module does not know) →
  `anthropic.<delta type>` {index, delta}, at once (never dropped);
- `message_delta` → remembered (stop reason; usage counts are cumulative: the last wins, they
  are never summed);
- `message_stop` → `usage` {input_tokens, output_tokens, cache_*} then the terminal `result`
  {text (the joined text blocks), session_id, stop_reason, model, message_id, provider};
  a refusal is a `result` with `stop_reason: "refusal"` (docs/pages/contract.md#s7-6; docs: the
  backend guide);
- an HTTP error, a mid-stream `error` event, a connection failure, or a stream that ends
  before `message_stop` → the terminal `error` whose reason is a `BackendError` with its
  `diagnostics` (partial text, message id, usage, HTTP status); `_error_from_sdk` is the one
  place SDK exceptions are translated, `_sdk.stream_turn` the one place the body's faults are
  (the body is decoded by `_sse`, not by the SDK: see `docs/pages/errors.md`).

SDK retries are off by default (`max_retries=0`): the agent's retry policy owns retries.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Final

import msgspec

from gen_agent._conversation import Dropped, Message, from_anthropic, to_anthropic
from gen_agent._event import Event
from gen_agent._output import schema_of
from gen_agent._response import finish_reason
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
    is_str,
    is_text,
    keys_other_than,
    number_between,
    validate_options,
)

__all__ = [
    "DEFAULT_MODEL",
    "OPTIONS",
    "PROVIDER",
    "AnthropicAPI",
    "AnthropicOptions",
    "AnthropicSession",
    "AnthropicStreamTranslator",
]

PROVIDER: Final = "anthropic"
_SDK: Final = SDK(
    provider=PROVIDER,
    module="anthropic",
    client="Anthropic",
    key_env="ANTHROPIC_API_KEY",
    label="Anthropic",
)

DEFAULT_MODEL: Final = "claude-sonnet-4-5"
"""The model used when the `model` option is not given."""

# The HTTP status each Anthropic error type stands for: a mid-stream `error` event carries
# only the type, and mapping it through the status gives the same kind and retryable flag as
# the same error answered before the stream started.
_ERROR_TYPE_STATUS: Final = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
_USAGE_KEYS: Final = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)


# -- options -------------------------------------------------------------------------------


class AnthropicOptions(SDKOptions, frozen=True, kw_only=True):
    """The validated options of an `AnthropicAPI` session (see `OPTIONS` for the keys).

    Fields:
        api_key: the API key; None reads `ANTHROPIC_API_KEY` (missing → start error).
        base_url: the API root (e.g. `"http://127.0.0.1:PORT"`); None: the SDK's default
            (or `ANTHROPIC_BASE_URL`).
        model: the model (default `DEFAULT_MODEL`).
        max_tokens: the reply's token budget (tokens, >= 1; default 1024).
        system: the system prompt, or None.
        temperature: the sampling temperature (0.0 to 1.0, the API's range), or None for
            the API default.
        tools: tool definitions sent with every request (dicts, as the API takes them).
        params: further `messages.create` arguments (e.g. `{"top_p": 0.9}`), as given.
        timeout: the SDK timeout (seconds; also the longest wait between two stream events).
        max_retries: the SDK's own retries (count; default 0: the agent owns retries).
        default_headers: extra HTTP headers on every request.
        max_history_messages: the most messages kept in the conversation (count).
        max_history_bytes: the most `term_size` bytes the kept messages may take (bytes).
        session_id: the session id reported in results; None mints `"anthropic-<hex>"`.
    """

    model: str = DEFAULT_MODEL
    max_tokens: int = 1024
    system: str | None = None
    temperature: float | None = None


OPTIONS: Final = frozenset(AnthropicOptions.__struct_fields__)
"""The option keys `AnthropicAPI.start_session` accepts."""


_CHECKS: Final = {
    **SDK_CHECKS,
    "max_tokens": (int_at_least(1), "an int >= 1 (tokens)"),
    "system": (is_str, "a str"),
    "temperature": (number_between(0.0, 1.0), "a number from 0.0 to 1.0"),
    "params": (
        keys_other_than({"messages", "stream", "model", "max_tokens"}),
        "a dict of str keys other than messages/stream/model/max_tokens",
    ),
}


# -- the pure translator ----------------------------------------------------------------


class AnthropicStreamTranslator(StreamTranslator):
    """Turns the raw stream events of one Messages API reply (as dicts) into `Event`s. Pure.

    Feed every event, in order, to `translate(event)`; after the terminal event (on
    `message_stop`) further events produce nothing. `truncated()` gives the terminal error
    for a stream that ended before `message_stop`.

    Args:
        session_id: the session id put in the result.
        model: the requested model (reported unless the reply names one).

    Not thread-safe: one turn, one owner.
    """

    _PROVIDER = PROVIDER
    _TRUNCATED = "the Anthropic stream ended before message_stop"

    def __init__(self, session_id: str, model: str | None = None) -> None:
        super().__init__(session_id, model)
        self.message_id: str | None = None
        self.stop_reason: str | None = None
        self.usage: dict[str, int] = {}
        self.service_tier: str | None = None
        self.sent: tuple[Message, ...] = ()
        self.history_dropped: tuple[Dropped, ...] = ()
        self._texts: list[str] = []
        self._blocks: dict[int, dict[str, Any]] = {}
        self._done: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}
        self._served: str | None = None

    def diagnostics(self) -> dict[str, Any]:
        """The base fields plus the text streamed so far, the message id, the stop reason
        and the usage reported before the failure."""
        return {
            **super().diagnostics(),
            "partial_text": "".join(self._texts),
            "response_id": self.message_id,
            "stop_reason": self.stop_reason,
            "usage": dict(self.usage) if self.usage else None,
        }

    # -- per event type -------------------------------------------------------------

    def _message_start(self, event: Mapping[str, Any]) -> list[Event]:
        message = event.get("message")
        if isinstance(message, Mapping):
            if is_text(message.get("id")):
                self.message_id = message["id"]
            if is_text(message.get("model")):
                self._served = message["model"]
            self._note_usage(message.get("usage"))
        return []

    def _block_start(self, event: Mapping[str, Any]) -> list[Event]:
        block = event.get("content_block")
        index = event.get("index")
        if not isinstance(block, Mapping) or not isinstance(index, int):
            return []
        self._blocks[index] = dict(block)
        if block.get("type") == "text":
            self._texts.append(block.get("text") or "")
            if block.get("text"):
                return [Event.new("text", {"text": block["text"]})]
        return []

    def _block_delta(self, event: Mapping[str, Any]) -> list[Event]:
        delta = event.get("delta")
        index = event.get("index")
        if not isinstance(delta, Mapping) or not isinstance(index, int):
            return []
        kind = delta.get("type")
        if kind == "text_delta" and isinstance(delta.get("text"), str):
            if not delta["text"]:
                return []
            block = self._blocks.get(index)
            if block is not None and block.get("type") == "text" and self._texts:
                self._texts[-1] += delta["text"]
                block["text"] = (block.get("text") or "") + delta["text"]
            return [Event.new("text", {"text": delta["text"]})]
        if kind == "input_json_delta" and isinstance(delta.get("partial_json"), str):
            self._json.setdefault(index, []).append(delta["partial_json"])
            return []
        block = self._blocks.get(index)
        if kind in _MERGED_DELTAS and block is not None:
            _merge_delta(block, delta)
            return []
        # Citations and any delta kind this translator does not know: kept, as an event.
        name = kind if is_text(kind) else "delta"
        return [Event.new(f"anthropic.{name}", {"index": index, "delta": dict(delta)})]

    def _block_stop(self, event: Mapping[str, Any]) -> list[Event]:
        index = event.get("index")
        block = self._blocks.pop(index, None) if isinstance(index, int) else None
        pieces = self._json.pop(index, None) if isinstance(index, int) else None
        if block is None or not isinstance(index, int):
            return []
        self._done[index] = block
        if block.get("type") == "text":
            return []
        if pieces is not None:
            block["input"] = _tool_input("".join(pieces))
        if block.get("type") == "tool_use":
            data = {"id": block.get("id"), "name": block.get("name"), "input": block.get("input")}
            if not isinstance(data["input"], Mapping):
                data["input"] = {} if data["input"] is None else data["input"]
            return [Event.new("tool_use", data)]
        name = block.get("type") if is_text(block.get("type")) else "content_block"
        return [Event.new(f"anthropic.{name}", block)]

    def _error(self, event: Mapping[str, Any]) -> list[Event]:
        return [self.error(_stream_error(event))]

    def _message_delta(self, event: Mapping[str, Any]) -> list[Event]:
        delta = event.get("delta")
        if isinstance(delta, Mapping) and is_text(delta.get("stop_reason")):
            self.stop_reason = delta["stop_reason"]
        self._note_usage(event.get("usage"))
        return []

    def _message_stop(self, event: Mapping[str, Any]) -> list[Event]:
        self.finished = True
        events = [Event.new("usage", dict(self.usage))] if self.usage else []
        finish = finish_reason(self.stop_reason)
        blocks = [self._done[index] for index in sorted(self._done)]
        reply = from_anthropic(blocks, message_id=self.message_id, finish_reason=finish)
        data: dict[str, Any] = {
            "text": "".join(self._texts),
            "session_id": self.session_id,
            "stop_reason": self.stop_reason,
            "finish_reason": finish,
            "model": self.model,
            "provider_model": self._served,
            "message_id": self.message_id,
            "response_id": self.message_id,
            "service_tier": self.service_tier,
            "provider": PROVIDER,
            "messages": (*self.sent, reply),
        }
        if self.history_dropped:
            data["history_dropped"] = self.history_dropped
        events.append(Event.new("result", data))
        return events

    def _note_usage(self, usage: Any) -> None:
        # message_delta counts are cumulative for the whole message: the latest value wins.
        if not isinstance(usage, Mapping):
            return
        for key in _USAGE_KEYS:
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                self.usage[key] = value
        if is_text(usage.get("service_tier")):
            self.service_tier = usage["service_tier"]


_HANDLERS: Final = {
    "message_start": AnthropicStreamTranslator._message_start,
    "content_block_start": AnthropicStreamTranslator._block_start,
    "content_block_delta": AnthropicStreamTranslator._block_delta,
    "content_block_stop": AnthropicStreamTranslator._block_stop,
    "message_delta": AnthropicStreamTranslator._message_delta,
    "message_stop": AnthropicStreamTranslator._message_stop,
    "error": AnthropicStreamTranslator._error,
}
AnthropicStreamTranslator._HANDLERS = _HANDLERS


# Deltas that extend a block's own fields (the block is an event once complete).
_MERGED_DELTAS: Final = frozenset({"thinking_delta", "signature_delta"})


def _merge_delta(block: dict[str, Any], delta: Mapping[str, Any]) -> None:
    # thinking and signature deltas extend the block's string fields.
    for key, value in delta.items():
        if key == "type":
            continue
        if isinstance(value, str) and isinstance(block.get(key), str):
            block[key] += value
        else:
            block[key] = value


def _tool_input(text: str) -> Any:
    """A tool call's input from its joined `input_json_delta` fragments: `{}` for none (a
    tool called without arguments streams one empty fragment), else the decoded JSON, or
    `{"_unparsed": text}` when the fragments do not make JSON."""
    if not text.strip():
        return {}
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        return {"_unparsed": text}


# -- the SDK error boundary ---------------------------------------------------------------


def _error_from_sdk(exc: BaseException, sdk: Any) -> BackendError | None:
    """The one place an `anthropic` SDK exception becomes a `BackendError`.

    - `APIStatusError` with an HTTP error status → `BackendError.http` (status, body,
      `retry-after` header; 429 `rate_limited`, 401 `authentication`, 5xx/529
      `server_error`...);
    - `APIStatusError` raised by a mid-stream `error` event (the response itself was 200) →
      the kind and retryable flag of the status its error type stands for, `status` None;
    - `APITimeoutError` → `"timeout"`; `APIConnectionError` → `"transport"` (both
      retryable).

    Returns:
        The `BackendError`, or None for an exception that is not the SDK's (a bug, which
        the caller lets crash the turn).
    """
    lost = connection_error(PROVIDER, exc, sdk)
    if lost is not None:
        return lost
    if isinstance(exc, sdk.APIStatusError):
        if exc.status_code >= 400:
            return status_error(PROVIDER, exc)
        return _stream_error(exc.body, exc)
    if isinstance(exc, sdk.APIError):
        return BackendError.new(PROVIDER, "provider_error", exc, message=exc.message)
    return None


def _stream_error(body: Any, raw: Any = None) -> BackendError:
    """The error of a mid-stream `error` event (`{"type": "error", "error": {"type",
    "message"}}`): the kind and retryable flag of the status its error type stands for,
    `status` None (the response itself was 200); `raw` the event (or `raw`)."""
    body = body if isinstance(body, Mapping) else {}
    found = body.get("error")
    error: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    error_type = error.get("type")
    status = _ERROR_TYPE_STATUS.get(error_type, 500) if isinstance(error_type, str) else 500
    like = BackendError.http(PROVIDER, status, dict(body))
    raw = dict(body) if raw is None else raw
    return BackendError(PROVIDER, like.kind, like.retryable, None, None, like.message, raw)


# -- the session and the backend -------------------------------------------------------------


class AnthropicSession(SDKSession, frozen=True, kw_only=True):
    """An `AnthropicAPI` session: options, the conversation, the SDK client. Immutable value.

    Fields:
        options: the validated `AnthropicOptions`.
        session_id: the id reported in results (`"anthropic-<hex>"` unless given).
        history: the kept messages, oldest first (`{"role", "content"}` dicts).
        turns: successful turns so far (count).
        transport: the SDK client and cancel support (shared by copies).

    Thread-safety: immutable; the transport inside is thread-safe.
    """

    options: AnthropicOptions


class AnthropicAPI(Backend):
    """The Anthropic Messages API backend; pass the class itself as the agent's backend.

    Backend options (see `AnthropicOptions` for each one's meaning, default and unit):
    `api_key`, `base_url`, `model`, `max_tokens`, `system`, `temperature`, `tools`, `params`,
    `timeout`, `max_retries`, `default_headers`, `max_history_messages`,
    `max_history_bytes`, `session_id`.

    Errors (reasons are data): option errors at start are `SessionStartError` with
    `("unknown_option", key)` or `("invalid_option", key, value)`; a missing SDK or API key
    is a `SessionStartError` whose reason is a `BackendError` (`"missing_sdk"`,
    `"missing_api_key"`); every failure of a turn is a terminal `error` event whose reason
    is a `BackendError` with provider `"anthropic"`.

    Thread-safety: every hook may run in any thread; `cancel` may run while `prompt`'s stream
    is being read in another thread (it shuts the connection down).

    Mirrors: `GenAgentAnthropic` (docs/pages/contract.md#s7-6, third bullet; docs: the backend
    guide), on the official SDK.
    """

    supports_rollback = True  # the session is the conversation (busy="rollback")

    PROVIDER: ClassVar[str] = "anthropic"
    """The provider name in trails and reasons."""

    @classmethod
    def start_session(cls, opts: Mapping[str, Any]) -> AnthropicSession:
        """Validate `opts`, check for an API key and build the SDK client (no request).

        Returns:
            An `AnthropicSession` with an empty history.

        Raises:
            SessionStartError: `("unknown_option", key)`, `("invalid_option", key, value)`,
                `("invalid_options", type_name)`, or a `BackendError` of kind
                `"missing_sdk"` (the message says `pip install 'gen-agent[anthropic]'`) or
                `"missing_api_key"`.

        Mirrors: `start_session/1` (docs/pages/contract.md#s7-1, #s7-6; docs: the backend guide).
        """
        options = validate_options(opts, AnthropicOptions, _CHECKS, backend=cls.__name__)
        tool_defs, python_tools = split_tools(options.tools)
        transport, session_id = _SDK.open(options)
        return AnthropicSession(
            options=options,
            session_id=session_id,
            history=seed_history(options.history, options),
            transport=transport,
            tool_defs=tool_defs,
            python_tools=python_tools,
        )

    @classmethod
    def prompt(
        cls, session: AnthropicSession, prompt: str, context: TurnContext
    ) -> tuple[Iterator[Event], AnthropicSession]:
        """Append the user message and return the lazily streamed reply.

        Runs in the turn task. The request is made when the stream is first read, so every
        failure (HTTP status, mid-stream error, lost connection) is a terminal `error` event.

        Args:
            session: the `AnthropicSession`.
            prompt: the user message (`str`).
            context: the `TurnContext` (its cancel signal).

        Returns:
            `(events, session)`: a generator of `Event`s and the session whose history ends
            with the new user message (a previous unanswered one dropped).

        Raises:
            TypeError: `prompt` is not a str.

        Mirrors: `prompt/2` (docs/pages/contract.md#s7-1, #s7-6; docs: the backend guide).
        """
        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
        session = msgspec.structs.replace(session, history=with_prompt(session.history, prompt))
        output = context.options.output

        def step(history: tuple[Message, ...], sent: tuple[Message, ...]) -> Iterator[Event]:
            translator = AnthropicStreamTranslator(session.session_id, session.options.model)
            translator.sent = sent
            replay = to_anthropic(history)
            translator.history_dropped = replay.dropped
            return stream_turn(
                session,
                context,
                translator,
                sdk=_SDK,
                create=lambda client: client.messages.create(
                    **_request(session, replay.wire, output)
                ),
                error_from_sdk=_error_from_sdk,
            )

        if not session.python_tools:
            stream = step(session.history, (session.history[-1],))
        else:  # the tool loop: Python tools run inside the turn (gen_agent.tools)
            stream = run_loop(
                sent=(session.history[-1],), history=session.history,
                step=lambda history: step(history, ()), tools=session.python_tools,
                context=context, provider=PROVIDER, max_steps=session.options.max_steps)
        return stream, session

    @classmethod
    def update_session(
        cls, session: AnthropicSession, result_data: Mapping[str, Any]
    ) -> AnthropicSession:
        """After a successful turn: append the reply (the last of the result's `messages`)
        to the history (bounded). An empty reply is kept but not resent (see
        `gen_agent._conversation`)."""
        messages = tuple(result_data.get("messages") or ())
        added = messages[1:] if messages and messages[0].role == "user" else messages
        if not any(m.role == "assistant" for m in added):
            added = ()
        kept = after_loop(session.history, added, session.options)
        return msgspec.structs.replace(session, history=kept, turns=session.turns + 1)

    @classmethod
    def export_session(cls, session: AnthropicSession) -> dict[str, Any]:
        """The resumable session for a session store: session id, kept history, turns."""
        return export_history(session)

    @classmethod
    def restore_session(
        cls, data: Mapping[str, Any], opts: Mapping[str, Any]
    ) -> AnthropicSession:
        """`start_session(opts)` with the conversation of `export_session`'s `data`.

        Raises:
            SessionStartError: as `start_session`. ValueError: `data` is no such record.
        """
        session = cls.start_session(opts)
        return msgspec.structs.replace(session, **restored(session, data))

    @classmethod
    def reset_session(cls, session: AnthropicSession) -> AnthropicSession:
        """Forget the conversation (history and turn count); the client is kept.

        Mirrors `reset_session/1` (docs/pages/contract.md#s2-15; docs: the client API reference).
        """
        return msgspec.structs.replace(session, history=(), turns=0)

    @classmethod
    def cancel(cls, session: AnthropicSession) -> None:
        """End the current turn's request now (any thread; idempotent; quick)."""
        session.transport.cancel()

    @classmethod
    def idle_session(cls, session: Any) -> None:
        """The agent hibernates: close the session's connections and drop its SDK client
        (the next turn builds one; a `client=`/`http_client=` of your own is kept as is)."""
        session.transport.release_idle()

    @classmethod
    def terminate_session(cls, session: AnthropicSession) -> None:
        """Cancel any request and close the SDK client. Idempotent."""
        session.transport.close()


def _request(
    session: AnthropicSession, messages: tuple[dict[str, Any], ...], output: Any = None
) -> dict[str, Any]:
    # Only the arguments every SDK version takes are keywords; the rest travel in the JSON
    # body as given (`extra_body`), so a field the installed SDK does not know still works.
    o = session.options
    body: dict[str, Any] = dict(o.params)
    if o.system is not None:
        body["system"] = o.system
    if o.temperature is not None:
        body["temperature"] = o.temperature
    tools = [*session.tool_defs, *(tool.spec() for tool in session.python_tools)]
    if tools:
        body["tools"] = tools
    if output is not None:
        # Structured outputs: the schema as `output_config.format` (gen_agent._output).
        config = dict(body.get("output_config") or {})
        config["format"] = {"type": "json_schema", "schema": schema_of(output)}
        body["output_config"] = config
    request: dict[str, Any] = {
        "model": o.model,
        "max_tokens": o.max_tokens,
        "messages": list(messages),
        "stream": True,
    }
    if body:
        request["extra_body"] = body
    return request
