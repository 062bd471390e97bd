"""The OpenAI Responses API over agent hosts: a protocol module of `gen_agent.server`.

Routes (`routes(server)`):

- `POST /v1/responses`: run one turn. `model` names the host; `input` (a string, or user
  messages of `input_text` parts) is the prompt; `stream: true` answers server-sent events,
  `background: true` answers at once (`queued`) and the turn runs on; otherwise the answer
  is the finished response.
- `GET /v1/responses/{id}`: the response (`?stream=true` streams its events again:
  `starting_after=N` or a `Last-Event-ID: N` header continues after event N).
- `POST /v1/responses/{id}/cancel`: a running turn is interrupted with `interrupt_request`,
  a queued one removed with `cancel_request` (never a bare interrupt); the answer is the
  response with status `cancelled`.
- `GET /v1/models`: the hosts, as models.

Which conversation (host key) a request continues: `conversation` (a string or `{"id"}`) is
the key itself; `previous_response_id` continues that response's key, and only from the
key's latest response (an older one would fork the conversation: `400`,
`previous_response_not_latest`); neither starts a new key (the response's id). Keys are
always inside the principal's tenant (`Server.tenant_key`), and a response id of another
tenant is `404` like an unknown one.

Items: the reply is `message` items (`output_text`; a `text` event with
`message_boundary` starts a new message). A tool the agent runs itself is an `mcp_call`
item (`server_label` the host's name) holding its `arguments` and its `output` (or
`error`): a server-side tool, never a `function_call` for the client to run. Responses and
events are `openai.types.responses` models, serialized with `model_dump_json`.

Every event carries `sequence_number` (from 1) and the same SSE `id:`; the events of a turn are
a pure function of its agent events, so a reconnect rebuilds them and skips the ones seen.

Mirrors: nothing in the Elixir original.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Annotated, Any

import msgspec
from loguru import logger
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from gen_agent._errors import AgentDown, AgentStartError, CallTimeout, RequestError, TurnError
from gen_agent._event import Event
from gen_agent._output import check_output_type
from gen_agent._request_options import RequestOptions
from gen_agent.server._auth import Principal
from gen_agent.server._core import Server, error_response, turn_error_status

__all__ = ["routes"]

_STATE = "gen_agent.server.responses"
_ACCEPTED = frozenset({
    "model", "input", "stream", "background", "previous_response_id", "conversation",
    "text", "metadata", "store", "user", "safety_identifier", "prompt_cache_key",
    "include", "tools", "tool_choice", "parallel_tool_calls", "truncation", "stream_options",
})
_KEEP_EVENTS = 256  # finished responses whose agent events stay for a reconnect
_SUBSCRIBER_QUEUE = 1024  # events a slow reader may be behind before it is dropped


class _BadRequest(Exception):
    def __init__(self, status: int, message: str, *, code: str | None = None,
                 param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param


class _Record:
    """One response: where it runs, its agent events so far, its outcome."""

    __slots__ = ("agent_events", "conversation", "created_at", "done", "error", "host", "id",
                 "key", "metadata", "output_type", "parsed", "principal", "ref", "response",
                 "status", "subscribers", "task", "text_config", "usage")

    def __init__(self, rid: str, principal: Principal, host: str, key: str, *,
                 metadata: dict[str, str] | None, text_config: dict[str, Any] | None,
                 output_type: Any, conversation: str | None) -> None:
        self.id, self.principal, self.host, self.key = rid, principal, host, key
        self.created_at = float(int(time.time()))
        self.metadata = metadata
        self.text_config = text_config
        self.output_type = output_type
        self.conversation = conversation
        self.status = "queued"
        self.ref: Any = None
        self.agent_events: list[Event] | None = []
        self.response: Any = None  # the final gen_agent Response
        self.error: tuple[str, str] | None = None  # (code, message), content-free
        self.usage: dict[str, Any] | None = None
        self.parsed: Any = None
        self.done = asyncio.Event()
        self.subscribers: list[asyncio.Queue[Any]] = []
        self.task: asyncio.Task[None] | None = None


class _Book:
    """The server's responses: by id, the latest per key, and by idempotency key."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.records: OrderedDict[str, _Record] = OrderedDict()
        self.latest: dict[tuple[str, str], str] = {}  # (host, tenant key) -> response id
        self.idempotent: OrderedDict[tuple[str, str], str] = OrderedDict()

    def add(self, record: _Record, tenant_key: str) -> None:
        self.records[record.id] = record
        self.latest[(record.host, tenant_key)] = record.id
        while len(self.records) > self.limit:
            old_id, old = next(iter(self.records.items()))
            if not old.done.is_set():
                self.records.move_to_end(old_id)  # a running one is never dropped
                break
            del self.records[old_id]
        finished = [r for r in self.records.values() if r.done.is_set()
                    and r.agent_events is not None]
        for old in finished[:-_KEEP_EVENTS] if len(finished) > _KEEP_EVENTS else ():
            old.agent_events = None
        while len(self.idempotent) > self.limit:
            self.idempotent.popitem(last=False)

    def get(self, principal: Principal, rid: str) -> _Record | None:
        record = self.records.get(rid)
        if record is None or record.principal.tenant != principal.tenant:
            return None  # another tenant's id is as unknown as a made-up one
        return record


