"""What the two SDK-based HTTP backends (Anthropic, OpenAI) share.

- `SDKOptions`, `SDK_CHECKS`, `SDKSession`: the options and session fields both backends have.
- `SDK`: which SDK a backend uses; `SDK.load` imports it lazily (a missing one is a
  `SessionStartError` naming the extra to install; importing gen_agent never imports an SDK)
  and `SDK.open` checks for an API key and builds the session's `Transport`.
- `Transport` (`gen_agent.backends._transport`): one SDK client per session, built at the
  first turn on the process's one TLS context, plus what makes `cancel` work from another
  thread and the rules for reusing a kept connection.
- `StreamTranslator`: the base of the two stream translators (dispatch on the event type,
  the terminal `error` event, the truncated-stream error).
- `stream_turn`: one streamed request, every failure a terminal `error` event.
- `connection_error`, `status_error`, `transport_error`: the parts of the SDK exception
  mapping both backends share (each backend has its one boundary function that uses them).
- `with_prompt`, `after_reply`, `trim_history`: the conversation kept in a session (bounded by
  count and bytes).
"""

from __future__ import annotations

import importlib
import os
import secrets
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import ModuleType
from typing import Any, ClassVar, Final

import msgspec
from loguru import logger

from gen_agent._conversation import Message, TextPart, user_message
from gen_agent._event import Event
from gen_agent._size import term_size
from gen_agent.backend import BackendError, SessionStartError, TurnContext
from gen_agent.backends._http.sse import SSEDecoder, SSEFrame, SSEProtocolError
from gen_agent.backends._http.transport import Transport
from gen_agent.backends._http.transport import close_quietly as _close_quietly
from gen_agent.backends._option_checks import (
    Check,
    int_at_least,
    is_positive_number,
    is_str_map,
    is_text,
    rich_fields,
    shown_options,
)

__all__ = [
    "SDK",
    "SDK_CHECKS",
    "SDKOptions",
    "SDKSession",
    "StreamTranslator",
    "Transport",
    "after_loop",
    "after_reply",
    "connection_error",
    "export_history",
    "is_history",
    "load_sdk",
    "restored",
    "seed_history",
    "status_error",
    "stream_turn",
    "transport_error",
    "trim_history",
    "unsendable",
    "with_prompt",
]



def is_history(value: Any) -> bool:
    """True for a list or tuple of `gen_agent.Message` (the `history` option)."""
    return isinstance(value, list | tuple) and all(type(m) is Message for m in value)


