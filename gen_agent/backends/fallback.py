"""`Fallback`: try the next provider when a turn fails *before any output*, with a trail.

    class Assistant(GenAgent):
        def init_agent(self, opts):
            return {"hops": [(AnthropicAPI, {"model": "claude-sonnet-4-5"}),
                             (OpenAIResponses, {"model": "gpt-5", "store": False})]}, None

    gen_agent.start_agent(Assistant, name="helper", backend=Fallback)

Each turn starts on the first hop (the primary). When a hop's turn ends with a *retryable*
`BackendError` (an overload, a rate limit, a transport fault...) before it streamed any output
— a `text`, `tool_use` or `tool_result` event; `session`, `usage` and provider-specific events
do not count — the same prompt goes to the next hop, and so on. Once output has started, the
turn's outcome is that hop's, whatever it is: nothing the model said or did is ever repeated.
A non-retryable error (a bad request, an authentication failure) ends the turn at once.

The trail says what happened: every turn's terminal data carries `"fallback"` (so
`response.extra["fallback"]`), `{"fired": bool, "hops": [{"provider", "model", "outcome",
"error_kind", "duration_ms"}, ...]}`, and an event of kind `"fallback"` precedes the output of
a turn that fell back; when every hop fails, the last hop's error is the turn's reason and its
`diagnostics.fallback` holds the trail.

Limits follow the provider, not the agent: each hop has its own `ProviderLimit` (the
`limits` option, one per hop; by default the process's shared limit named
`Fallback.limit_key(backend, options)`: the provider plus a fingerprint of its credentials
and URL, with no bounds). A hop asks its limit for a permit before its request, without
waiting: a hop whose limit has none free (held by a `retry-after`, or at its caps) is
*skipped*, recorded in the trail with `outcome: "skipped"`, `error_kind: "rate_limited"`
and `held_until_ms` (the hold's end, Unix epoch milliseconds; None when only a cap is full).
A hop whose request fails with a `retry_after` holds its own limit (so later turns skip it
while the hold lasts), and the tokens a hop spent count against its own limit. When no hop
can be tried, the turn fails at once (it never waits inside the turn) with a `rate_limited`
`BackendError` of the hop whose hold ends first, its `retry_after` the seconds left (the
agent's retry policy or `retry_after_ms` tell when to ask again).

The conversation continues on whichever hop answered: after a successful turn every hop's
history gets the exchange, so the next turn (on the primary again) sees it. Hops are the HTTP
backends (`AnthropicAPI`, `OpenAIResponses`, or any backend with an in-process history); the
CLI backends keep their own session stores and cannot be hops.

Mirrors: nothing in the Elixir original; the fallback chains of AgentOS and pydantic-ai's
`FallbackModel`, restricted to faults before output so that no side effect repeats.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
from collections.abc import Iterator, Mapping
from typing import Any

import msgspec

from gen_agent._event import Event
from gen_agent._limits import ProviderLimit
from gen_agent.backend import Backend, BackendError, SessionStartError, TurnContext

__all__ = [
    "OUTPUT_KINDS",
    "Fallback",
    "FallbackHop",
    "FallbackSession",
    "FallbackTrail",
]

OUTPUT_KINDS = frozenset({"text", "tool_use", "tool_result"})
"""Event kinds that count as output: once one streamed, the turn never falls back."""

_CLI_BACKENDS = frozenset({"ClaudeCLI", "CodexCLI"})


class FallbackHop(msgspec.Struct, frozen=True, kw_only=True):
    """One hop of a turn's trail.

    Fields:
        provider: the hop backend's provider name (e.g. `"anthropic"`), or its class name.
        model: the model the hop asked for, or None.
        outcome: `"ok"` (it answered), `"error"` (it failed; the next hop was tried unless
            output had started or the error was not retryable), `"skipped"` (its limit had
            no permit free: held by a `retry-after`, or at its caps; nothing was sent).
        error_kind: the `BackendError.kind` of a failed hop (None when it answered;
            `"rate_limited"` for a skipped one).
        duration_ms: wall time of the hop's attempt (milliseconds).
        held_until_ms: a skipped hop's hold end (Unix epoch milliseconds), or None.
    """

    provider: str
    model: str | None
    outcome: str
    error_kind: str | None = None
    duration_ms: int = 0
    held_until_ms: int | None = None


class FallbackTrail(msgspec.Struct, frozen=True, kw_only=True):
    """What a turn did across the hops: `fired` (a hop after the first was tried) and
    `hops` (every hop tried, in order)."""

    fired: bool
    hops: tuple[FallbackHop, ...]


class _Hop(msgspec.Struct, frozen=True):
    backend: Any
    session: Any
    limit: Any = None  # its ProviderLimit


class _Pending:
    """Filled while a turn's stream is read: which hop answered, and the hop sessions after
    the prompt (so `update_session` can bring every hop's history up to date)."""

    __slots__ = ("answered", "prompted")

    def __init__(self) -> None:
        self.answered: int | None = None
        self.prompted: dict[int, Any] = {}


class FallbackSession(msgspec.Struct, frozen=True, kw_only=True):
    """The hops' sessions (immutable value; the per-turn bookkeeping inside is the turn
    task's own).

    Fields:
        hops: each hop's backend and current session, primary first.
        session_id: the primary hop's session id (reported in results).
        prompt: the prompt of the turn in flight (for the hops that did not answer it).
    """

    hops: tuple[_Hop, ...]
    session_id: str | None = None
    prompt: str | None = None
    pending: Any = None


def _with_prompt(session: Any, prompt: str) -> Any:
    """`session` with `prompt` as its conversation's new user message (an SDK session keeps
    its conversation in `history`), as its own `prompt` would have left it."""
    from gen_agent.backends._http.sdk import with_prompt

    history = getattr(session, "history", None)
    if history is None:
        return session
    return msgspec.structs.replace(session, history=with_prompt(history, prompt))


def _shown_hops(value: Any) -> Any:
    """A refused `hops` value as its reason may show it: each hop's options with their
    secrets masked (`_option_checks.masked`)."""
    from gen_agent.backends._option_checks import masked

    if not isinstance(value, list | tuple):
        return masked("", value)
    shown: list[Any] = []
    for hop in value:
        if isinstance(hop, list | tuple) and len(hop) == 2 and isinstance(hop[1], Mapping):
            options = {k: masked(k, v) for k, v in hop[1].items()}
            hop = (hop[0], options) if isinstance(hop, tuple) else [hop[0], options]
        shown.append(hop)
    return tuple(shown) if isinstance(value, tuple) else shown


def _provider(backend: Any) -> str:
    name = getattr(backend, "PROVIDER", None)
    return name if isinstance(name, str) else getattr(backend, "__name__", type(backend).__name__)


def _model(session: Any) -> str | None:
    options = getattr(session, "options", None)
    model = getattr(options, "model", None)
    return model if isinstance(model, str) else None


class Fallback(Backend):
    """A backend over several HTTP backends (hops), tried in order for each turn; pass the
    class itself as the agent's backend.

    Backend options:
        hops: a sequence of `(backend, options)` pairs, primary first (at least two).

    Errors: at start, `SessionStartError` with `("invalid_option", "hops", value)` for a bad
    `hops`, `("cli_backend_cannot_be_a_hop", name)` for a CLI backend,
    `("hop_needs_local_history", index)` for a hop whose conversation lives on the provider
    (`OpenAIResponses` with `store=True`: give it `store=False`), or the failing hop's own
    start reason wrapped as `("hop_start_failed", index, reason)`.

    Mirrors: nothing in the contract (see the module docstring).
    """

    @classmethod
    def start_session(cls, opts: Mapping[str, Any]) -> FallbackSession:
        """Start every hop's session (no request is made).

        Raises:
            SessionStartError: see the class docstring.
        """
        unknown = set(opts) - {"hops", "limits"}
        if unknown:
            raise SessionStartError(("unknown_option", sorted(unknown)[0]))
        hops_opt = opts.get("hops")
        if (not isinstance(hops_opt, (list, tuple)) or len(hops_opt) < 2
                or not all(isinstance(h, (list, tuple)) and len(h) == 2 for h in hops_opt)):
            raise SessionStartError(("invalid_option", "hops", _shown_hops(hops_opt)))
        limits_opt = opts.get("limits")
        if limits_opt is None:
            limits_opt = (None,) * len(hops_opt)
        if (not isinstance(limits_opt, (list, tuple)) or len(limits_opt) != len(hops_opt)
                or not all(x is None or isinstance(x, ProviderLimit) for x in limits_opt)):
            raise SessionStartError(("invalid_option", "limits", repr(limits_opt)[:80]),
                                    "limits must be one ProviderLimit (or None) per hop")
        started: list[_Hop] = []
        try:
            for index, (backend, hop_opts) in enumerate(hops_opt):
                name = getattr(backend, "__name__", type(backend).__name__)
                if name in _CLI_BACKENDS:
                    raise SessionStartError(("cli_backend_cannot_be_a_hop", name))
                try:
                    session = backend.start_session(dict(hop_opts))
                except SessionStartError as exc:
                    raise SessionStartError(("hop_start_failed", index, exc.reason)) from exc
                limit = limits_opt[index]
                if limit is None:
                    limit = ProviderLimit.shared(cls.limit_key(backend, hop_opts))
                started.append(_Hop(backend, session, limit))
                if getattr(getattr(session, "options", None), "store", False) is True:
                    # its conversation lives on the provider: another hop's answer cannot
                    # join it, so the next turn on it would miss that exchange
                    raise SessionStartError(("hop_needs_local_history", index))
        except BaseException:
            for hop in started:
                hop.backend.terminate_session(hop.session)
            raise
        return FallbackSession(hops=tuple(started),
                               session_id=getattr(started[0].session, "session_id", None))

    @staticmethod
    def limit_key(backend: Any, options: Mapping[str, Any]) -> str:
        """The name of a hop's default `ProviderLimit`: `"<provider>:<12 hex digits>"`, the
        digits a SHA-256 fingerprint of its credentials and URL (the `api_key` option, else
        the `<PROVIDER>_API_KEY` variable; `base_url`; a `client=`'s own key and URL), so
        agents using one key share one limit. The key itself never shows."""
        provider = _provider(backend)
        client = options.get("client")
        if client is not None:
            key, url = getattr(client, "api_key", None), getattr(client, "base_url", None)
        else:
            key = options.get("api_key") or os.environ.get(f"{provider.upper()}_API_KEY")
            url = options.get("base_url")
        digest = hashlib.sha256(f"{key}\0{url}".encode()).hexdigest()[:12]
        return f"{provider}:{digest}"

    @classmethod
    def prompt(cls, session: FallbackSession, prompt: str,
               context: TurnContext) -> tuple[Iterator[Event], FallbackSession]:
        """Return the turn's stream: the first hop's, or the next one's when a hop fails
        retryably before output (see the module docstring). Lazy: nothing is sent until the
        stream is read.

        Raises:
            TypeError: `prompt` is not a str.
        """
        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
        pending = _Pending()
        turn = msgspec.structs.replace(session, prompt=prompt, pending=pending)
        return _stream(turn, prompt, context, pending), turn

    @classmethod
    def update_session(cls, session: FallbackSession,
                       result_data: Mapping[str, Any]) -> FallbackSession:
        """After a successful turn: the answering hop keeps its session; every other hop
        gets the prompt and this reply in its history, so the conversation goes on anywhere."""
        pending: _Pending = session.pending
        hops = list(session.hops)
        for index, hop in enumerate(hops):
            prompted = pending.prompted.get(index)
            if prompted is None:  # never tried this turn: its history gets the prompt too
                prompted = _with_prompt(hop.session, session.prompt or "")
            update = getattr(hop.backend, "update_session", None)
            hops[index] = _Hop(hop.backend, prompted if update is None
                               else update(prompted, result_data), hop.limit)
        return msgspec.structs.replace(session, hops=tuple(hops), prompt=None, pending=None)

    @classmethod
    def reset_session(cls, session: FallbackSession) -> FallbackSession:
        """Reset every hop that can (a new conversation everywhere)."""
        hops = []
        for hop in session.hops:
            reset = getattr(hop.backend, "reset_session", None)
            hops.append(_Hop(hop.backend, hop.session if reset is None else reset(hop.session),
                             hop.limit))
        return msgspec.structs.replace(session, hops=tuple(hops))

    @classmethod
    def cancel(cls, session: FallbackSession) -> None:
        """Cancel whatever hop is running (every hop's `cancel`; quick, idempotent)."""
        for hop in session.hops:
            cancel = getattr(hop.backend, "cancel", None)
            if cancel is not None:
                cancel(hop.session)

    @classmethod
    def idle_session(cls, session: FallbackSession) -> None:
        """The agent hibernates: every hop that can releases its idle resources."""
        for hop in session.hops:
            idle = getattr(hop.backend, "idle_session", None)
            if idle is not None:
                idle(hop.session)

    @classmethod
    def terminate_session(cls, session: FallbackSession) -> None:
        """Terminate every hop's session."""
        for hop in session.hops:
            hop.backend.terminate_session(hop.session)


def _stream(session: FallbackSession, prompt: str, context: TurnContext,
            pending: _Pending) -> Iterator[Event]:
    trail: list[FallbackHop] = []
    failure: tuple[list[Event], Event] | None = None  # the last failed hop's events
    for index, hop in enumerate(session.hops):
        limit = hop.limit
        if limit is not None and limit.try_take() is not None:
            trail.append(_skipped(hop, limit))
            continue
        started = time.monotonic()
        usage: Any = None
        try:
            events, prompted = hop.backend.prompt(hop.session, prompt, context)
            pending.prompted[index] = prompted
            held: list[Event] = []  # non-output events, until we know this hop answers
            iterator = iter(events)
            try:
                for event in iterator:
                    if event.kind == "usage":
                        usage = event.data
                    if event.kind in OUTPUT_KINDS or event.kind == "result":
                        trail_so_far = (*trail, _hop(hop, prompted, "ok", None, started))
                        yield from _commit(held, trail_so_far, index)
                        pending.answered = index
                        for later in _rest(event, iterator, trail_so_far):
                            if later.kind == "usage":
                                usage = later.data
                            yield later
                        return
                    if event.kind == "error":
                        reason = event.data.get("reason")
                        _hold(limit, reason)
                        trail.append(_hop(hop, prompted, "error", _kind(reason), started))
                        failure = (held, event)
                        if not _retryable(reason) or _cancelled(context):
                            yield from held
                            yield _failed(event, trail)
                            return
                        break  # fall back to the next hop
                    held.append(event)
                else:
                    yield from held  # no terminal event: the runtime reports no_terminal_event
                    return
            finally:
                close = getattr(iterator, "close", None)
                if close is not None:
                    close()
        finally:
            if limit is not None:
                limit.release(_tokens(usage))
    if failure is not None:
        yield from failure[0]
        yield _failed(failure[1], trail)
        return
    yield _all_held(session, trail)


def _hold(limit: Any, reason: Any) -> None:
    retry_after = reason.retry_after_ms if isinstance(reason, BackendError) else None
    if limit is not None and retry_after:
        limit.hold(retry_after)


def _tokens(usage: Any) -> int:
    if not isinstance(usage, Mapping):
        return 0
    return sum(v for k in ("input_tokens", "output_tokens")
               if isinstance(v := usage.get(k), int) and not isinstance(v, bool))


def _skipped(hop: _Hop, limit: Any) -> FallbackHop:
    held_s = limit.held_for()
    until = int((time.time() + held_s) * 1000) if held_s > 0 else None
    return FallbackHop(provider=_provider(hop.backend), model=_model(hop.session),
                       outcome="skipped", error_kind="rate_limited", held_until_ms=until)


def _all_held(session: FallbackSession, trail: list[FallbackHop]) -> Event:
    """The turn's error when no hop could be tried: `rate_limited`, retryable, of the hop
    whose hold ends first (its `retry_after` the seconds left, rounded up)."""
    held = [(hop.limit.held_for(), hop) for hop in session.hops if hop.limit is not None]
    holding = [(left, hop) for left, hop in held if left > 0]
    left, hop = min(holding, key=lambda pair: pair[0]) if holding else (0.0, session.hops[0])
    provider = _provider(hop.backend)
    retry_after = str(max(1, math.ceil(left))) if left > 0 else None
    message = (f"every fallback hop is rate limited; {provider}'s hold ends in {left:.1f} s"
               if left > 0 else "every fallback hop is at its limit's caps")
    reason = BackendError.new(provider, "rate_limited", None, retryable=True,
                              retry_after=retry_after, message=message)
    reason = reason.with_diagnostics(fallback=_trail_data(trail))
    return Event.new("error", {"reason": reason, "session_id": session.session_id,
                               "provider": provider, "model": _model(hop.session)})


def _cancelled(context: Any) -> bool:
    return bool(context is not None and getattr(context, "cancelled", False))


def _hop(hop: _Hop, session: Any, outcome: str, kind: str | None, started: float) -> FallbackHop:
    return FallbackHop(provider=_provider(hop.backend), model=_model(session), outcome=outcome,
                       error_kind=kind, duration_ms=int((time.monotonic() - started) * 1000))


def _kind(reason: Any) -> str | None:
    return reason.kind if isinstance(reason, BackendError) else None


def _retryable(reason: Any) -> bool:
    return isinstance(reason, BackendError) and reason.retryable


def _trail_data(trail: tuple[FallbackHop, ...] | list[FallbackHop]) -> dict[str, Any]:
    # plain JSON-shaped data (lists, dicts), as it reads back from a stored Response
    return {"fired": len(trail) > 1, "hops": [msgspec.to_builtins(hop) for hop in trail]}


def _commit(held: list[Event], trail: tuple[FallbackHop, ...], index: int) -> Iterator[Event]:
    if index > 0:
        yield Event.new("fallback", _trail_data(trail))
    yield from held


def _rest(first: Event, iterator: Iterator[Event],
          trail: tuple[FallbackHop, ...]) -> Iterator[Event]:
    yield _with_trail(first, trail)
    for event in iterator:
        yield _with_trail(event, trail)


def _with_trail(event: Event, trail: tuple[FallbackHop, ...]) -> Event:
    if event.kind != "result":
        return event
    return Event(kind="result", data={**event.data, "fallback": _trail_data(trail)},
                 timestamp=event.timestamp)


def _failed(event: Event, trail: list[FallbackHop]) -> Event:
    reason = event.data.get("reason")
    if isinstance(reason, BackendError):
        reason = reason.with_diagnostics(fallback=_trail_data(trail))
    return Event(kind="error", data={**event.data, "reason": reason}, timestamp=event.timestamp)