def _book(server: Server) -> _Book:
    book = server.state.get(_STATE)
    if book is None:
        book = server.state[_STATE] = _Book(server.limits.max_responses)
    return book  # type: ignore[no-any-return]


# ---------------------------------------------------------------------- the request
def _prompt_of(value: Any) -> str:
    if isinstance(value, str):
        if not value:
            raise _BadRequest(400, "input must not be empty", param="input")
        return value
    if not isinstance(value, list) or not value:
        raise _BadRequest(400, "input must be a string or a non-empty list of messages",
                          param="input")
    parts: list[str] = []
    for item in value:
        if not isinstance(item, dict) or item.get("type", "message") != "message":
            raise _BadRequest(400, "only message items are supported in input (the agent "
                              "runs its own tools)", code="unsupported_input", param="input")
        if item.get("role") != "user":
            raise _BadRequest(400, "only user messages are supported in input (the agent "
                              "keeps its own conversation and instructions)",
                              code="unsupported_input", param="input")
        content = item.get("content")
        if isinstance(content, str):
            parts.append(content)
            continue
        if not isinstance(content, list):
            raise _BadRequest(400, "a message's content must be a string or a list",
                              param="input")
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "input_text" or not (
                    isinstance(part.get("text"), str)):
                raise _BadRequest(400, "only input_text content is supported",
                                  code="unsupported_input", param="input")
            parts.append(part["text"])
    prompt = "\n\n".join(parts)
    if not prompt:
        raise _BadRequest(400, "input must not be empty", param="input")
    return prompt


def _output_of(text: Any) -> tuple[Any, dict[str, Any] | None]:
    """`(output type for the library, the text config to echo)` of `text`."""
    if text is None:
        return None, None
    if not isinstance(text, dict):
        raise _BadRequest(400, "text must be an object", param="text")
    fmt = text.get("format")
    if fmt is None or (isinstance(fmt, dict) and fmt.get("type") == "text"):
        return None, text
    if not isinstance(fmt, dict):
        raise _BadRequest(400, "text.format must be an object", param="text.format")
    if fmt.get("type") == "json_object":
        return dict[str, Any], text
    if fmt.get("type") == "json_schema":
        schema = fmt.get("schema")
        name = fmt.get("name")
        if not isinstance(schema, dict) or not isinstance(name, str):
            raise _BadRequest(400, "text.format json_schema needs a name and a schema",
                              param="text.format")
        # The provider gets the client's schema as is; the reply is validated as a JSON
        # value of the schema's root type.
        roots: dict[Any, Any] = {"object": dict[str, Any], "array": list[Any]}
        root = roots.get(schema.get("type"), Any)
        return Annotated[root, msgspec.Meta(title=name, extra_json_schema=schema)], text
    raise _BadRequest(400, "text.format.type must be text, json_object or json_schema",
                      param="text.format")