def load_sdk(module: str, *, extra: str, provider: str) -> ModuleType:
    """Import the SDK `module`, or refuse the session with a message naming the extra.

    Args:
        module: the SDK's import name (`"anthropic"`, `"openai"`).
        extra: the gen-agent extra that installs it (`"anthropic"`, `"openai"`).
        provider: the provider name for the error.

    Returns:
        The imported module.

    Raises:
        SessionStartError: reason a `BackendError` of kind `"missing_sdk"`, not retryable,
            whose message says `pip install 'gen-agent[EXTRA]'`.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        message = (
            f"the {provider} backend needs the `{module}` package: pip install 'gen-agent[{extra}]'"
        )
        reason = BackendError.new(provider, "missing_sdk", module, message=message)
        raise SessionStartError(reason, message) from exc


class SDKOptions(msgspec.Struct, frozen=True, kw_only=True):
    """The options both SDK backends take (each backend's options Struct extends it).

    Fields:
        api_key: the API key; None reads the provider's environment variable.
        base_url: the API root; None: the SDK's default.
        model: the model.
        tools: tools offered with every request: provider tool definitions (dicts, as the
            API takes them; a call of one ends the turn with the reply), and Python tools
            (`gen_agent.tools.tool`, or plain annotated functions), which the backend runs
            itself in its tool loop (see `gen_agent.backends._http.tool_loop`).
        max_steps: the most requests one turn's tool loop makes (count, >= 1; default 8).
        params: further request arguments, as given.
        timeout: the SDK timeout (seconds; also the longest wait between two stream events).
        max_retries: the SDK's own retries (count; default 0: the agent owns retries).
        default_headers: extra HTTP headers on every request.
        max_history_messages: the most messages a kept conversation holds (count).
        max_history_bytes: the most `term_size` bytes the kept messages may take (bytes).
        session_id: the session id reported in results; None mints `"<provider>-<hex>"`.
        history: a conversation to continue: `gen_agent.Message`s, oldest
            first (the stored `Response.messages` of earlier turns, concatenated; from this
            provider or another one).
        client: an SDK client of your own (`anthropic.Anthropic`, `openai.OpenAI`), used
            as is: its key, URL, timeout and retries are its own (`api_key`, `base_url`,
            `timeout`, `max_retries`, `default_headers` must not be given with it); gen_agent
            never closes it. None: the session builds its own.
        http_client: an `httpx.Client` of your own for the session's SDK client (pool,
            proxy, TLS); gen_agent never closes it. None: the session builds its own.
    """

    api_key: str | None = None
    base_url: str | None = None
    model: str
    tools: tuple[Any, ...] = ()
    max_steps: int = 8
    params: dict[str, Any] = msgspec.field(default_factory=dict)
    timeout: float = 60.0
    max_retries: int = 0
    default_headers: dict[str, str] = msgspec.field(default_factory=dict)
    max_history_messages: int = 200
    max_history_bytes: int = 4 * 1024 * 1024
    session_id: str | None = None
    history: tuple[Message, ...] = ()
    client: Any = None
    http_client: Any = None

    def __repr__(self) -> str:
        return shown_options(self)  # the API key and credential headers masked

    def __rich_repr__(self) -> list[tuple[str, Any]]:
        return rich_fields(self)


def split_tools(tools: Sequence[Any]) -> tuple[tuple[dict[str, Any], ...], tuple[Any, ...]]:
    """`(provider tool definitions, Python tools)` of a `tools` option (`gen_agent.tools`)."""
    from gen_agent._tools import as_tools

    raw = tuple(dict(t) for t in tools if isinstance(t, Mapping))
    return raw, as_tools([t for t in tools if not isinstance(t, Mapping)])


def is_tool_seq(value: Any) -> bool:
    """True for a list or tuple of tool definitions (mappings) and Python tools: each callable
    must make a valid `gen_agent.tools.Tool`, with unique names."""
    if not isinstance(value, list | tuple):
        return False
    try:
        split_tools(value)
    except (TypeError, ValueError):
        return False
    return True


SDK_CHECKS: Final[Mapping[str, Check]] = {
    "api_key": (is_text, "a non-empty str"),
    "base_url": (is_text, "a non-empty str (a URL)"),
    "model": (is_text, "a non-empty str"),
    "tools": (is_tool_seq, "a list of tool definitions (dicts) or Python tools (functions)"),
    "max_steps": (int_at_least(1), "an int >= 1 (requests)"),
    "timeout": (lambda v: is_positive_number(v) and v <= threading.TIMEOUT_MAX,
                f"a finite number > 0 (seconds), at most {threading.TIMEOUT_MAX:.0f}"),
    "max_retries": (int_at_least(0), "an int >= 0"),
    "default_headers": (is_str_map, "a dict of str to str"),
    "max_history_messages": (int_at_least(1), "an int >= 1 (messages)"),
    "max_history_bytes": (int_at_least(1), "an int >= 1 (bytes)"),
    "session_id": (is_text, "a non-empty str"),
    "history": (is_history, "a list of gen_agent.Message"),
    "client": (lambda v: not isinstance(v, str | int | float | bool | dict | list | tuple),
               "an SDK client object (e.g. anthropic.Anthropic(...))"),
    "http_client": (lambda v: callable(getattr(v, "send", None)), "an httpx.Client"),
}
"""The option table rows of `SDKOptions` but `params` (whose reserved keys differ)."""


class SDKSession(msgspec.Struct, frozen=True, kw_only=True):
    """The fields both SDK sessions have (each backend's session Struct extends it).

    Fields:
        options: the validated options.
        session_id: the id reported in results (`"<provider>-<hex>"` unless given).
        history: the kept conversation, oldest first (`Message`s; converted to the wire
            form at each request).
        turns: successful turns so far (count).
        transport: the SDK client and cancel support (shared by copies).
        tool_defs: the provider tool definitions of the `tools` option (dicts).
        python_tools: its Python tools (`gen_agent.tools.Tool`), run in the tool loop.
    """

    options: SDKOptions
    session_id: str
    history: tuple[Message, ...] = ()
    turns: int = 0
    transport: Any = None
    tool_defs: tuple[dict[str, Any], ...] = ()
    python_tools: tuple[Any, ...] = ()


class SDK(msgspec.Struct, frozen=True, kw_only=True):
    """Which SDK a backend uses, and how it is set up.

    Fields:
        provider: the provider name (`"anthropic"`), also the prefix of minted session ids.
        module: the SDK's import name, also the gen-agent extra that installs it.
        client: the name of the SDK's client class (`"Anthropic"`).
        key_env: the environment variable holding the API key (`"ANTHROPIC_API_KEY"`).
        label: the provider's name in messages (`"Anthropic"`).
    """

    provider: str
    module: str
    client: str
    key_env: str
    label: str

    def load(self) -> ModuleType:
        """`load_sdk` for this SDK (raises `SessionStartError` when it is not installed)."""
        return load_sdk(self.module, extra=self.module, provider=self.provider)

    def open(self, options: SDKOptions) -> tuple[Transport, str]:
        """Check for an API key and build a session's client; no request is made.

        Args:
            options: the validated options (`api_key`, `base_url`, `timeout`,
                `max_retries`, `default_headers`, `session_id`).

        Returns:
            `(transport, session_id)`: the session's `Transport` and its id (the
            `session_id` option, else a minted `"<provider>-<16 hex digits>"`).

        Raises:
            SessionStartError: reason a `BackendError` of kind `"missing_sdk"` or
                `"missing_api_key"` (no `api_key` option and no `key_env` variable).
        """
        sdk = self.load()
        session_id = options.session_id or f"{self.provider}-{secrets.token_hex(8)}"
        if options.client is not None:
            return Transport(sdk, lambda _: options.client, own=self._own(sdk, options)), \
                session_id
        api_key = options.api_key or os.environ.get(self.key_env)
        if not api_key:
            message = f"no {self.label} API key: give the `api_key` option or set {self.key_env}"
            reason = BackendError.new(self.provider, "missing_api_key", None, message=message)
            raise SessionStartError(reason, message)
        own_http = options.http_client

        def make_client(http_client: Any) -> Any:
            return getattr(sdk, self.client)(
                api_key=api_key,
                base_url=options.base_url,
                timeout=options.timeout,
                max_retries=options.max_retries,
                default_headers=options.default_headers or None,
                http_client=own_http if own_http is not None else http_client,
            )

        return Transport(sdk, make_client, owned_http=own_http is not None), session_id

    def _own(self, sdk: ModuleType, options: SDKOptions) -> Any:
        """The `client` option, checked: an instance of the SDK's client class, given without
        the options it already holds."""
        client = options.client
        if not isinstance(client, getattr(sdk, self.client)):
            message = f"client must be a {self.module}.{self.client}, got {type(client).__name__}"
            raise SessionStartError(("invalid_option", "client", type(client).__name__), message)
        defaults = SDKOptions(model="-")
        for key in ("api_key", "base_url", "timeout", "max_retries", "default_headers",
                    "http_client"):
            if getattr(options, key) != getattr(defaults, key):
                message = f"the {key} option cannot be given with client= (the client has its own)"
                raise SessionStartError(("invalid_option", key, "<given with client>"), message)
        return client


class StreamTranslator:
    """Base of an SDK stream translator: the reply's stream events (as dicts) in, `Event`s out.

    Subclasses set `_PROVIDER`, `_HANDLERS` (event `type` → method returning its events; other
    types produce nothing) and `_TRUNCATED` (the message of a stream that ended without an
    outcome), and may extend `_error_fields` (ids the terminal error reports) and
    `diagnostics` (what a failed turn had learned).

    Args:
        session_id: the session id put in the result.
        model: the requested model (reported unless the reply names one).

    Members: `http_status` is the status of the streamed response (set by `stream_turn`);
    `finished` is True once a terminal event was made.

    Not thread-safe: one turn, one owner.
    """

    _PROVIDER: ClassVar[str]
    _HANDLERS: ClassVar[Mapping[str, Callable[[Any, Mapping[str, Any]], list[Event]]]]
    _TRUNCATED: ClassVar[str]

    def __init__(self, session_id: str, model: str | None = None) -> None:
        self.session_id = session_id
        self.model = model
        self.finished = False
        self.http_status: int | None = None

    def translate(self, event: Mapping[str, Any]) -> list[Event]:
        """Translate one stream event (`{"type": ..., ...}`) into events.

        Returns:
            The events, in order (often none). Unknown event types produce nothing.
        """
        if self.finished:
            return []
        kind = event.get("type")
        handler = self._HANDLERS.get(kind) if isinstance(kind, str) else None
        return handler(self, event) if handler is not None else []

    def truncated(self) -> Event | None:
        """The terminal error for a stream that ended without an outcome (None if done):
        kind `"stream_truncated"`, retryable."""
        if self.finished:
            return None
        reason = BackendError.new(
            self._PROVIDER, "stream_truncated", None, retryable=True, message=self._TRUNCATED
        )
        return self.error(reason)

    def error(self, reason: BackendError) -> Event:
        """The terminal `error` event for `reason`, its diagnostics filled; ends the turn."""
        self.finished = True
        known = self.diagnostics()
        if known.get("http_status") is None:
            known["http_status"] = reason.status  # an HTTP error status, before any body
        reason = reason.with_diagnostics(**known)
        data = {"reason": reason, "session_id": self.session_id, **self._error_fields()}
        return Event.new("error", {**data, "model": self.model, "provider": self._PROVIDER})

    def diagnostics(self) -> dict[str, Any]:
        """The `Diagnostics` fields known so far (`BackendError.with_diagnostics` keywords):
        the session id and HTTP status here; subclasses add text, ids and usage."""
        return {"session_id": self.session_id, "http_status": self.http_status}

    def _error_fields(self) -> dict[str, Any]:
        return {}


def stream_turn(
    session: SDKSession,
    context: TurnContext,
    translator: StreamTranslator,
    *,
    sdk: SDK,
    create: Callable[[Any], Any],
    error_from_sdk: Callable[[BaseException, Any], BackendError | None],
) -> Iterator[Event]:
    """One streamed request: its events, ending with exactly one terminal event.

    The request is made when the stream is first read (after the previous turn's finished
    body was read to its end, `Transport.finish_parked`). The SDK makes the request and
    raises for an HTTP error status; the body is then read as bytes and decoded by
    `_sse.SSEDecoder`, never by the SDK's own decoder, so that every fault has one outcome:

    - an SDK failure → `error_from_sdk` (HTTP status, connection failure before the body);
    - the connection closed (FIN) or reset (RST) mid-body, or another failure of the HTTP
      client → kind `"transport"`, retryable; its read timeout → `"timeout"`, retryable;
    - bytes that are not an event stream, a `data:` payload that is not a JSON object, or a
      body that does not decompress (gzip garbage under `content-encoding: gzip`, also in an
      error answer the SDK reads) → `"protocol_error"`, not retryable, with the HTTP status;
    - a request body UTF-8 cannot encode (a lone surrogate) → `"invalid_request"`, not
      retryable, nothing sent (`unsendable`);
    - a failure after a cancel (of the transport or the turn) → `"cancelled"`;
    - a body that ends without an outcome → the translator's `truncated()` error.

    After the terminal event the rest of the body is not read now (the reply must not wait
    for it) but parked on the transport and read to its end by the next turn, so the SDK's
    connection pool reuses the connection.

    Args:
        session: the session (its `transport`).
        context: the `TurnContext` (its cancel signal).
        translator: the turn's fresh translator.
        sdk: the backend's `SDK`.
        create: makes the request with the SDK client; returns the SDK's stream object (its
            `response` is the HTTP response, body unread).
        error_from_sdk: the backend's one SDK exception boundary (None: not the SDK's, which
            re-raises as a task crash).

    Returns:
        A generator of `Event`s; closing it early closes the response.
    """
    transport = session.transport
    module = sdk.load()
    transport.finish_parked()
    token = transport.begin_turn()
    stream = None
    try:
        try:
            stream = create(transport.client)
        except Exception as exc:  # a kept connection the server closed while idle: once more
            if not transport.reuse_failed(exc) or transport.cancelled(token):
                raise
            logger.debug("gen_agent {} request failed on a reused connection ({}); sent again",
                         sdk.provider, type(exc).__name__)
            stream = create(transport.client)
        transport.reading(stream)
        response = stream.response
        translator.http_status = response.status_code
        decoder = SSEDecoder()
        body = response.iter_bytes()
        for chunk in body:
            for frame in decoder.feed(chunk):
                event = _frame_event(frame)
                if event is None:
                    continue
                events = translator.translate(event)
                if translator.finished:
                    transport.park(stream, body)
                    stream = None
                    yield from events
                    return
                yield from events
        decoder.finish()
        end = translator.truncated()
        if end is not None:
            yield end
    except Exception as exc:  # every failure becomes the terminal error; bugs re-raise
        if transport.cancelled(token) or context.cancelled:
            reason = BackendError.new(sdk.provider, "cancelled", None, message="turn cancelled")
            yield translator.error(reason)
            return
        mapped = _wire_error(sdk.provider, exc)
        if mapped is None:
            mapped = error_from_sdk(exc, module)
        if mapped is None:
            raise  # not a failure of the SDK or the wire: a bug, reported as a task crash
        logger.debug("gen_agent {} turn failed with {}", sdk.provider, type(exc).__name__)
        if translator.http_status is None:
            translator.http_status = transport.status
        yield translator.error(mapped)
    finally:
        if stream is not None:
            _close_quietly(stream)


class _MalformedEvent(ValueError):
    """A `data:` payload that is not a JSON object."""


def _frame_event(frame: SSEFrame) -> Mapping[str, Any] | None:
    """The JSON object a frame carries (None for an empty payload or the `[DONE]` sentinel)."""
    if frame.data == "[DONE]" or not frame.data.strip():
        return None
    try:
        value = msgspec.json.decode(frame.data)
    except msgspec.DecodeError:
        raise _MalformedEvent(f"a {frame.event!r} event's data is not JSON") from None
    if not isinstance(value, dict):
        raise _MalformedEvent(f"a {frame.event!r} event's data is not a JSON object")
    return value


def _wire_error(provider: str, exc: BaseException) -> BackendError | None:
    """A failure of the body itself (the bytes, the HTTP client reading or decompressing
    them), or of the request body (a text UTF-8 cannot encode)."""
    if isinstance(exc, SSEProtocolError | _MalformedEvent):
        return BackendError.new(provider, "protocol_error", None, message=str(exc))
    if isinstance(exc, UnicodeEncodeError):
        return unsendable(provider, exc)
    for name in ("httpx2", "httpx"):  # the SDKs' HTTP client, under either package name
        httpx = sys.modules.get(name)
        if httpx is None:
            continue
        if isinstance(exc, httpx.DecodingError):  # e.g. gzip garbage under content-encoding
            message = (f"the {provider} response body could not be decoded "
                       f"({type(exc).__name__}: its content-encoding does not match its bytes)")
            return BackendError.new(provider, "protocol_error", None, message=message)
        if isinstance(exc, httpx.TimeoutException):
            return transport_error(provider, exc, timeout=True)
        if isinstance(exc, httpx.TransportError):
            return transport_error(provider, exc, timeout=False)
    if isinstance(exc, TimeoutError):
        return transport_error(provider, exc, timeout=True)
    if isinstance(exc, OSError):
        return transport_error(provider, exc, timeout=False)
    return None


def unsendable(provider: str, exc: UnicodeEncodeError) -> BackendError:
    """The request body could not be encoded as UTF-8: kind `"invalid_request"`, not
    retryable, nothing sent.

    The SDKs encode the body as JSON with `ensure_ascii=False` and then as UTF-8, which a
    lone surrogate (U+D800..U+DFFF without its pair) cannot pass. An escaped `\\ud800` would
    be valid JSON, but both providers refuse such a body (HTTP 400, `invalid_request_error`),
    so the turn fails here with the kind that answer would have had, without the round trip.
    The message names the code point, never the text; `raw` is None (the exception holds
    the whole body, prompt included).
    """
    bad = exc.object[exc.start : exc.start + 1] if isinstance(exc.object, str) else ""
    point = f"U+{ord(bad):04X}" if bad else "a character"
    message = (f"the {provider} request was not sent: a prompt, tool result or other text of "
               f"it holds a lone surrogate ({point}), which UTF-8 cannot encode")
    return BackendError.new(provider, "invalid_request", None, retryable=False, message=message)


def connection_error(provider: str, exc: BaseException, sdk: Any) -> BackendError | None:
    """An SDK `APITimeoutError` (kind `"timeout"`) or `APIConnectionError` (`"transport"`),
    retryable; None for any other exception."""
    if isinstance(exc, sdk.APITimeoutError):
        return transport_error(provider, exc, timeout=True)
    if isinstance(exc, sdk.APIConnectionError):
        return transport_error(provider, exc, timeout=False)
    return None


def status_error(provider: str, exc: Any) -> BackendError:
    """An SDK `APIStatusError` for an HTTP error status (>= 400), as `BackendError.http`.

    Args:
        provider: the provider name.
        exc: the exception: `status_code` (int), `body` (decoded JSON or text) and
            `response.headers` (for `retry-after`).

    Returns:
        `BackendError.http(provider, status, body, headers, raw=exc)`.
    """
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    return BackendError.http(provider, exc.status_code, exc.body, headers, exc)


def transport_error(provider: str, exc: BaseException, *, timeout: bool) -> BackendError:
    """An SDK connection failure: kind `"timeout"` or `"transport"`, retryable, raw `exc`."""
    kind = "timeout" if timeout else "transport"
    message = f"{provider} request failed before an answer ({type(exc).__name__})"
    return BackendError.new(provider, kind, exc, retryable=True, message=message)


def export_history(session: SDKSession, **extra: Any) -> dict[str, Any]:
    """The resumable session of an SDK backend (its `export_session` data): the session id,
    the kept history (the turns' `Response.messages` deltas as JSON-ready dicts, oldest
    first: `msgspec.to_builtins` of each `gen_agent.Message`), the turn count
    and `extra`. A store may instead persist each turn's `Response.messages` and pass their
    concatenation as the `history` option: the two give the same session.
    """
    return {"session_id": session.session_id,
            "history": [msgspec.to_builtins(m) for m in session.history],
            "turns": session.turns, **extra}


def restored(session: SDKSession, data: Mapping[str, Any]) -> dict[str, Any]:
    """The session fields to replace from `export_history`'s `data` (validated). A history
    entry may also be an older `{"role", "content": str}` text message.

    Raises:
        ValueError: `data` is not such a record.
    """
    history = data.get("history") if isinstance(data, Mapping) else None
    if not isinstance(history, list):
        raise ValueError("an SDK session record has a list of messages as its history")
    try:
        messages = tuple(_restored_message(m) for m in history)
    except (msgspec.ValidationError, TypeError) as exc:
        raise ValueError(f"an SDK session record has a malformed message: {exc}") from None
    turns = data.get("turns", 0)
    session_id = data.get("session_id") or session.session_id
    return {"history": messages,
            "turns": turns if isinstance(turns, int) else 0,
            "session_id": session_id if isinstance(session_id, str) else session.session_id}


def _restored_message(value: Any) -> Message:
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        role = value.get("role")
        if role not in ("user", "assistant"):
            raise TypeError("a message's role is user or assistant")
        return Message(role=role, content=(TextPart(text=value["content"]),))
    return msgspec.convert(value, Message)


def with_prompt(history: tuple[Message, ...], prompt: str) -> tuple[Message, ...]:
    """The conversation to send: `history` plus the user message of `prompt`.

    A trailing user message is one a failed turn left unanswered: `prompt` replaces it.
    """
    if history and history[-1].role == "user":
        history = history[:-1]
    return (*history, user_message(prompt))


def after_loop(history: Sequence[Message], added: Sequence[Message],
               options: SDKOptions) -> tuple[Message, ...]:
    """The kept conversation after a successful turn that added `added` after the user
    message (a reply, or a tool loop's replies and tool results); see `after_reply`."""
    kept = [*history, *added]
    if not added and kept and kept[-1].role == "user":
        kept.pop()
    return trim_history(
        kept, max_messages=options.max_history_messages, max_bytes=options.max_history_bytes
    )


def after_reply(
    history: Sequence[Message], reply: Message | None, options: SDKOptions
) -> tuple[Message, ...]:
    """The kept conversation after a successful turn whose assistant message is `reply`.

    The kept history is exactly the turns' deltas (`Response.messages`) concatenated, then
    trimmed: a history rebuilt from stored deltas (the `history` option) is the same. An
    empty reply is kept too; it is left out when the history is sent (`gen_agent._conversation`).

    Args:
        history: the conversation sent, ending with the user message.
        reply: the assistant message, or None (nothing to keep: the user message is dropped).
        options: the bounds (`max_history_messages`, `max_history_bytes`).

    Returns:
        The history with the reply, trimmed (see `trim_history`).
    """
    kept = list(history)
    if reply is not None:
        kept.append(reply)
    elif kept and kept[-1].role == "user":
        kept.pop()
    return trim_history(
        kept, max_messages=options.max_history_messages, max_bytes=options.max_history_bytes
    )


def seed_history(history: Sequence[Message], options: SDKOptions) -> tuple[Message, ...]:
    """The kept conversation of a session started with the `history` option (trimmed by the
    same bounds as a live one; a trailing unanswered user message is dropped)."""
    kept = list(history)
    if kept and kept[-1].role == "user":
        kept.pop()
    return trim_history(
        kept, max_messages=options.max_history_messages, max_bytes=options.max_history_bytes
    )


def trim_history(
    messages: Sequence[Message], *, max_messages: int, max_bytes: int
) -> tuple[Message, ...]:
    """Drop the oldest messages until at most `max_messages` remain within `max_bytes`.

    Messages go in user/assistant pairs from the front, and a leading assistant message left
    over (an odd `max_messages`, e.g. 1) goes too, so the kept history always starts with a
    user message, as the providers require (it may be empty).

    Args:
        messages: the conversation, oldest first.
        max_messages: the bound on the count (>= 1).
        max_bytes: the bound on the summed `term_size` of the messages (bytes).

    Returns:
        The kept messages, oldest first (a tuple).
    """
    kept = list(messages)
    sizes = [term_size(message) for message in kept]
    total = sum(sizes)
    while len(kept) > 1 and (len(kept) > max_messages or total > max_bytes):
        drop = 2 if len(kept) > 2 else 1
        total -= sum(sizes[:drop])
        del kept[:drop], sizes[:drop]
    while kept and kept[0].role != "user":
        del kept[0]
    return tuple(kept)

