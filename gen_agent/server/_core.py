"""`Server`: what every protocol module of `gen_agent.server` shares (hosts by name,
principals, tenant keys, limits, tracked turns, the drain), and the guard in front of the app.

Every request but `GET /healthz`, `GET /readyz` and the `GET` of a page in
`Server.public_pages` (a shell without data) goes through one guard, in this order:

1. draining: `503` with `Retry-After`;
2. `authenticate(request)`: None is `401` (see `gen_agent.server._auth`);
3. the tenant's request rate (`ServerLimits.requests_per_minute`): `429` with `Retry-After`;
4. the body: more than `max_body_bytes` is `413`; not received within `body_timeout_s` is
   `408` (a slow client holds no worker longer than that).

A protocol is a module with `routes(server) -> list[starlette.routing.BaseRoute]`; its
handlers read `request.app.state.gen_agent_server` (this `Server`) and
`server.principal(request)`, and start turns with `server.stream(...)`, which checks the
prompt's size and the tenant's budget, tracks the turn for the drain and charges the
tenant's budget with its spend.

Mirrors: nothing in the Elixir original.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import math
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any
from urllib.parse import quote, unquote

import msgspec
from loguru import logger
from starlette.requests import Request
from starlette.responses import JSONResponse

from gen_agent import aio
from gen_agent._accounting import BudgetExceeded, SharedBudget
from gen_agent._errors import TurnError
from gen_agent._host import AgentHost
from gen_agent._limits import JoinedLimit, ProviderLimit
from gen_agent._request_options import RequestOptions
from gen_agent._request_ref import RequestRef
from gen_agent._response import Response
from gen_agent.server._auth import LOCAL, Principal, is_loopback

__all__ = ["ServedTurn", "Server", "ServerLimits", "error_response", "turn_error_status"]

_HEALTH_PATHS = frozenset({"/healthz", "/readyz"})
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


class ServerLimits(msgspec.Struct, frozen=True, kw_only=True):
    """The server's bounds (None: no bound).

    Fields:
        max_body_bytes: the largest request body (bytes; default 1 MiB): more is `413`.
        max_prompt_chars: the longest prompt a request may send (characters; default
            200,000): more is `413`.
        body_timeout_s: seconds to receive a whole request body (default 10): a slower
            client gets `408` and its connection closed.
        requests_per_minute: requests per tenant per minute (a token bucket; default None);
            beyond it `429` with `Retry-After` (whole seconds).
        burst: the bucket's size (requests; default: `requests_per_minute`, at least 1).
        max_concurrent_turns: running or queued turns per tenant across its hosts
            (default None); beyond it `429` with `Retry-After: 1`.
        tenant_max_cost_usd / tenant_max_total_tokens: a spend cap per tenant over every
            host (US dollars / tokens; default None): a tenant is a budget node over its
            hosts (`SharedBudget`); once reached its new turns are refused (`429`,
            `insufficient_quota`) while running ones finish.
        drain_timeout_s: how long a drain lets running turns finish before interrupting
            them (seconds; default 30).
        retry_after_s: the `Retry-After` of a `503` while draining (seconds; default 5).
        max_responses: finished responses kept per server for `GET` and continuation
            (count; default 10,000; the oldest go first).
        tenant_provider_limit: a provider limit per tenant over every host (default None):
            a dict of `ProviderLimit` bounds (`{"max_concurrent": 2}`: each tenant gets its
            own limit with them), or a callable `tenant -> ProviderLimit | None` (asked once
            per tenant). A tenant's agents need a permit of it next to their host's own
            `provider_limit`; past it their requests wait first in their agent's queue
            (as for any provider limit; not a refusal). It applies to agents activated
            after `create_app`.
    """

    max_body_bytes: int = 1 << 20
    max_prompt_chars: int = 200_000
    body_timeout_s: float = 10.0
    requests_per_minute: float | None = None
    burst: int | None = None
    max_concurrent_turns: int | None = None
    tenant_max_cost_usd: float | None = None
    tenant_max_total_tokens: int | None = None
    drain_timeout_s: float = 30.0
    retry_after_s: int = 5
    max_responses: int = 10_000
    tenant_provider_limit: Any = None

    def __post_init__(self) -> None:
        per_tenant = self.tenant_provider_limit
        if per_tenant is not None and not callable(per_tenant):
            if not isinstance(per_tenant, Mapping):
                raise ValueError("ServerLimits.tenant_provider_limit must be a dict of "
                                 "ProviderLimit bounds, a callable or None")
            ProviderLimit("check", **per_tenant)  # bad bounds raise here, not per tenant
        for name in ("max_body_bytes", "max_prompt_chars", "retry_after_s", "max_responses"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ServerLimits.{name} must be an int >= 1, got {value!r}")
        for name in ("body_timeout_s", "drain_timeout_s"):
            value = getattr(self, name)
            if (isinstance(value, bool) or not isinstance(value, int | float)
                    or not math.isfinite(value) or value <= 0):
                raise ValueError(f"ServerLimits.{name} must be a number > 0 (seconds)")
        rpm = self.requests_per_minute
        if rpm is not None and (isinstance(rpm, bool) or not isinstance(rpm, int | float)
                                or not math.isfinite(rpm) or rpm <= 0):
            raise ValueError("ServerLimits.requests_per_minute must be a number > 0 or None")


class _Bucket:
    __slots__ = ("stamp", "tokens")

    def __init__(self, tokens: float) -> None:
        self.tokens, self.stamp = tokens, time.monotonic()


class _RateLimiter:
    """A token bucket per tenant; `take(tenant)` is None or the seconds to wait."""

    def __init__(self, per_minute: float, burst: int | None) -> None:
        self.rate = per_minute / 60.0
        self.size = float(burst if burst is not None else max(1, int(per_minute)))
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def take(self, tenant: str) -> int | None:
        now = time.monotonic()
        with self._lock:
            bucket = self._buckets.get(tenant)
            if bucket is None:
                bucket = self._buckets[tenant] = _Bucket(self.size)
            bucket.tokens = min(self.size, bucket.tokens + (now - bucket.stamp) * self.rate)
            bucket.stamp = now
            if bucket.tokens >= 1.0:
                bucket.tokens -= 1.0
                return None
            return max(1, math.ceil((1.0 - bucket.tokens) / self.rate))


def error_response(status: int, message: str, *, code: str | None = None,
                   kind: str = "invalid_request_error", param: str | None = None,
                   headers: Mapping[str, str] | None = None) -> JSONResponse:
    """An error in the OpenAI shape: `{"error": {"message", "type", "param", "code"}}`.

    `message` must never hold a prompt, a reply, a token or an exception's text."""
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JSONResponse(body, status_code=status, headers=dict(headers or {}))


