"""Reserved start options: defaults, units and validation (docs/pages/contract.md#s2-2).

`None` for any option means "use the default", as an explicit `nil` does in the original.
`watchdog_ms` accepts `"infinity"` or `math.inf` to disable the watchdog; `shutdown_ms` accepts
the same for an unbounded graceful-stop window. A finite duration is at most `MAX_DURATION_MS`
(`threading.TIMEOUT_MAX` in milliseconds, ~292 years): what the platform can wait.
"""

from __future__ import annotations

import difflib
import math
import os
import sys
import warnings
from typing import Any, Literal

import msgspec

from gen_agent._accounting import SharedBudget, Spend, SpendCap
from gen_agent._limits import ProviderLimit
from gen_agent._output import check_output_type
from gen_agent._request_options import check_busy
from gen_agent._timers import MAX_DURATION_MS

RESERVED = (
    "watchdog_ms", "shutdown_ms", "max_tell_results", "max_tell_result_bytes",
    "max_events_per_turn", "max_event_bytes_per_turn", "event_retention",
    "max_pending_prompts", "max_pending_prompt_bytes", "max_pending_notifications",
    "max_pending_notification_bytes", "resume_session_id", "hibernate_after_ms",
    "store", "session_key",
    "provider_limit",
    "output", "max_cost_usd", "max_total_tokens", "spend", "budgets", "replay_turns",
    "busy",
)

HIBERNATE_ENV = "GEN_AGENT_HIBERNATE_AFTER_MS"
"""Environment variable giving the default `hibernate_after_ms` of agents that do not set it
(e.g. `0` in CI, to run a test suite with hibernation forced on after every message)."""

DEFAULTS: dict[str, Any] = {
    "watchdog_ms": 600_000,
    "shutdown_ms": 5_000,
    "max_tell_results": 100,
    "max_tell_result_bytes": 8_388_608,
    "max_events_per_turn": 1_000,
    "max_event_bytes_per_turn": 1_048_576,
    "event_retention": "compact",
    "max_pending_prompts": 1_000,
    "max_pending_prompt_bytes": 1_048_576,
    "max_pending_notifications": 1_000,
    "max_pending_notification_bytes": 1_048_576,
    "resume_session_id": None,
    "hibernate_after_ms": None,
    "store": None,
    "session_key": None,
    "provider_limit": None,
    "output": None,
    "max_cost_usd": None,
    "max_total_tokens": None,
    "spend": None,
    "budgets": (),
    "replay_turns": 0,
    "busy": "enqueue",
}

_POSITIVE = ("max_events_per_turn", "max_event_bytes_per_turn")
_NON_NEGATIVE = (
    "max_tell_results", "max_tell_result_bytes", "max_pending_prompts",
    "max_pending_prompt_bytes", "max_pending_notifications", "max_pending_notification_bytes",
    "replay_turns",
)


class AgentOptions(msgspec.Struct, frozen=True, kw_only=True):
    """The validated reserved options of one agent (units in the names; None = no bound)."""

    watchdog_ms: int | None
    shutdown_ms: int | None
    max_tell_results: int
    max_tell_result_bytes: int
    max_events_per_turn: int
    max_event_bytes_per_turn: int
    event_retention: Literal["compact", "lossless"]
    max_pending_prompts: int
    max_pending_prompt_bytes: int
    max_pending_notifications: int
    max_pending_notification_bytes: int
    resume_session_id: str | None = None
    hibernate_after_ms: int | None = None
    store: Any = None
    session_key: str | None = None
    provider_limit: Any = None  # a gen_agent.ProviderLimit shared with other agents
    output: Any = None  # the default structured-output type (gen_agent._output)
    max_cost_usd: float | None = None  # US dollars (gen_agent._accounting)
    max_total_tokens: int | None = None  # tokens
    spend: Spend | None = None  # the totals to start from
    budgets: tuple[Any, ...] = ()  # SharedBudgets above the agent (supervisor, pool, host)
    replay_turns: int = 0  # finished turns kept in the replay buffer (0: no buffer)
    busy: str = "enqueue"  # a request arriving mid-turn: gen_agent.request.BUSY_POLICIES


_STORE_METHODS = ("acquire", "release", "load", "update")


def _check_store(store: Any, key: Any) -> None:
    # Both or neither: a durable session is named by its key (gen_agent.store).
    if store is None and key is None:
        return
    if store is None:
        raise ValueError("session_key needs a store (store=SQLiteStore(path) or MemoryStore())")
    missing = [name for name in _STORE_METHODS if not callable(getattr(store, name, None))]
    if missing:
        raise ValueError(f"store must be a gen_agent.store.SessionStore (SQLiteStore, "
                         f"MemoryStore); {store!r} lacks {', '.join(missing)}")
    if not (isinstance(key, str) and key):
        raise ValueError(f"store needs session_key, a non-empty str, got {key!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_infinity(value: Any) -> bool:
    return value == "infinity" or (isinstance(value, float) and math.isinf(value) and value > 0)


def _duration(key: str, value: Any, *, allow_zero: bool) -> int | None:
    if _is_infinity(value):
        return None
    if _is_int(value) and (value > 0 or (allow_zero and value == 0)):
        if value > MAX_DURATION_MS:
            raise ValueError(f"{key} must be at most {MAX_DURATION_MS} milliseconds "
                             f"(threading.TIMEOUT_MAX) or 'infinity', got {value!r}")
        return int(value)
    expected = "a non-negative int" if allow_zero else "a positive int"
    raise ValueError(f"{key} must be {expected} (milliseconds) or 'infinity', got {value!r}")


def default_hibernate_after() -> int | str | None:
    """The default `hibernate_after_ms`: never (None), unless the `GEN_AGENT_HIBERNATE_AFTER_MS`
    environment variable holds milliseconds (an int >= 0) or "infinity".

    Raises:
        ValueError: the variable is set to anything else.
    """
    raw = os.environ.get(HIBERNATE_ENV, "").strip()
    if not raw:
        return None
    if raw == "infinity":
        return raw
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{HIBERNATE_ENV} must be milliseconds (an int >= 0) or 'infinity', "
                         f"got {raw!r}") from None


