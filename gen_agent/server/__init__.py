"""`gen_agent.server`: supervised agents behind network protocols (extra
`gen_agent[server]`: Starlette + uvicorn), starting with the OpenAI Responses API.

    from gen_agent.server import create_app

    app = create_app({"chat": chat_host})   # an ASGI app; or: gen-agent serve mymodule:hosts

The app serves one or more `AgentHost`s (activation by key, durable sessions, busy
policies, rejoinable streams). Every request is authenticated (`authenticate(request) ->
Principal`; bearer tokens by default, loopback-only without any), every key is namespaced by
the principal's tenant, and the tenant's request rate, turns in flight and spend are bounded
(`ServerLimits`). See docs/pages/server.md.

Modules: `auth` (`Principal`, `BearerTokens`), `core` (`Server`, `ServerLimits`: the
guard, tenant keys and budgets, the drain), `app` (`create_app`), `responses` (the
Responses API protocol). A protocol is a module with `routes(server)`.
"""

from __future__ import annotations

from gen_agent.server._app import create_app
from gen_agent.server._auth import LOCAL, BearerTokens, Principal
from gen_agent.server._core import Server, ServerLimits

__all__ = ["LOCAL", "BearerTokens", "Principal", "Server", "ServerLimits", "create_app"]