class _Tracked:
    """A turn the drain waits for (hashed by identity)."""

    __slots__ = ("host", "key", "ref")

    def __init__(self, host: str, key: str) -> None:
        self.host, self.key = host, key
        self.ref: RequestRef | None = None


class ServedTurn:
    """A turn started by `Server.stream`: an async context manager and an async iterator of
    `Event`s (an `AsyncTurnStream` underneath), tracked for the drain; its spend is charged
    to the tenant's budget when it completes. `ref` is the request's `RequestRef` (after
    entering); `response()` awaits the `Response` (raises as `AsyncTurnStream.response`)."""

    def __init__(self, server: Server, principal: Principal, host: str, key: str,
                 stream: Any) -> None:
        self.server, self.principal = server, principal
        self.host_name, self.key = host, key
        self._stream = stream
        self._tracked = _Tracked(host, server.tenant_key(principal, key))
        self._charged = False

    @property
    def ref(self) -> RequestRef | None:
        return self._stream.ref  # type: ignore[no-any-return]

    @property
    def seq(self) -> int:
        """The sequence number of the last event read."""
        return self._stream.seq  # type: ignore[no-any-return]

    async def __aenter__(self) -> ServedTurn:
        server = self.server
        server._turns.add(self._tracked)
        try:
            await self._stream.__aenter__()
        except BaseException:
            server._turns.discard(self._tracked)
            raise
        self._tracked.ref = self._stream.ref
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self._stream.__aexit__(*exc)
            if self._stream.done:
                with contextlib.suppress(Exception):
                    self._charge(await self._stream.response())
        finally:
            self.server._turns.discard(self._tracked)

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._stream.__aiter__()  # type: ignore[no-any-return]

    async def response(self) -> Response:
        response: Response = await self._stream.response()
        self._charge(response)
        return response

    def _charge(self, response: Response) -> None:
        if self._charged:
            return
        self._charged = True
        budget = self.server.budget(self.principal)
        if budget is None:
            return
        usage = {k: v for k, v in (response.usage or {}).items()
                 if isinstance(v, int) and not isinstance(v, bool)}
        cost = response.cost_usd if isinstance(response.cost_usd, int | float) else None
        budget.charge(usage, cost, 1)


