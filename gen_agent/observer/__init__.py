"""`gen_agent.observer`: a live web view of every agent, supervisor and pool (extra
`gen_agent[observer]`: Starlette + uvicorn).

    from gen_agent import observer

    with observer.serve() as obs:          # 127.0.0.1, a free port, a fresh token
        print("open", obs.url)             # http://127.0.0.1:PORT/?token=...
        ...                                # run your agents

The page shows, pushed live over server-sent events: the supervision trees (children,
restart counts, restart intensity left), every agent's phase, queue depth, pending
notifications, halted / draining flags and current request (origin, attempt, elapsed,
watchdog), the last turns (outcome, duration, tokens, cost; never prompt or response text
unless `show_text=True`), the pools (workers, queued, in flight) and a timeline of recent
telemetry events. A few safe actions (interrupt, halt, resume, stop an agent; restart a
supervisor's child) need the token and a confirmation.

Built only from `runtime_snapshot`, `Supervisor.snapshot`, `Pool.status` and content-free
telemetry; the rings of recent turns and events exist only while an observer runs.
`gen-agent observe` runs one over the demo's agents. See `docs/pages/observer.md`.

Exit reasons are shown content-free by `brief_reason` (its old name here,
`describe_reason`, warns until 0.3). Private modules: `_collector` (the model, no web
dependency), `_publisher` (one thread feeding every stream), `_actions`, `_app` (the Starlette
app), `_server` (`serve`, `Observer`), `static/` (the page).
"""

from __future__ import annotations

from gen_agent._deprecate import moved_names as _moved_names
from gen_agent._reasons import brief_reason
from gen_agent.observer._collector import Collector
from gen_agent.observer._server import Observer, serve

__all__ = ["Collector", "Observer", "brief_reason", "serve"]

__getattr__ = _moved_names(__name__, {"describe_reason": ("gen_agent.observer", "brief_reason")})