def _key_of(server: Server, book: _Book, principal: Principal, host: str,
            body: dict[str, Any], rid: str) -> tuple[str, str | None]:
    """`(key inside the tenant, conversation id or None)` for a new response."""
    previous = body.get("previous_response_id")
    conversation = body.get("conversation")
    if previous is not None and conversation is not None:
        raise _BadRequest(400, "give previous_response_id or conversation, not both",
                          param="previous_response_id")
    if conversation is not None:
        if isinstance(conversation, dict):
            conversation = conversation.get("id")
        if not isinstance(conversation, str) or not conversation or len(conversation) > 256:
            raise _BadRequest(400, "conversation must be an id (a string of 1..256 "
                              "characters) or {\"id\": ...}", param="conversation")
        return f"conv_{conversation}", conversation
    if previous is not None:
        if not isinstance(previous, str):
            raise _BadRequest(400, "previous_response_id must be a string",
                              param="previous_response_id")
        record = book.get(principal, previous)
        if record is None:
            raise _BadRequest(400, f"previous response {previous!r} not found",
                              code="previous_response_not_found",
                              param="previous_response_id")
        if record.host != host:
            raise _BadRequest(400, "previous_response_id belongs to another model",
                              param="previous_response_id")
        latest = book.latest.get((host, server.tenant_key(principal, record.key)))
        if latest != previous:
            raise _BadRequest(400, "previous_response_id is not the latest response of its "
                              "conversation (continuing from an older one would fork it)",
                              code="previous_response_not_latest",
                              param="previous_response_id")
        return record.key, record.conversation
    return rid, None


# ---------------------------------------------------------------------- building the answer
def _types() -> Any:
    from openai.types import responses as types

    return types


def _usage(usage: dict[str, Any] | None) -> Any:
    if not usage:
        return None
    types = _types()
    inp = int(usage.get("input_tokens") or 0)
    out = int(usage.get("output_tokens") or 0)
    cached = int(usage.get("cache_read_input_tokens") or usage.get("cached_tokens") or 0)
    reasoning = int(usage.get("reasoning_tokens") or 0)
    return types.ResponseUsage(
        input_tokens=inp, output_tokens=out, total_tokens=inp + out,
        input_tokens_details={"cached_tokens": cached, "cache_write_tokens": int(
            usage.get("cache_creation_input_tokens") or 0)},
        output_tokens_details={"reasoning_tokens": reasoning})


