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

from gen_agent._accounting import BudgetExceeded, SharedBudget, Spend
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
    interrupt_receipt,
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
from gen_agent._conversation import Message
from gen_agent._debug import set_debug
from gen_agent._delivered import Completion, Down, StreamEvent
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
from gen_agent._host import AgentHost, AsyncHost, HostOverload, HostStatus, host_spec
from gen_agent._limits import LimitStatus, ProviderLimit
from gen_agent._output import InvalidOutput, parse_output, schema_of, strict_schema_of
from gen_agent._permission import Allow, Deny, PermissionDecision, ToolPermissionRequest
from gen_agent._pool import Pool, PoolRef, PoolStatus, RetryPolicy, WorkerInfo
from gen_agent._portable import (
    PortableError,
    PortableObject,
    from_portable,
    is_portable,
    to_exception,
    to_portable,
)
from gen_agent._request_options import RequestInfo, RequestOptions
from gen_agent._request_ref import RequestRef
from gen_agent._response import EventCoverage, Omission, Response, TextAccumulator
from gen_agent._size import term_size
from gen_agent._status import (
    CaptureOverflow,
    CurrentTurn,
    InterruptReceipt,
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
    SupervisorSnapshot,
    SupervisorSpec,
    child_spec,
    supervisor_spec,
)
from gen_agent._system import AgentSystem, current_system, shutdown
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
    "Allow",
    "AlreadyStarted",
    "AsyncHost",
    "AttachedTurn",
    "Backend",
    "BackendError",
    "BudgetExceeded",
    "CallTimeout",
    "CaptureOverflow",
    "CheckpointError",
    "ChildEvent",
    "ChildInfo",
    "ChildSpec",
    "Completion",
    "CurrentTurn",
    "Deny",
    "Diagnostics",
    "DispatchError",
    "Down",
    "Event",
    "EventCoverage",
    "GenAgent",
    "GenAgentError",
    "Halt",
    "HostOverload",
    "HostStatus",
    "InitAgentError",
    "InterruptReceipt",
    "InvalidOutput",
    "LimitStatus",
    "Message",
    "NoReply",
    "Omission",
    "OverloadInfo",
    "PermissionDecision",
    "PollResult",
    "Pool",
    "PoolRef",
    "PoolStatus",
    "PortableError",
    "PortableObject",
    "PreRunError",
    "Proceed",
    "Prompt",
    "ProviderLimit",
    "RequestError",
    "RequestInfo",
    "RequestOptions",
    "RequestRef",
    "ResetError",
    "Response",
    "RetryPolicy",
    "RuntimeSnapshot",
    "SessionStartError",
    "SharedBudget",
    "Skip",
    "Spend",
    "Status",
    "StreamEvent",
    "Supervisor",
    "SupervisorSnapshot",
    "SupervisorSpec",
    "TextAccumulator",
    "ToolPermissionRequest",
    "TurnContext",
    "TurnError",
    "TurnStream",
    "WorkerInfo",
    "ask",
    "attach",
    "backend_session",
    "cancel_request",
    "child_spec",
    "current_name",
    "current_request",
    "current_system",
    "demonitor",
    "drain",
    "from_portable",
    "halt",
    "host_spec",
    "interrupt",
    "interrupt_receipt",
    "interrupt_request",
    "is_portable",
    "list_agents",
    "monitor",
    "notify",
    "notify_ack",
    "parse_output",
    "poll",
    "resend",
    "reset_session",
    "resume",
    "runtime_snapshot",
    "schema_of",
    "send",
    "send_after",
    "set_debug",
    "shutdown",
    "start_agent",
    "status",
    "stop",
    "stream",
    "strict_schema_of",
    "supervisor_spec",
    "tell",
    "tell_with_completion",
    "term_size",
    "to_exception",
    "to_portable",
    "whereis",
]
