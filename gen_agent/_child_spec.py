"""Child specs of a supervision tree, and the records a supervisor reports.

What a `Supervisor` is given (`ChildSpec`, `SupervisorSpec`, made by `child_spec`,
`supervisor_spec`) and what it tells (`ChildInfo`, `SupervisorSnapshot`, `ChildEvent`), with
the restart rule (`should_restart`). Users import them from `gen_agent._supervisor` and
`gen_agent`; the supervisor itself is in `gen_agent/_supervisor.py`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import msgspec

from gen_agent._accounting import own_budget
from gen_agent._errors import GenAgentError
from gen_agent._reasons import describe_reason
from gen_agent._runtime import (
    RAISED_DURING_START,
    outside_level,
    validate_shutdown,
    warn_near_misses,
)

RestartType = Literal["permanent", "transient", "temporary"]
Strategy = Literal["one_for_one", "one_for_all", "rest_for_one"]

_RESTARTS = ("permanent", "transient", "temporary")
_STRATEGIES = ("one_for_one", "one_for_all", "rest_for_one")
INTENSITY_REASON = ("shutdown", "reached_max_restart_intensity")


class ChildSpec(msgspec.Struct, frozen=True, kw_only=True):
    """How to start and restart one agent child. Build it with `child_spec`.

    Fields:
        id: the child id, which is also the agent's registered name.
        module: the `GenAgent` subclass.
        backend: the backend.
        opts: every other `start_agent` option (reserved ones and those for `init_agent`).
        restart: `"permanent"`, `"transient"` or `"temporary"`.
        shutdown_ms: graceful-stop window in milliseconds; None = wait forever.
        resume_session: restart with the previous incarnation's provider session id.
        type: `"worker"`.
    """

    id: Any
    module: Any
    backend: Any
    opts: dict[str, Any]
    restart: RestartType = "temporary"
    shutdown_ms: int | None = 5_000
    resume_session: bool = False
    type: Literal["worker"] = "worker"

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in self.__rich_repr__())
        return f"ChildSpec({fields})"

    def __rich_repr__(self) -> list[tuple[str, Any]]:
        # The options' values are the caller's data (API keys among them): names only.
        shown = {key: "<redacted>" for key in self.opts}
        return [(name, shown if name == "opts" else getattr(self, name))
                for name in self.__struct_fields__]


class SupervisorSpec(msgspec.Struct, frozen=True, kw_only=True):
    """How to start a nested `Supervisor` as a child. Build it with `supervisor_spec`.

    Fields:
        id: the child id (also the nested supervisor's `name`).
        children: the nested supervisor's child specs, in start order.
        strategy, max_restarts, max_seconds: as for `Supervisor`.
        restart: restart type of the nested supervisor (default `"permanent"`).
        shutdown_ms: how long to wait for it to stop, in milliseconds; None = forever.
        budget: the nested supervisor's spend cap (`Supervisor(budget=)`), or None.
        type: `"supervisor"`.
    """

    id: Any
    children: tuple[Any, ...]
    strategy: Strategy = "one_for_one"
    max_restarts: int = 3
    max_seconds: float = 5.0
    restart: RestartType = "permanent"
    shutdown_ms: int | None = None
    budget: Any = None
    type: Literal["supervisor"] = "supervisor"


class ChildInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One child as `Supervisor.which_children` reports it.

    Fields:
        id: the child id.
        ref: the running incarnation (`AgentRef`, or `Supervisor` for a nested one), or None.
        type: `"worker"` or `"supervisor"`.
        restart: the restart type.
        restarts: how many times this child was restarted (count).
        last_exit_reason: the exit reason of its latest incarnation, None if none ended.

    Mirrors: the tuples of `Supervisor.which_children/1`.
    """

    id: Any
    ref: Any
    type: Literal["worker", "supervisor"]
    restart: RestartType
    restarts: int
    last_exit_reason: Any = None


class SupervisorSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """A point-in-time view of one `Supervisor`, as `Supervisor.snapshot` reports it.

    Fields:
        name, strategy, max_restarts, max_seconds: the supervisor's settings.
        alive: whether it still runs.
        restarts_in_window: restarts charged within the last `max_seconds` seconds (count).
        intensity_left: restarts it may still make in that window before it gives up
            (`max_restarts - restarts_in_window`, never below 0).
        children: one `ChildInfo` per child, in start order (a nested supervisor's `ref` is
            that `Supervisor`).
        exit_reason: None while it runs, then its exit reason.
    """

    name: Any
    strategy: Strategy
    alive: bool
    max_restarts: int
    max_seconds: float
    restarts_in_window: int
    intensity_left: int
    children: tuple[ChildInfo, ...]
    exit_reason: Any = None


class ChildEvent(msgspec.Struct, frozen=True, kw_only=True):
    """What a supervisor's `listener` is told about its children.

    Fields:
        kind: `"started"` (a new incarnation runs) or `"exited"` (an incarnation ended).
        id: the child id.
        ref: the incarnation concerned (`AgentRef` or `Supervisor`).
        reason: the exit reason for `"exited"`, else None.
    """

    kind: Literal["started", "exited"]
    id: Any
    ref: Any
    reason: Any = None


def restart_type(value: Any) -> RestartType:
    if value not in _RESTARTS:
        raise ValueError(f"restart must be one of {list(_RESTARTS)}, got {value!r}")
    return value


def child_spec(module: type, *, name: Any, backend: Any, restart: RestartType = "temporary",
               shutdown_ms: Any = 5_000, resume_session: bool = False,
               **opts: Any) -> ChildSpec:
    """Describe an agent child for a `Supervisor` (its id is `name`).

    Args:
        module: the `GenAgent` subclass. name: the registered name and child id.
        backend: the backend.
        restart: `"permanent"`, `"transient"` or `"temporary"` (default, as the original).
        shutdown_ms: graceful-stop window in milliseconds (non-negative int, or "infinity");
            after it the agent is killed. Default 5_000.
        resume_session: when True, a restart passes the last provider session id the agent
            saw (checkpointed, or reported by a successful turn) as `resume_session_id`, so a
            backend with `resume_session` continues the conversation.
        **opts: every other `start_agent` option, forwarded at each (re)start.

    Returns:
        A frozen `ChildSpec`.

    Raises:
        ValueError: an invalid `restart` or `shutdown_ms`. TypeError: `resume_session` is not
            a bool.

    Warns:
        UserWarning: `resume_session=True` with a backend that has no `resume_session` (its
            restarts cannot resume); an option of `opts` resembles a reserved start option (a
            typo such as `watchdog_msec`; it still goes to `init_agent`).

    Mirrors: `GenAgent.child_spec/2` (docs/pages/contract.md#s2-3; docs: the client API reference)
    plus OTP's `restart` key.
    """
    return build_child_spec(module, name=name, backend=backend, restart=restart,
                            shutdown_ms=shutdown_ms, resume_session=resume_session, opts=opts,
                            warn_as="child_spec")


def build_child_spec(module: type, *, name: Any, backend: Any, restart: RestartType,
                     shutdown_ms: Any, resume_session: bool, opts: dict[str, Any],
                     warn_as: str | None) -> ChildSpec:
    """`child_spec` for gen_agent's own builders: `warn_as` names the public function in the
    near-miss and resume warnings, None skips them (a `Pool` warns once, not per worker)."""
    if not isinstance(resume_session, bool):
        raise TypeError(f"resume_session must be a bool, got {type(resume_session).__name__}")
    if warn_as is not None and resume_session and getattr(backend, "resume_session",
                                                          None) is None:
        warnings.warn(f"{warn_as}: resume_session=True, but the backend {name_of(backend)} "
                      "cannot resume a session (it has no resume_session): each restart "
                      "starts a new conversation. Use a backend with resume_session (claude, "
                      "codex) or drop resume_session=True", UserWarning,
                      stacklevel=outside_level())
    if warn_as is not None:
        warn_near_misses(opts, warn_as)
    return ChildSpec(id=name, module=module, backend=backend, opts=dict(opts),
                     restart=restart_type(restart), shutdown_ms=validate_shutdown(shutdown_ms),
                     resume_session=resume_session)


def start_failure_message(failed: tuple[Any, ...], exc: BaseException) -> str:
    """The message of a supervisor's `failed_to_start_child`: its reason plus the child's own
    detail (gen_agent messages carry no payload text), pointing at the chained exceptions."""
    message = describe_reason(failed)
    child = str(exc) if isinstance(exc, GenAgentError) else ""
    if child.endswith(RAISED_DURING_START):
        return (f"{message} (raised during the child's start: the child's error is __cause__, "
                "the exception it raised is __cause__.__cause__)")
    if child and child != describe_reason(getattr(exc, "reason", None)):
        return f"{message} (the child said: {child}; its error is __cause__)"
    return f"{message} (the child's error is __cause__)"


def name_of(backend: Any) -> str:
    return getattr(backend, "__name__", type(backend).__name__)


def supervisor_spec(children: Iterable[ChildSpec | SupervisorSpec], *, name: Any,
                    strategy: Strategy = "one_for_one", max_restarts: int = 3,
                    max_seconds: float = 5.0, restart: RestartType = "permanent",
                    shutdown_ms: Any = "infinity", budget: Any = None) -> SupervisorSpec:
    """Describe a nested `Supervisor` child (a supervisor under a supervisor).

    Args: as `Supervisor`, plus `restart` (default `"permanent"`) and `shutdown_ms` (how
    long the parent waits for it to stop, milliseconds or "infinity", the default).
    `budget`: a spend cap over every agent below it (a `gen_agent.SharedBudget`, or a
    `gen_agent.ray.ClusterBudget`: the subtrees started on several Ray nodes with it hold one
    cap; docs/pages/scale-out.md#limits-and-budgets-across-nodes), next to the parents'.

    Raises:
        ValueError: an invalid strategy, restart, intensity or `shutdown_ms`.
        TypeError: `budget` is not a spend cap.

    Mirrors: a `type: :supervisor` child spec in OTP.
    """
    children = tuple(children)
    check_tree_args(children, strategy, max_restarts, max_seconds)
    return SupervisorSpec(id=name, children=children, strategy=strategy,
                          max_restarts=max_restarts, max_seconds=max_seconds,
                          restart=restart_type(restart),
                          shutdown_ms=validate_shutdown(shutdown_ms),
                          budget=own_budget("supervisor_spec", budget, None, None))


def check_tree_args(children: Sequence[Any], strategy: Any, max_restarts: Any,
                     max_seconds: Any) -> None:
    if strategy not in _STRATEGIES:
        raise ValueError(f"strategy must be one of {list(_STRATEGIES)}, got {strategy!r}")
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
        raise ValueError(f"max_restarts must be a non-negative int, got {max_restarts!r}")
    if isinstance(max_seconds, bool) or not isinstance(max_seconds, int | float) \
            or not math.isfinite(max_seconds) or max_seconds <= 0:
        raise ValueError(f"max_seconds must be a finite number > 0 (seconds), got {max_seconds!r}")
    seen: set[Any] = set()
    for spec in children:
        if not isinstance(spec, ChildSpec | SupervisorSpec):
            raise TypeError("children must be ChildSpec or SupervisorSpec values (child_spec(), "
                            f"supervisor_spec()), got {type(spec).__name__}")
        if spec.id in seen:
            raise ValueError(f"duplicate child id {spec.id!r}")
        seen.add(spec.id)


def should_restart(restart: RestartType, reason: Any) -> bool:
    """Whether a child of restart type `restart` that exited with `reason` is restarted.

    permanent → always; transient → unless `"normal"`, `"shutdown"` or `("shutdown", x)`;
    temporary → never. Mirrors OTP's restart types.
    """
    if restart == "permanent":
        return True
    if restart == "temporary":
        return False
    graceful = reason in ("normal", "shutdown") or (
        isinstance(reason, tuple) and len(reason) == 2 and reason[0] == "shutdown")
    return not graceful