class _Translator:
    """Agent events -> Responses stream events and output items, deterministically."""

    def __init__(self, record: _Record) -> None:
        self.record = record
        self.seq = 0
        self.items: list[Any] = []
        self._open: Any = None  # the message item being written: (index, id, [texts])
        self._calls: dict[str, int] = {}  # tool_use id -> output index
        self._n = 0

    def _id(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}_{self.record.id[5:]}{self._n:04d}"

    def _event(self, name: str, **fields: Any) -> Any:
        self.seq += 1
        return getattr(_types(), name)(sequence_number=self.seq, **fields)

    def response(self, status: str) -> Any:
        record, types = self.record, _types()
        error = None
        if record.error is not None and status == "failed":
            error = types.ResponseError(code="server_error", message=record.error[1])
        conversation = None if record.conversation is None else {"id": record.conversation}
        return types.Response(
            id=record.id, object="response", created_at=record.created_at, model=record.host,
            status=status, output=list(self.items), parallel_tool_calls=False,
            tool_choice="auto", tools=[], metadata=record.metadata, error=error,
            usage=_usage(record.usage) if status == "completed" else None,
            text=record.text_config, conversation=conversation,
            background=None)

    def start(self) -> list[Any]:
        return [self._event("ResponseCreatedEvent", type="response.created",
                            response=self.response("in_progress")),
                self._event("ResponseInProgressEvent", type="response.in_progress",
                            response=self.response("in_progress"))]

    def _close_message(self) -> list[Any]:
        if self._open is None:
            return []
        index, item_id, texts = self._open
        self._open = None
        types = _types()
        text = "".join(texts)
        part = types.ResponseOutputText(type="output_text", text=text, annotations=[])
        item = types.ResponseOutputMessage(id=item_id, type="message", role="assistant",
                                           status="completed", content=[part])
        self.items[index] = item
        return [
            self._event("ResponseTextDoneEvent", type="response.output_text.done",
                        item_id=item_id, output_index=index, content_index=0, text=text,
                        logprobs=[]),
            self._event("ResponseContentPartDoneEvent", type="response.content_part.done",
                        item_id=item_id, output_index=index, content_index=0, part=part),
            self._event("ResponseOutputItemDoneEvent", type="response.output_item.done",
                        output_index=index, item=item),
        ]

    def feed(self, event: Event) -> list[Any]:
        kind, data = event.kind, event.data
        if kind == "text":
            text = data.get("text")
            if not isinstance(text, str):
                return []
            out = self._close_message() if data.get("message_boundary") else []
            if not text:
                return out
            types = _types()
            if self._open is None:
                index, item_id = len(self.items), self._id("msg")
                item = types.ResponseOutputMessage(id=item_id, type="message",
                                                   role="assistant", status="in_progress",
                                                   content=[])
                self.items.append(item)
                self._open = (index, item_id, [])
                out += [
                    self._event("ResponseOutputItemAddedEvent",
                                type="response.output_item.added", output_index=index,
                                item=item),
                    self._event("ResponseContentPartAddedEvent",
                                type="response.content_part.added", item_id=item_id,
                                output_index=index, content_index=0,
                                part=types.ResponseOutputText(type="output_text", text="",
                                                              annotations=[])),
                ]
            index, item_id, texts = self._open
            texts.append(text)
            out.append(self._event("ResponseTextDeltaEvent", type="response.output_text.delta",
                                   item_id=item_id, output_index=index, content_index=0,
                                   delta=text, logprobs=[]))
            return out
        if kind == "tool_use":
            out = self._close_message()
            call_id = str(data.get("id") or self._n)
            item = self._mcp_call(self._id("mcp"), data, status="in_progress")
            index = len(self.items)
            self.items.append(item)
            self._calls[call_id] = index
            out += [
                self._event("ResponseOutputItemAddedEvent", type="response.output_item.added",
                            output_index=index, item=item),
                self._event("ResponseMcpCallInProgressEvent",
                            type="response.mcp_call.in_progress", item_id=item.id,
                            output_index=index),
            ]
            return out
        if kind == "tool_result":
            if str(data.get("tool_use_id")) not in self._calls:
                return []
            index = self._calls.pop(str(data.get("tool_use_id")))
            old = self.items[index]
            failed = bool(data.get("is_error"))
            content = _content_text(data.get("content"))
            item = old.model_copy(update={"status": "failed" if failed else "completed",
                                          "output": content})
            self.items[index] = item
            name = ("ResponseMcpCallFailedEvent", "response.mcp_call.failed") if failed else (
                "ResponseMcpCallCompletedEvent", "response.mcp_call.completed")
            return [self._event(name[0], type=name[1], item_id=item.id, output_index=index),
                    self._event("ResponseOutputItemDoneEvent",
                                type="response.output_item.done", output_index=index,
                                item=item)]
        return []

    def _mcp_call(self, item_id: str, data: dict[str, Any], *, status: str) -> Any:
        arguments = data.get("input")
        return _types().response_output_item.McpCall(
            id=item_id, type="mcp_call", name=str(data.get("name") or "tool"),
            server_label=self.record.host, status=status,
            arguments=msgspec.json.encode(arguments).decode() if arguments is not None
            else "{}")

    def finish(self) -> list[Any]:
        out = self._close_message()
        record = self.record
        for index in self._calls.values():  # calls without a result: left incomplete
            self.items[index] = self.items[index].model_copy(update={"status": "incomplete"})
        self._calls.clear()
        status = record.status
        if status == "completed":
            out.append(self._event("ResponseCompletedEvent", type="response.completed",
                                   response=self.response("completed")))
        elif status == "incomplete":
            out.append(self._event("ResponseIncompleteEvent", type="response.incomplete",
                                   response=self.response("incomplete")))
        else:  # failed or cancelled
            out.append(self._event("ResponseFailedEvent", type="response.failed",
                                   response=self.response(status)))
        return out


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [c.get("text", "") for c in content if isinstance(c, dict)]
        if all(isinstance(t, str) for t in texts) and texts:
            return "".join(texts)
    try:
        return msgspec.json.encode(content).decode()
    except (TypeError, msgspec.EncodeError):
        return str(content)


