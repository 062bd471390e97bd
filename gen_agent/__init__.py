"""gen_agent: long-lived LLM agents as supervised pykka actors.

A port of the Elixir library GenAgent ("a GenServer, but every call is a prompt"). An agent
is an actor that owns its state and a backend session; every `ask`, `tell` and `notify`
becomes a turn, each turn runs in its own task, and your `GenAgent` subclass decides what
happens after each one. See `docs/pages/index.md` for the guide; the behavioural contract is the
Elixir original's, mapped to Python as documented in `docs/pages/elixir-mapping.md`.

Logging goes through loguru and is disabled for "gen_agent" here; an application enables it
with `logger.enable("gen_agent")`.
"""

from loguru import logger as _logger

from gen_agent._agent import GenAgent, Halt, NoReply, Proceed, Prompt, Skip
from gen_agent._agent_ref import AgentRef
from gen_agent._client import (
    ask,
    backend_session,
    cancel_request,
    demonitor,
    drain,
    halt,
    interrupt,
    interrupt_request,
    list_agents,
    monitor,
    notify,
    notify_ack,
    poll,
    resend,
    reset_session,
    resume,
    runtime_snapshot,
    send,
    send_after,
    start_agent,
    status,
    stop,
    tell,
    tell_with_completion,
    whereis,
)
from gen_agent._context import current_name, current_request
from gen_agent._debug import set_debug
from gen_agent._deprecate import install_moved_modules as _install_moved_modules
from gen_agent._errors import (
    AgentDown,
    AgentNotFound,
    AgentStartError,
    AlreadyStarted,
    CallTimeout,
    CheckpointError,
    GenAgentError,
    InitAgentError,
    PreRunError,
    RequestError,
    TurnError,
)
from gen_agent._event import Event
from gen_agent._host import AgentHost, HostOverload, HostStatus
from gen_agent._pool import Pool, PoolRef, PoolStatus, RetryPolicy
from gen_agent._request_options import RequestInfo, RequestOptions
from gen_agent._request_ref import RequestRef
from gen_agent._response import EventCoverage, Omission, Response, TextAccumulator
from gen_agent._size import term_size
from gen_agent._status import (
    CaptureOverflow,
    CurrentTurn,
    OverloadInfo,
    PollResult,
    RuntimeSnapshot,
    Status,
)
from gen_agent._streaming import AttachedTurn, TurnStream, attach, stream
from gen_agent._supervisor import (
    ChildEvent,
    ChildInfo,
    ChildSpec,
    Supervisor,
    SupervisorSpec,
    child_spec,
    supervisor_spec,
)
from gen_agent._system import AgentSystem, shutdown
from gen_agent.backend import (
    Backend,
    BackendError,
    Diagnostics,
    DispatchError,
    ResetError,
    SessionStartError,
    TurnContext,
)

_logger.disable("gen_agent")
_install_moved_modules()

__version__ = "0.1.0"

__all__ = [
    "AgentDown",
    "AgentHost",
    "AgentNotFound",
    "AgentRef",
    "AgentStartError",
    "AgentSystem",
    "AlreadyStarted",
    "AttachedTurn",
    "Backend",
    "BackendError",
    "CallTimeout",
    "CaptureOverflow",
    "CheckpointError",
    "ChildEvent",
    "ChildInfo",
    "ChildSpec",
    "CurrentTurn",
    "Diagnostics",
    "DispatchError",
    "Event",
    "EventCoverage",
    "GenAgent",
    "GenAgentError",
    "Halt",
    "HostOverload",
    "HostStatus",
    "InitAgentError",
    "NoReply",
    "Omission",
    "OverloadInfo",
    "PollResult",
    "Pool",
    "PoolRef",
    "PoolStatus",
    "PreRunError",
    "Proceed",
    "Prompt",
    "RequestError",
    "RequestInfo",
    "RequestOptions",
    "RequestRef",
    "ResetError",
    "Response",
    "RetryPolicy",
    "RuntimeSnapshot",
    "SessionStartError",
    "Skip",
    "Status",
    "Supervisor",
    "SupervisorSpec",
    "TextAccumulator",
    "TurnContext",
    "TurnError",
    "TurnStream",
    "ask",
    "attach",
    "backend_session",
    "cancel_request",
    "child_spec",
    "current_name",
    "current_request",
    "demonitor",
    "drain",
    "halt",
    "interrupt",
    "interrupt_request",
    "list_agents",
    "monitor",
    "notify",
    "notify_ack",
    "poll",
    "resend",
    "reset_session",
    "resume",
    "runtime_snapshot",
    "send",
    "send_after",
    "set_debug",
    "shutdown",
    "start_agent",
    "status",
    "stop",
    "stream",
    "supervisor_spec",
    "tell",
    "tell_with_completion",
    "term_size",
    "whereis",
]
