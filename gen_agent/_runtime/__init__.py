"""The actor runtime: everything behind the public client API, sealed behind this namespace.

Private: nothing here is public API, and names may change between releases. Code outside
`_runtime/` imports only the names below, never a submodule (`tests/test_layers.py` enforces
it), so the runtime's insides can move without touching the rest of the package. The map:

- `actor`: `ActorBase`, the loop every actor of the package runs (agents, pool dispatchers).
- `calls`: every client call, defined once (exported as the namespace `calls`).
- `agent_actor`: `AgentActor`, the pykka actor that owns an agent's state machine (see
  docs/pages/contract.md for the contract it follows).
- `controls`: control calls (status, poll, halt/resume, drain, reset, checkpoints).
- `work`: the agent's bookkeeping records: requests, the self-chain retry slot, the active turn.
- `turn`: turn tasks on pooled threads and the byte-bounded event channel back to the actor.
- `capture`: per-turn event capture, compact retention and the lossless admission check.
- `pending`: bounded FIFO queues with count and byte limits.
- `handle`: the incarnation handle an `AgentRef` addresses.
- `registry`: the names of an `AgentSystem`, as the runtime resolves and releases them.
- `reply`: `DeferredReply`, the once-only reply a blocked caller waits on.
- `results`: the poll cache of finished requests.
- `mailbox`: the actor's mailbox message records.
- `options`: parsing and validation of the reserved start options.
- `replay`: the replay buffer of rejoinable turns and the deactivation check (`AgentHost`).

Below the runtime, as leaves every layer may use: `gen_agent._cancel` (a turn's cancel
signal), `gen_agent._context` (which agent and request a thread works for) and
`gen_agent._timers` (the timer service).
"""

from gen_agent._runtime import calls
from gen_agent._runtime.actor import ActorBase
from gen_agent._runtime.agent_actor import AgentActor
from gen_agent._runtime.crash import log_exception
from gen_agent._runtime.handle import AgentHandle
from gen_agent._runtime.mailbox import (
    AbandonAskMsg,
    AskMsg,
    CancelRequestMsg,
    DrainMsg,
    GetSessionMsg,
    HaltMsg,
    InfoMsg,
    InterruptMsg,
    InterruptRequestMsg,
    NotifyMsg,
    PollMsg,
    ResetSessionMsg,
    ResumeMsg,
    SnapshotMsg,
    StatusMsg,
    StopMsg,
    TellMsg,
)
from gen_agent._runtime.options import (
    build_options,
    outside_level,
    split_options,
    validate_shutdown,
    warn_near_misses,
)
from gen_agent._runtime.registry import Registry
from gen_agent._runtime.replay import DeactivateMsg
from gen_agent._runtime.reply import DeferredReply, await_reply, call_in_loop, set_once
from gen_agent._runtime.startup import RAISED_DURING_START
from gen_agent._runtime.turn import WORKERS
from gen_agent._runtime.watch import Watch

__all__ = [
    "RAISED_DURING_START",
    "WORKERS",
    "AbandonAskMsg",
    "ActorBase",
    "AgentActor",
    "AgentHandle",
    "AskMsg",
    "CancelRequestMsg",
    "DeactivateMsg",
    "DeferredReply",
    "DrainMsg",
    "GetSessionMsg",
    "HaltMsg",
    "InfoMsg",
    "InterruptMsg",
    "InterruptRequestMsg",
    "NotifyMsg",
    "PollMsg",
    "Registry",
    "ResetSessionMsg",
    "ResumeMsg",
    "SnapshotMsg",
    "StatusMsg",
    "StopMsg",
    "TellMsg",
    "Watch",
    "await_reply",
    "build_options",
    "call_in_loop",
    "calls",
    "log_exception",
    "outside_level",
    "set_once",
    "split_options",
    "validate_shutdown",
    "warn_near_misses",
]