def _replay(record: _Record) -> list[Any]:
    """Every stream event of `record` so far (rebuilt from its agent events)."""
    translator = _Translator(record)
    out = translator.start()
    for event in record.agent_events or ():
        out += translator.feed(event)
    if record.done.is_set():
        out += translator.finish()
    return out


def _final(record: _Record) -> Any:
    """The `Response` model of `record` now."""
    translator = _Translator(record)
    for event in record.agent_events or ():
        translator.feed(event)
    if record.done.is_set():
        translator.finish()
        return translator.response(record.status)
    return translator.response(record.status)


# ---------------------------------------------------------------------- running a turn
def _outcome_of(exc: BaseException) -> tuple[str, tuple[str, str]]:
    """`(status, (code, message))` of a failed turn, content-free."""
    if isinstance(exc, TurnError):
        head = exc.reason[0] if isinstance(exc.reason, tuple) and exc.reason else exc.reason
        if head in ("interrupted", "cancelled"):
            return "cancelled", ("cancelled", "the response was cancelled")
        _status, code, message, _headers = turn_error_status(exc.reason)
        return "failed", (code, message)
    if isinstance(exc, AgentDown):
        return "failed", ("agent_down", "the agent stopped during the turn")
    if isinstance(exc, CallTimeout):
        return "failed", ("timeout", "the turn timed out")
    return "failed", ("turn_failed", "the turn failed")


async def _run(server: Server, record: _Record, turn: Any) -> None:
    """Read the turn to its end, keeping its agent events and fanning out stream events."""
    translator = _Translator(record)
    translator.start()  # the subscribers got these from _replay
    try:
        try:
            async for event in turn:
                if record.status == "queued":
                    record.status = "in_progress"
                if record.agent_events is not None:
                    record.agent_events.append(event)
                _publish(record, translator.feed(event))
            response = await turn.response()
            record.response = response
            record.usage = response.usage
            record.parsed = response.parsed
            record.status = "completed"
        except Exception as exc:  # noqa: BLE001 - every failure becomes the response's status
            record.status, record.error = _outcome_of(exc)
        finally:
            await turn.__aexit__(None, None, None)
    finally:
        record.done.set()
        # Content-free: ids, the tenant, the outcome; never a prompt, a reply or a reason.
        logger.info("response {} of tenant {} on {}: {}", record.id, record.principal.tenant,
                    record.host, record.status if record.error is None else
                    f"{record.status} ({record.error[0]})")
        _publish(record, translator.finish())
        for queue in record.subscribers:
            queue.put_nowait(None)
        record.subscribers.clear()


def _publish(record: _Record, events: list[Any]) -> None:
    if not events:
        return
    for queue in list(record.subscribers):
        if queue.qsize() > _SUBSCRIBER_QUEUE:  # too slow: dropped; it reconnects from its id
            record.subscribers.remove(queue)
            queue.put_nowait(None)
            continue
        for event in events:
            queue.put_nowait(event)


def _sse(event: Any) -> bytes:
    return (f"id: {event.sequence_number}\nevent: {event.type}\ndata: "
            f"{event.model_dump_json(exclude_none=True)}\n\n").encode()


