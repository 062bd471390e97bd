"""The warm Claude parts of pre-warm, replacement and spares (the machinery is
`gen_agent.backends._subprocess.warm_fleet`): a process is ready once the CLI answered its
`initialize` control request; a spare's key adds the agent's Python tools to the argv (which
holds the system prompt, MCP config, allowed tools, schema and permission flags), cwd and
environment.

Mirrors: no Elixir original (GenAgent runs one CLI per turn).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from gen_agent.backends._subprocess.claude_mcp import McpServer
from gen_agent.backends._subprocess.claude_warm import (
    PROVIDER,
    WarmSlot,
    _ClaudeProcess,
    _TurnLines,
)
from gen_agent.backends._subprocess.process import ChildProcess
from gen_agent.backends._subprocess.warm_fleet import (
    Prewarmer,
    PrewarmSlot,
    SpareSlot,
    WarmFleet,
    spawn_key,
)

__all__ = ["WARM_UP_S", "ClaudePrewarmer", "FleetSlot", "warm_up"]

WARM_UP_S: Final = 15.0
"""The bound on each wait of `warm_up` (`initialize`, then `get_context_usage`; seconds)."""


def warm_up(process: _ClaudeProcess, wait_s: float = WARM_UP_S) -> bool:
    """Once `process` answered `initialize` (waited for up to `wait_s` seconds), send it the
    `get_context_usage` control request and wait up to `wait_s` seconds for the answer,
    which is dropped: the CLI builds and caches its tool schemas for it (on 2.1.197 the
    first turn's largest one-time cost), sending `count_tokens` requests of its own. True
    when it answered; False on a timeout or when the CLI is gone (the process is used as
    it is then). Any thread but the process's reader."""
    if not process.ready.wait(wait_s):
        return False
    try:
        answer = process.send_control({"subtype": "get_context_usage"}, wait_s=wait_s)
    except OSError:
        return False
    return answer is not None


class ClaudePrewarmer(Prewarmer):
    """How one warm Claude session starts its process without a turn; built by
    `ClaudeCLI.prewarm_session`.

    Args:
        spec: `spec(session_id)` -> the `ChildProcess.spawn` keyword arguments of a process
            resuming `session_id` (None: a new conversation), `owner` excluded.
        mcp: `mcp()` -> a new `McpServer` for the agent's Python tools, or None.
        info: the agent's `handle_info` sink.
        idle_timeout_ms, tail_bytes, json_schema: as `WarmSlot.acquire` takes them.
        fleet: a `WarmFleet` to take a spare from (new sessions only), or None.
        permission_prompt: whether `spec` passes `--permission-prompt-tool stdio`.
        context: run `warm_up` on a process started for a new session (the
            `prewarm_context` option).
    """

    provider = PROVIDER

    def __init__(self, spec: Callable[[str | None], dict[str, Any]],
                 mcp: Callable[[], McpServer | None], info: Callable[[Any], None] | None, *,
                 idle_timeout_ms: int | None, tail_bytes: int, json_schema: str | None,
                 fleet: WarmFleet | None = None, permission_prompt: bool = False,
                 context: bool = False) -> None:
        super().__init__(info, idle_timeout_ms=idle_timeout_ms, tail_bytes=tail_bytes,
                         fleet=fleet)
        self.spec = spec
        self.mcp = mcp
        self.json_schema = json_schema
        self.permission_prompt = permission_prompt  # (in `spec`'s argv; kept for a reset)
        self.context = context

    def new_process(self, slot: Any, session_id: str | None, info: Any) -> _ClaudeProcess:
        mcp = self.mcp()
        child = ChildProcess.spawn(**self.spec(session_id), owner=slot)
        process = _ClaudeProcess(slot, child, self.idle_timeout_ms, info, mcp,
                                 self.json_schema, resumed=session_id,
                                 tail_bytes=self.tail_bytes)
        with slot._cond:
            slot.processes_started += 1
        return process

    def warm(self, process: _ClaudeProcess) -> None:
        if self.context:
            warm_up(process)

    def spare_slot(self) -> _SpareSlot:
        return _SpareSlot()

    def key(self) -> bytes:
        mcp = self.mcp()
        return spawn_key(self.spec(None), self,
                         tools=None if mcp is None else mcp._listing, context=self.context)

    def resume_of(self, dead: _ClaudeProcess) -> str | None:
        return dead.live.child.session_id or dead.session_id or dead.resumed

    def adopt(self, process: _ClaudeProcess, slot: Any) -> None:
        super().adopt(process, slot)
        process.mcp = self.mcp()  # the session's own tools


class FleetSlot(PrewarmSlot[_ClaudeProcess, _TurnLines], WarmSlot):
    """The `WarmSlot` of a `ClaudeSession`: with `prewarm` (a `ClaudePrewarmer`, or None) it
    replaces a process that died between turns and ends a start in flight when it stops."""


class _SpareSlot(SpareSlot[_ClaudeProcess, _TurnLines], WarmSlot):
    """The placeholder slot of a spare `claude` until a session takes it."""