class Server:
    """What the app's protocols share; `request.app.state.gen_agent_server`.

    Attributes:
        hosts: `{name: AgentHost}` (the name is what a request names, e.g. the Responses
            API's `model`).
        limits: the `ServerLimits`.
        authenticate: the hook (`request -> Principal | None`, may be async).
        draining: True once `drain` began (new requests get `503`).
        state: a dict for protocol modules' own per-server state (keyed by module name).
        public_pages: paths whose `GET` needs no principal: pages that carry no data (the
            chat page's shell, which then sends its token with each API call). Health and
            readiness are always public.
    """

    def __init__(self, hosts: Mapping[str, AgentHost], *, limits: ServerLimits,
                 authenticate: Callable[[Request], Any] | None,
                 loopback_only: bool) -> None:
        self.hosts = dict(hosts)
        self.limits = limits
        self.authenticate = authenticate
        self.loopback_only = loopback_only
        self.draining = False
        self.state: dict[str, Any] = {}
        self.public_pages: set[str] = set()
        self._rate = (None if limits.requests_per_minute is None
                      else _RateLimiter(limits.requests_per_minute, limits.burst))
        self._budgets: dict[str, SharedBudget] = {}
        self._lock = threading.Lock()
        self._turns: set[_Tracked] = set()
        self._drained = False
        self._drain_lock: asyncio.Lock | None = None
        self.on_drain: list[Callable[[], Any]] = []  # protocol hooks run when a drain begins
        self._tenant_limits: dict[str, ProviderLimit | None] = {}
        if limits.tenant_provider_limit is not None:
            for agent_host in self.hosts.values():
                _add_key_limit(agent_host, self._key_limit)

    # ------------------------------------------------------------------ lookups
    def host(self, name: str) -> AgentHost:
        """The host named `name`.

        Raises:
            LookupError: no host has that name.
        """
        host = self.hosts.get(name) if isinstance(name, str) else None
        if host is None:
            raise LookupError(name)
        return host

    def principal(self, request: Request) -> Principal:
        """The authenticated principal of `request` (set by the guard)."""
        principal = request.scope.get("gen_agent.principal")
        if not isinstance(principal, Principal):
            raise RuntimeError("the request did not pass the gen_agent.server guard")
        return principal

    @staticmethod
    def tenant_key(principal: Principal, key: str) -> str:
        """The host key of `key` inside `principal`'s tenant: `<tenant, %-escaped>/<key>`.

        The tenant part holds no `/`, so two tenants never share a key whatever the
        request's `key` is.

        Raises:
            ValueError: `key` is not a non-empty str.
        """
        if not isinstance(key, str) or not key:
            raise ValueError("a key must be a non-empty str")
        return f"{quote(principal.tenant, safe='')}/{key}"

    def budget(self, principal: Principal) -> SharedBudget | None:
        """The tenant's `SharedBudget` (None when the limits set no tenant cap)."""
        limits = self.limits
        if limits.tenant_max_cost_usd is None and limits.tenant_max_total_tokens is None:
            return None
        with self._lock:
            budget = self._budgets.get(principal.tenant)
            if budget is None:
                budget = self._budgets[principal.tenant] = SharedBudget(
                    limits.tenant_max_cost_usd, limits.tenant_max_total_tokens)
            return budget

    def tenant_limit(self, tenant: str) -> ProviderLimit | None:
        """The tenant's `ProviderLimit` (None when the limits set none), made on first use.

        Raises:
            ValueError: the `tenant_provider_limit` callable returned no `ProviderLimit`.
        """
        make = self.limits.tenant_provider_limit
        if make is None:
            return None
        with self._lock:
            if tenant in self._tenant_limits:
                return self._tenant_limits[tenant]
            limit = (make(tenant) if callable(make)
                     else ProviderLimit(f"tenant:{quote(tenant, safe='')}", **make))
            if limit is not None and not isinstance(limit, ProviderLimit):
                raise ValueError("tenant_provider_limit must return a ProviderLimit or None")
            self._tenant_limits[tenant] = limit
            return limit

    def _key_limit(self, key: str) -> ProviderLimit | None:
        # A served key is `<tenant, %-escaped>/<key>` (tenant_key); other keys have none.
        tenant, sep, _ = key.partition("/")
        return self.tenant_limit(unquote(tenant)) if sep else None

    def tenant_turns(self, principal: Principal) -> int:
        """Tracked turns (running or queued) of `principal`'s tenant (count)."""
        prefix = quote(principal.tenant, safe="") + "/"
        return sum(1 for turn in list(self._turns) if turn.key.startswith(prefix))

    # ------------------------------------------------------------------ turns
    def stream(self, principal: Principal, host: str, key: str, prompt: str, *,
               options: RequestOptions | None = None, output: Any = None,
               timeout: float | None = None, max_buffered_events: int = 256) -> ServedTurn:
        """Start a turn of `host`'s agent for `principal`'s `key` (namespaced here:
        pass the request's key as is): `async with server.stream(...) as turn:`.

        The turn is not interrupted when the block is left early (a dropped client can
        reattach; cancel it explicitly).

        Raises:
            LookupError: no such host.
            TurnError: `("prompt_too_large", chars)`, `("budget_exceeded",
                BudgetExceeded)` of the tenant, `("too_many_turns", n)`, `"draining"`;
                on entering, the host's own errors (`("overloaded", HostOverload)`, ...).
        """
        if self.draining:
            raise TurnError("draining")
        agent_host = self.host(host)
        if len(prompt) > self.limits.max_prompt_chars:
            raise TurnError(("prompt_too_large", len(prompt)))
        budget = self.budget(principal)
        if budget is not None:
            exceeded = budget.exceeded()
            if exceeded is not None:
                raise TurnError(("budget_exceeded", exceeded))
        most = self.limits.max_concurrent_turns
        if most is not None and self.tenant_turns(principal) >= most:
            raise TurnError(("too_many_turns", most))
        turn = agent_host.aio.stream(self.tenant_key(principal, key), prompt,
                                     interrupt_on_exit=False, timeout=timeout,
                                     max_buffered_events=max_buffered_events,
                                     options=options, output=output)
        return ServedTurn(self, principal, host, key, turn)

    # ------------------------------------------------------------------ drain
    async def drain(self, timeout: float | None = None, *, close_hosts: bool = False) -> None:
        """Stop accepting work, let running turns finish, then stop the hosts' agents.

        New requests get `503` with `Retry-After` from now on. Running turns get
        `timeout` seconds (default `limits.drain_timeout_s`) to finish; then each left is
        interrupted with `interrupt_request` (never a bare interrupt). Every live agent is
        then drained (`gen_agent.drain`: its queued requests fail with `"draining"`), so
        its lease is released and another process can take its key at once. Idempotent.

        Args:
            timeout: seconds for running turns to finish.
            close_hosts: also close the hosts afterwards.
        """
        if self._drain_lock is None:
            self._drain_lock = asyncio.Lock()
        async with self._drain_lock:
            if self._drained:
                return
            self.draining = True
            for hook in self.on_drain:
                result = hook()
                if inspect.isawaitable(result):
                    await result
            bound = self.limits.drain_timeout_s if timeout is None else timeout
            # Each live agent's drain rejects its queued requests with "draining" at once,
            # lets its running turn finish, then stops it (its lease is released).
            drains = [asyncio.ensure_future(self._drain_agent(agent_host, key, bound + 10))
                      for agent_host in self.hosts.values() for key in agent_host.live_keys()]
            if drains:
                await asyncio.wait(drains, timeout=bound)
            for turn in list(self._turns):  # past the bound: interrupt what still runs
                if turn.ref is None:
                    continue
                with contextlib.suppress(Exception):
                    await self.hosts[turn.host].aio.interrupt_request(turn.key, turn.ref, 5.0)
            if drains:
                await asyncio.wait(drains, timeout=15.0)
            if close_hosts:
                for agent_host in self.hosts.values():
                    await asyncio.to_thread(agent_host.close)
            self._drained = True

    @staticmethod
    async def _drain_agent(host: AgentHost, key: str, timeout: float) -> None:
        with contextlib.suppress(Exception):  # gone already, or stopped another way
            await aio.drain((host.name, key), timeout, agent_system=host.system)

    # ------------------------------------------------------------------ readiness
    async def ready(self) -> bool:
        """Hosts open and each store reachable (a `load` of a probe key within 2 s)."""
        if self.draining:
            return False
        try:
            async with asyncio.timeout(2.0):
                for agent_host in self.hosts.values():
                    if getattr(agent_host, "_closed", False):
                        return False
                    await asyncio.to_thread(agent_host.store.load, "gen_agent.server/readyz")
        except (TimeoutError, Exception):  # noqa: BLE001 - any failure is "not ready"
            return False
        return True


