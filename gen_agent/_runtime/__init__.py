"""The actor runtime: everything behind the public client API.

Private: nothing here is public API, and names may change between releases. The map:

- `server`: `AgentActor`, the pykka actor that owns an agent's state machine (contract §4).
- `controls`: control calls (status, poll, halt/resume, drain, reset, checkpoints, §7.3).
- `request`: the agent's bookkeeping records: requests, the self-chain retry slot, the active turn.
- `turn`: turn tasks on pooled threads and the byte-bounded event channel back to the actor.
- `capture`: per-turn event capture, compact retention and the lossless admission check (§6).
- `pending`: bounded FIFO queues with count and byte limits (§4.17).
- `handle`: the incarnation handle an `AgentRef` addresses.
- `reply`: once-only deferred replies to blocked callers.
- `results`: the poll cache of finished requests.
- `timers`: the persistent timer service (watchdogs, delayed work).
- `cancel`: `CancelSignal`, a turn's set-once cancel flag handed to backends.
- `context`: thread-local identity of the agent a thread works for, `current_name()` (§2.22).
- `messages`: the actor's mailbox message records.
- `options`: parsing and validation of the reserved start options (§2.2).
"""
