"""The startup of the agent actor, as a mixin: `init_agent`, the backend session (started,
resumed by a supervisor, or resumed from the store), `pre_run`, and a failed start, in the
order of the contract's startup sequence (docs/pages/contract.md, "Startup").
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from gen_agent._agent import BASE_STREAM_EVENT, BASE_TOOL_PERMISSION, GenAgent
from gen_agent._context import set_current
from gen_agent._errors import AgentStartError, InitAgentError, PreRunError
from gen_agent._reasons import describe_reason
from gen_agent._runtime import record
from gen_agent._runtime.crash import log_exception
from gen_agent._runtime.work import Phase, type_name
from gen_agent.backend import SessionStartError

#: The detail of an `("init_failed", "error", T)` start error (the exception is chained).
RAISED_DURING_START = "(raised during start; the original exception is __cause__)"


def _with_detail(reason: Any, exc: BaseException) -> str:
    """`str()` of a start error: the reason, and the backend's own message when it has one."""
    shown = describe_reason(reason)
    detail = str(exc)
    if detail and detail != describe_reason(getattr(exc, "reason", None)):
        return f"{shown} ({detail})"
    return shown


class StartupMixin:
    """`on_start` and what it runs, for `AgentActor` (see `agent_actor.py`)."""

    # Provided by AgentActor.
    handle: Any
    name: Any
    module: type
    backend: Any
    opts: Any
    impl: Any
    session: Any
    state: Any
    spend: Any
    durable: Any
    log: Any
    phase: Any
    _init_opts: dict[str, Any]
    _backend_opts: dict[str, Any]
    _init_reply: Any
    _stream_cb: Any
    _handle_info_cb: Any
    _pre_turn_cb: Any
    _post_turn_cb: Any
    _send_info: Any
    _handles_permissions: bool
    _info_fn: Any
    _set_phase: Any
    _on_info: Any
    _terminate: Any
    _exit: Any

    def on_start(self) -> None:
        self.handle.actor_thread = threading.get_ident()
        set_current(self.name, self.handle)
        try:
            self.impl = self.module()
            backend_opts, state = self._init_agent()
            self._backend_opts = backend_opts
            try:
                # resumed from the store when the agent has one (gen_agent.store)
                self.session, state = self.durable.open(
                    self.impl, backend_opts, state, self._start_session)
                if self.durable.resumed and self.opts.spend is None:
                    # The spend caps count what the stored session already spent.
                    self.spend = record.spend_of(self.durable.totals)
            except SessionStartError as exc:
                failed = ("backend_start_failed", exc.reason)
                raise AgentStartError(failed, _with_detail(failed, exc)) from exc
            self.state = state
        except AgentStartError as exc:
            self._fail_start(exc)
            return
        except Exception as exc:  # noqa: BLE001 - reported as ("init_failed", kind, type)
            log_exception(self.log, "ERROR", "gen_agent initialization failed", exc)
            reason = ("init_failed", "error", type_name(exc))
            error = AgentStartError(reason, f"{describe_reason(reason)} {RAISED_DURING_START}")
            error.__cause__ = exc
            self._fail_start(error)
            return
        self._stream_cb = self._optional("handle_stream_event")
        if self._stream_cb is not None and getattr(
                type(self.impl), "handle_stream_event", None) is BASE_STREAM_EVENT:
            self._stream_cb = None  # the default returns state unchanged; skip it per event
        self._handle_info_cb = self._optional("handle_info")
        # The base class's pre_turn/post_turn change nothing: a turn skips calling them.
        self._pre_turn_cb = self._overridden("pre_turn", GenAgent.pre_turn)
        self._post_turn_cb = self._overridden("post_turn", GenAgent.post_turn)
        self._send_info = self._info_fn()
        # decided once: a turn builds its permission function only for an agent that has one
        handles = getattr(type(self.impl), "handle_tool_permission", None)
        self._handles_permissions = handles is not None and handles is not BASE_TOOL_PERMISSION
        check = getattr(self.backend, "check_prompt", None)  # refuses prompts at the client
        self.handle.check_prompt = None if check is None else functools.partial(
            check, self.session)
        self._set_phase(Phase.IDLE)
        self._init_reply.resolve(self.handle)
        self._run_pre_run()
        self._prewarm()
        if self.durable.interrupted is not None and self.phase is not Phase.STOPPING:
            self._on_info(self.durable.interrupted)  # the turn the last owner did not finish

    def _start_session(self, backend_opts: dict[str, Any]) -> Any:
        # A supervisor restarting an agent passes the old session id (resume_session_id);
        # backends that can resume a conversation do, the others start afresh.
        session_id = self.opts.resume_session_id
        resume = getattr(self.backend, "resume_session", None)
        if session_id is not None and resume is not None:
            self.handle.session_id = session_id
            return resume(session_id, backend_opts)
        return self.backend.start_session(backend_opts)

    def _init_agent(self) -> tuple[dict[str, Any], Any]:
        try:
            result = self.impl.init_agent(dict(self._init_opts))
        except InitAgentError as exc:
            raise AgentStartError(("init_agent_failed", exc.reason)) from exc
        if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], dict)):
            raise AgentStartError(("init_agent_failed", result))
        return result

    def _fail_start(self, error: AgentStartError) -> None:
        # Free the name before the starter hears of the failure, so it can retry at once.
        self.phase = Phase.STOPPING
        self.durable.close()
        self._exit(error.reason, unregister=True, cause=error.__cause__)
        self._init_reply.fail(error)

    def _run_pre_run(self) -> None:
        fn = self._optional("pre_run")
        if fn is None:
            return
        try:
            self.state = fn(self.state)
        except PreRunError as exc:
            self._terminate(("pre_run_failed", exc.reason), cause=exc)
        except Exception as exc:  # noqa: BLE001 - stops the agent with the crash type
            log_exception(self.log, "ERROR", "gen_agent pre_run/1 crashed", exc)
            self._terminate(("pre_run_crashed", type_name(exc)), cause=exc)

    def _prewarm(self) -> None:
        """The backend's optional `prewarm_session`: start what the first turn needs, in the
        background (it must not block); a raise is logged, never a start failure."""
        prewarm = getattr(self.backend, "prewarm_session", None)
        if prewarm is None or self.phase is Phase.STOPPING:
            return
        try:
            prewarm(self.session, info=self._send_info,
                    handles_permissions=self._handles_permissions, output=self.opts.output)
        except Exception as exc:  # noqa: BLE001 - the first turn reports what failed
            log_exception(self.log, "WARNING", "gen_agent prewarm_session failed", exc)

    def _optional(self, name: str) -> Any:
        return getattr(self.impl, name, None)

    def _overridden(self, name: str, base: Any) -> Any:
        """The agent's callback `name`, or None when it has none or it is `base` itself."""
        fn = self._optional(name)
        return None if fn is None or getattr(fn, "__func__", None) is base else fn