def _add_key_limit(host: Any, key_limit: Callable[[str], Any]) -> None:
    """Give `host`'s agents `key_limit` too, next to a `key_limit` the host already has."""
    if not hasattr(host, "key_limit"):
        raise TypeError(f"tenant_provider_limit needs AgentHosts, got {type(host).__name__}")
    own = host.key_limit
    if own is None:
        host.key_limit = key_limit
        return

    def both(key: str) -> Any:
        limits = [limit for limit in (key_limit(key), own(key)) if limit is not None]
        return JoinedLimit(*limits) if len(limits) > 1 else (limits[0] if limits else None)

    host.key_limit = both


class _Guard:
    """The ASGI guard in front of every route (see the module docstring)."""

    def __init__(self, app: Any, server: Server) -> None:
        self.app, self.server = app, server

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] in _HEALTH_PATHS or (
                scope["path"] in self.server.public_pages
                and scope["method"] in ("GET", "HEAD") and not self.server.draining):
            await self.app(scope, receive, send)
            return
        refusal, receive = await self._check(scope, receive)
        if refusal is not None:
            logger.info("refused {} {}: {}", scope["method"], scope["path"].split("/")[1:3],
                        getattr(refusal, "status_code", "closed"))
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _check(self, scope: dict[str, Any], receive: Any) -> tuple[Any, Any]:
        server, limits = self.server, self.server.limits
        if server.draining:
            return error_response(503, "the server is draining; retry on another instance",
                                  code="draining", kind="server_error",
                                  headers={"Retry-After": str(limits.retry_after_s)}), receive
        request = Request(scope)
        principal: Principal | None
        if server.authenticate is None:
            client = scope.get("client")
            peer_ok = client is None or is_loopback(client[0])
            principal = (LOCAL if peer_ok and is_loopback(request.headers.get("host"))
                         else None)
            if principal is None:
                return error_response(403, "this server accepts loopback requests only",
                                      code="forbidden"), receive
        else:
            try:
                principal = server.authenticate(request)
                if inspect.isawaitable(principal):
                    principal = await principal
            except Exception:  # noqa: BLE001 - a failing hook refuses, it never leaks
                principal = None
            if not isinstance(principal, Principal):
                return error_response(401, "a valid bearer token is required",
                                      code="invalid_api_key",
                                      headers={"WWW-Authenticate": 'Bearer realm="gen_agent"'}
                                      ), receive
        scope["gen_agent.principal"] = principal
        if server._rate is not None:
            wait = server._rate.take(principal.tenant)
            if wait is not None:
                return error_response(429, "too many requests for this tenant",
                                      code="rate_limit_exceeded", kind="rate_limit_error",
                                      headers={"Retry-After": str(wait)}), receive
        if scope["method"] in _BODY_METHODS:
            return await self._read_body(scope, receive)
        return None, receive

    async def _read_body(self, scope: dict[str, Any], receive: Any) -> tuple[Any, Any]:
        limits = self.server.limits
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    return error_response(400, "a bad Content-Length header"), receive
                if declared > limits.max_body_bytes:
                    return self._too_large(), receive
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(limits.body_timeout_s):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return _Closed(), receive
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > limits.max_body_bytes:
                        return self._too_large(), receive
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            return error_response(408, "the request body was not received in time",
                                  code="request_timeout",
                                  headers={"Connection": "close"}), receive
        body = b"".join(chunks)
        delivered = False

        async def replay() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # type: ignore[no-any-return]

        return None, replay

    def _too_large(self) -> Any:
        return error_response(413, f"the request body exceeds {self.server.limits.max_body_bytes}"
                              " bytes", code="request_too_large",
                              headers={"Connection": "close"})