def split_options(opts: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split start options into (reserved, forwarded-to-init_agent)."""
    reserved = {k: v for k, v in opts.items() if k in RESERVED}
    forwarded = {k: v for k, v in opts.items() if k not in RESERVED}
    return reserved, forwarded


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def warn_near_misses(opts: dict[str, Any], fn: str) -> None:
    """Warn (`UserWarning`, at the first caller outside gen_agent) for each start option that
    is not reserved but resembles a reserved one (`watchdog_msec`, `max_pending_prompt`).

    The option still reaches `init_agent`, as the contract says (§2.2).
    """
    for key in opts:
        if key in RESERVED or not isinstance(key, str):
            continue
        close = difflib.get_close_matches(key, RESERVED, n=1, cutoff=0.85)
        if close:
            warnings.warn(
                f"{fn}: option {key!r} is not a reserved option and goes to init_agent; "
                f"did you mean {close[0]!r}?", UserWarning, stacklevel=outside_level())


def outside_level() -> int:
    """The `stacklevel` of the innermost frame outside the gen_agent package."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(
            _PACKAGE_DIR + os.sep):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


def validate_shutdown(value: Any) -> int | None:
    """Validate `shutdown_ms` in the caller (an invalid value raises ValueError there, §2.2)."""
    return _duration("shutdown_ms", DEFAULTS["shutdown_ms"] if value is None else value,
                     allow_zero=True)


def build_options(reserved: dict[str, Any], backend: Any = None) -> AgentOptions:
    """Apply defaults and validate every reserved option (`backend`: the agent's, for the
    options that depend on it, e.g. `busy="rollback"`).

    Raises:
        ValueError: an option has a value outside its accepted forms (the message names the
            option, the accepted forms and the value received).
    """
    values = {k: (DEFAULTS[k] if reserved.get(k) is None else reserved[k]) for k in RESERVED}
    if reserved.get("hibernate_after_ms") is None:
        values["hibernate_after_ms"] = default_hibernate_after()
    hibernate = values["hibernate_after_ms"]
    if hibernate is not None:
        values["hibernate_after_ms"] = _duration("hibernate_after_ms", hibernate,
                                                 allow_zero=True)
    values["watchdog_ms"] = _duration("watchdog_ms", values["watchdog_ms"], allow_zero=False)
    values["shutdown_ms"] = validate_shutdown(values["shutdown_ms"])
    for key in _POSITIVE:
        if not (_is_int(values[key]) and values[key] > 0):
            raise ValueError(f"{key} must be a positive int, got {values[key]!r}")
    for key in _NON_NEGATIVE:
        if not (_is_int(values[key]) and values[key] >= 0):
            raise ValueError(f"{key} must be a non-negative int, got {values[key]!r}")
    resume = values["resume_session_id"]
    if resume is not None and not (isinstance(resume, str) and resume):
        raise ValueError(f"resume_session_id must be a non-empty str, got {resume!r}")
    _check_store(values["store"], values["session_key"])
    limit = values["provider_limit"]
    if limit is not None and not isinstance(limit, ProviderLimit):
        raise ValueError("provider_limit must be a gen_agent.ProviderLimit or None, "
                         f"got {type(limit).__name__}")
    if values["event_retention"] not in ("compact", "lossless"):
        raise ValueError(
            f"event_retention must be 'compact' or 'lossless', got {values['event_retention']!r}"
        )
    _check_accounting(values)
    check_busy(values["busy"], "start_agent", allow_none=False)
    if backend is not None:
        from gen_agent._runtime.busy import check_backend_policy  # the policy's own module

        check_backend_policy(values["busy"], backend)
    return AgentOptions(**values)


def _check_accounting(values: dict[str, Any]) -> None:
    try:
        check_output_type(values["output"], "start_agent")
    except TypeError as exc:
        raise ValueError(str(exc)) from None
    cost = values["max_cost_usd"]
    if cost is not None:
        if (isinstance(cost, bool) or not isinstance(cost, int | float)
                or not math.isfinite(cost) or cost < 0):
            raise ValueError("max_cost_usd must be a finite number >= 0 (US dollars; None: no "
                             f"bound), got {cost!r}")
        values["max_cost_usd"] = float(cost)
    tokens = values["max_total_tokens"]
    if tokens is not None and not (_is_int(tokens) and tokens >= 0):
        raise ValueError(f"max_total_tokens must be an int >= 0 (tokens), got {tokens!r}")
    budgets = values["budgets"]
    if isinstance(budgets, SharedBudget) or (
            not isinstance(budgets, tuple | list) and isinstance(budgets, SpendCap)):
        budgets = (budgets,)
    if not (isinstance(budgets, tuple | list) and all(
            isinstance(b, (SharedBudget, SpendCap)) for b in budgets)):
        raise ValueError("budgets must be a tuple of gen_agent.SharedBudget (or other spend "
                         f"caps: gen_agent.ray.ClusterBudget), got {type(budgets).__name__}")
    values["budgets"] = tuple(budgets)
    spend = values["spend"]
    if spend is not None and type(spend) is not Spend:
        raise ValueError(f"spend must be a gen_agent.Spend, got {spend!r}")