async def _events(record: _Record, after: int) -> AsyncIterator[bytes]:
    # Events that are ready together go out in one write: one send per wake-up, not per
    # event (each send is a syscall and, on a loaded machine, a scheduling point).
    queue: asyncio.Queue[Any] = asyncio.Queue()
    backlog = _replay(record)
    if not record.done.is_set():
        record.subscribers.append(queue)
    try:
        chunk = b"".join(_sse(e) for e in backlog if e.sequence_number > after)
        if chunk:
            yield chunk
        last = max(after, backlog[-1].sequence_number if backlog else 0)
        if record.done.is_set():
            return
        ended = False
        while not ended:
            ready = [await queue.get()]
            while not queue.empty():
                ready.append(queue.get_nowait())
            out = []
            for event in ready:
                if event is None:
                    ended = True
                    break
                if event.sequence_number > last:
                    out.append(_sse(event))
            if out:
                yield b"".join(out)
    finally:
        with contextlib.suppress(ValueError):
            record.subscribers.remove(queue)


def _stream_response(record: _Record, after: int) -> StreamingResponse:
    return StreamingResponse(_events(record, after), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


def _json(model: Any, status: int = 200) -> Response:
    return Response(model.model_dump_json(exclude_none=True), status_code=status,
                    media_type="application/json")


def _bad(exc: _BadRequest) -> Response:
    return error_response(exc.status, exc.message, code=exc.code, param=exc.param)


def _trace_context(request: Request) -> Any:
    traceparent = request.headers.get("traceparent")
    if not traceparent:
        return None
    try:
        from opentelemetry import propagate
    except ImportError:
        return None
    carrier = {"traceparent": traceparent}
    state = request.headers.get("tracestate")
    if state:
        carrier["tracestate"] = state
    context = propagate.extract(carrier)
    return context or None


# ---------------------------------------------------------------------- the routes
async def _create(request: Request) -> Response:
    server: Server = request.app.state.gen_agent_server
    principal = server.principal(request)
    book = _book(server)
    try:
        body = msgspec.json.decode(await request.body())
    except msgspec.DecodeError:
        return error_response(400, "the body must be JSON")
    if not isinstance(body, dict):
        return error_response(400, "the body must be a JSON object")
    idem = request.headers.get("idempotency-key")
    if idem is not None:
        if not 0 < len(idem) <= 256:
            return error_response(400, "Idempotency-Key must have 1..256 characters")
        first = book.idempotent.get((principal.tenant, idem))
        record = None if first is None else book.get(principal, first)
        if record is not None:
            return await _answer(record, bool(body.get("stream")), bool(body.get("background")))
    try:
        unknown = sorted(set(body) - _ACCEPTED)
        if unknown:
            raise _BadRequest(400, f"unsupported parameter: {unknown[0]}",
                              code="unsupported_parameter", param=unknown[0])
        if body.get("tools"):
            raise _BadRequest(400, "client tools are not supported: the agent runs its own",
                              code="unsupported_parameter", param="tools")
        model = body.get("model")
        if not isinstance(model, str) or model not in server.hosts:
            raise _BadRequest(404, f"the model {model!r} does not exist; served: "
                              f"{', '.join(sorted(server.hosts))}", code="model_not_found",
                              param="model")
        prompt = _prompt_of(body.get("input"))
        output_type, text_config = _output_of(body.get("text"))
        metadata = body.get("metadata")
        if metadata is not None and not (isinstance(metadata, dict) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
            raise _BadRequest(400, "metadata must map strings to strings", param="metadata")
        if output_type is not None:
            try:
                check_output_type(output_type, "responses")
            except TypeError:
                raise _BadRequest(400, "text.format's schema cannot be used",
                                  param="text.format") from None
        rid = "resp_" + secrets.token_hex(16)
        key, conversation = _key_of(server, book, principal, model, body, rid)
    except _BadRequest as exc:
        return _bad(exc)
    record = _Record(rid, principal, model, key, metadata=metadata, text_config=text_config,
                     output_type=output_type, conversation=conversation)
    trace = _trace_context(request)
    options = None if trace is None else RequestOptions(trace_context=trace)
    try:
        turn = server.stream(principal, model, key, prompt, options=options,
                             output=output_type)
        await turn.__aenter__()
    except (TurnError, AgentStartError, CallTimeout, RequestError) as exc:
        # RequestError: a refusal with a reason (e.g. "busy" from a host whose busy policy
        # is "reject"); TurnError: the host's and the server's own refusals.
        reason = getattr(exc, "reason", None) if not isinstance(exc, CallTimeout) else (
            "overloaded",)
        status, code, message, headers = turn_error_status(reason)
        if isinstance(exc, AgentStartError):
            status, code, message, headers = 503, "unavailable", (
                "the conversation is held by another process; retry later"), {
                    "Retry-After": "1"}
        kind = "rate_limit_error" if status == 429 else (
            "server_error" if status >= 500 else "invalid_request_error")
        return error_response(status, message, code=code, kind=kind, headers=headers)
    record.ref = turn.ref
    book.add(record, server.tenant_key(principal, key))
    if idem is not None:
        book.idempotent[(principal.tenant, idem)] = rid
    record.task = asyncio.get_running_loop().create_task(_run(server, record, turn))
    return await _answer(record, bool(body.get("stream")), bool(body.get("background")))


async def _answer(record: _Record, stream: bool, background: bool) -> Response:
    if stream:
        return _stream_response(record, 0)
    if not background:
        await record.done.wait()
    return _json(_final(record))


def _found(request: Request) -> tuple[Server, _Record | None]:
    server: Server = request.app.state.gen_agent_server
    return server, _book(server).get(server.principal(request), request.path_params["rid"])


def _not_found(rid: str) -> Response:
    return error_response(404, f"no response with id {rid!r}", code="not_found")


async def _retrieve(request: Request) -> Response:
    _server, record = _found(request)
    if record is None:
        return _not_found(request.path_params["rid"])
    if request.query_params.get("stream") in ("true", "1"):
        if record.agent_events is None:
            return error_response(410, "this response's events are no longer kept",
                                  code="events_expired")
        after_text = (request.query_params.get("starting_after")
                      or request.headers.get("last-event-id") or "0")
        try:
            after = int(after_text)
        except ValueError:
            return error_response(400, "starting_after / Last-Event-ID must be an integer")
        return _stream_response(record, after)
    return _json(_final(record))


async def _cancel(request: Request) -> Response:
    server, record = _found(request)
    if record is None:
        return _not_found(request.path_params["rid"])
    if not record.done.is_set():
        host = server.host(record.host)
        tenant_key = server.tenant_key(record.principal, record.key)
        for _attempt in range(3):  # it may start between the two calls: look again
            answer = await host.aio.interrupt_request(tenant_key, record.ref, 5.0)
            if answer == "accepted":
                break
            answer = await host.aio.cancel_request(tenant_key, record.ref, 5.0)
            if answer != "current":
                break
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(10.0):
                await record.done.wait()
    if record.status != "cancelled":
        return error_response(400, f"the response is {record.status}; only a queued or "
                              "running response can be cancelled", code="not_cancellable")
    return _json(_final(record))


async def _models(request: Request) -> JSONResponse:
    server: Server = request.app.state.gen_agent_server
    created = 0
    return JSONResponse({"object": "list", "data": [
        {"id": name, "object": "model", "created": created, "owned_by": "gen_agent"}
        for name in sorted(server.hosts)]})


def routes(server: Server) -> list[BaseRoute]:
    """The Responses API routes over `server` (see the module docstring).

    Raises:
        ImportError: the `openai` package (its `types.responses` models) is missing.
    """
    _book(server)
    _types()  # imported now, not inside the event loop at the first request (~1-2 s)
    return [
        Route("/v1/responses", _create, methods=["POST"]),
        Route("/v1/responses/{rid}", _retrieve, methods=["GET"]),
        Route("/v1/responses/{rid}/cancel", _cancel, methods=["POST"]),
        Route("/v1/models", _models, methods=["GET"]),
    ]