class _Closed:
    """The client left before its body arrived: answer nothing."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        return None


def turn_error_status(reason: Any) -> tuple[int, str, str, dict[str, str]]:
    """`(HTTP status, code, message, headers)` for a `TurnError` reason (content-free)."""
    head = reason[0] if isinstance(reason, tuple) and reason else reason
    if head == "busy":
        return 409, "busy", "the conversation is busy with another turn", {}
    if head == "draining":
        return 503, "draining", "the server is draining; retry on another instance", {
            "Retry-After": "5"}
    if head == "overloaded":
        return 503, "overloaded", "too many live conversations; retry later", {
            "Retry-After": "1"}
    if head == "budget_exceeded":
        info = reason[1] if isinstance(reason, tuple) and len(reason) > 1 else None
        limit = info.limit if isinstance(info, BudgetExceeded) else "spend"
        return 429, "insufficient_quota", f"the spend cap ({limit}) is reached", {}
    if head == "too_many_turns":
        return 429, "rate_limit_exceeded", "too many turns in flight for this tenant", {
            "Retry-After": "1"}
    if head == "prompt_too_large":
        return 413, "prompt_too_large", "the prompt is too long", {}
    if head == "interrupted":
        return 499, "cancelled", "the response was cancelled", {}
    if head == "invalid_output":
        return 502, "invalid_output", "the reply did not match text.format", {}
    if head == "cancelled":
        return 499, "cancelled", "the response was cancelled", {}
    return 500, "turn_failed", "the turn failed", {}

