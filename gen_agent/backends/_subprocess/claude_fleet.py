"""The warm Claude parts of pre-warm, replacement and spares (the machinery is
`gen_agent.backends._subprocess.warm_fleet`): a process is ready once the CLI answered its
`initialize` control request; a spare's key adds the agent's Python tools to the argv (which
holds the system prompt, MCP config, allowed tools, schema and permission flags), cwd and
environment.

Mirrors: no Elixir original (GenAgent runs one CLI per turn).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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

__all__ = ["ClaudePrewarmer", "FleetSlot"]


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
    """

    provider = PROVIDER

    def __init__(self, spec: Callable[[str | None], dict[str, Any]],
                 mcp: Callable[[], McpServer | None], info: Callable[[Any], None] | None, *,
                 idle_timeout_ms: int | None, tail_bytes: int, json_schema: str | None,
                 fleet: WarmFleet | None = None, permission_prompt: bool = False) -> None:
        super().__init__(info, idle_timeout_ms=idle_timeout_ms, tail_bytes=tail_bytes,
                         fleet=fleet)
        self.spec = spec
        self.mcp = mcp
        self.json_schema = json_schema
        self.permission_prompt = permission_prompt  # (in `spec`'s argv; kept for a reset)

    def new_process(self, slot: Any, session_id: str | None, info: Any) -> _ClaudeProcess:
        mcp = self.mcp()
        child = ChildProcess.spawn(**self.spec(session_id), owner=slot)
        process = _ClaudeProcess(slot, child, self.idle_timeout_ms, info, mcp,
                                 self.json_schema, resumed=session_id,
                                 tail_bytes=self.tail_bytes)
        with slot._cond:
            slot.processes_started += 1
        return process

    def spare_slot(self) -> _SpareSlot:
        return _SpareSlot()

    def key(self) -> bytes:
        mcp = self.mcp()
        return spawn_key(self.spec(None), self,
                         tools=None if mcp is None else mcp._listing)

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
