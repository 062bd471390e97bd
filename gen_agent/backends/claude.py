"""`ClaudeCLI`: the Claude Code CLI backend (print mode, stream-json output).

Each turn runs `claude -p --output-format stream-json --verbose [options] -- PROMPT` as a child
in its own process group (the prompt is one argument, never seen by a shell), reads its stdout
line by line and normalizes every line into `Event`s (docs/pages/contract.md#s7-6, first bullet;
docs: the backend guide). The first
line that carries a `session_id` is checkpointed (§7.3) and the next turn resumes that
conversation with `--resume ID`.

Two layers:

- `ClaudeStreamTranslator` (in `_claude_stream`, re-exported here): pure; one decoded
  stream-json line in, `Event`s out, with the per-turn state that deduplicates tool calls and
  streamed text. Tested on recorded output of the real CLI, without a process.
- `ClaudeCLI`: the backend hooks, written once for both CLI backends in
  `gen_agent.backends._subprocess.base` (which spawns and reads the child through `_process`); this
  module gives the options and the command line.

Normalization (what each line becomes):

- `system`/`init` → `session` {session_id, model, cwd, tools, permission_mode,
  claude_code_version};
- `system` with another subtype (e.g. `api_retry`) → `claude.<subtype>` with the line's fields;
- `stream_event` text delta → `text` (the first delta of a text block has `message_boundary`);
- `assistant` → `text` (adjacent text blocks joined, `message_boundary: True`, only the text
  not already streamed), `tool_use` (once per id), `claude.<block type>` for other blocks;
- `user` → `tool_result` (once per `tool_use_id`);
- `result` → `usage` (when the line has none: summed over the assistant messages, each
  provider message id counted once, from its latest line), then the terminal: `result` on
  success; `error` with a `BackendError` reason when `is_error` is true (whatever the
  subtype) or the subtype is `error*`;
- stdout ending without a `result` line after a `--resume` the CLI refused on stderr
  ("No conversation found with session ID") → terminal `error` of kind
  `"session_not_found"`; the agent then forgets the id (see `docs/pages/errors.md`);
- `error` → terminal `error` with a `BackendError` reason;
- any other type → `claude.<type>` with the line's fields;
- a line that is not JSON → `claude.unparsed` {size_bytes, line (its first 1 KiB)}.

Messages from a sub-agent (a line with `parent_tool_use_id`) never add to the turn's text: their
text is `claude.subagent_text`; their tool events keep their kinds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import msgspec

from gen_agent._event import Event
from gen_agent._output import schema_of
from gen_agent._permission import DEFAULT_PERMISSION_TIMEOUT_MS
from gen_agent.backend import BackendError, SessionStartError, TurnContext
from gen_agent.backends._option_checks import (
    check_warm_only,
    duration_ms,
    int_at_least,
    is_arg,
    is_arg_seq,
    is_bool,
    is_str,
    one_of,
)
from gen_agent.backends._subprocess.base import CLI_CHECKS, CLIBackend, CLIOptions, CLISession
from gen_agent.backends._subprocess.claude_fleet import ClaudePrewarmer, FleetSlot
from gen_agent.backends._subprocess.claude_mcp import McpServer
from gen_agent.backends._subprocess.claude_steer import steer as claude_steer
from gen_agent.backends._subprocess.claude_stream import (
    PROVIDER,
    SESSION_NOT_FOUND,
    ClaudeStreamTranslator,
    decode_line,
    translate_lines,
)
from gen_agent.backends._subprocess.claude_warm import WarmSlot, warm_turn
from gen_agent.backends._subprocess.process import ChildProcess
from gen_agent.backends._subprocess.warm_fleet import WarmFleet, wait_ready
from gen_agent.backends.warm import (
    DEFAULT_IDLE_TIMEOUT_MS,
    DEFAULT_INTERRUPT_GRACE_MS,
    stop_grace_s,
)

__all__ = [
    "INSTALL_HINT",
    "MODES",
    "OPTIONS",
    "PERMISSION_MODES",
    "PROVIDER",
    "ClaudeCLI",
    "ClaudeOptions",
    "ClaudeSession",
    "ClaudeStreamTranslator",
    "WarmFleet",
    "decode_line",
    "translate_lines",
]

INSTALL_HINT: Final = (
    "install the Claude Code CLI with `npm install -g @anthropic-ai/claude-code` "
    "(or set the `cli_path` option to its `claude` executable)"
)
"""What the "not found" errors tell the user to install."""

PERMISSION_MODES: Final = frozenset(
    {"acceptEdits", "auto", "bypassPermissions", "default", "dontAsk", "plan"}
)


# -- options -------------------------------------------------------------------------------


class ClaudeOptions(CLIOptions, frozen=True, kw_only=True):
    """The validated options of a `ClaudeCLI` session (see `OPTIONS` for the accepted keys).

    Fields:
        cli_path: the `claude` executable (a name looked up on PATH, or a path, relative to
            the caller's working directory at `start_agent`).
        cwd: the working directory of the CLI (an existing directory), or None for ours.
        env: environment variables for the CLI, over our own environment (or alone, see
            `inherit_env`).
        inherit_env: start from our own environment (`os.environ`); False gives the CLI
            `env` only (tests use it to keep a developer's credentials away from the CLI).
        session_id: a conversation to resume on the first turn (`--resume`), or None.
        extra_args: further arguments placed before the prompt, as given.
        max_line_bytes: the bound on one stdout line (bytes; a longer line fails the turn).
        stderr_tail_bytes: how much of the CLI's stderr to keep for errors (bytes).
        exit_grace_ms: how long the CLI may run after its result line before SIGTERM (ms).
        term_grace_ms: how long between SIGTERM and SIGKILL (ms).
        model: `--model`, or None for the CLI's default.
        system_prompt: `--system-prompt`, or None.
        append_system_prompt: `--append-system-prompt`, or None.
        allowed_tools: `--allowedTools` entries (e.g. `("Bash", "Read")`).
        disallowed_tools: `--disallowedTools` entries.
        permission_mode: `--permission-mode` (one of `PERMISSION_MODES`), or None.
        max_turns: `--max-turns` (count, >= 1), or None.
        add_dirs: `--add-dir` directories.
        mcp_config: `--mcp-config` (a file path or a JSON string), or None.
        settings: `--settings` (a file path or a JSON string), or None.
        dangerously_skip_permissions: pass `--dangerously-skip-permissions`.
        include_partial_messages: pass `--include-partial-messages` (text streams as deltas).
        mode: `"warm"` (default): one long-lived `claude` process per session, fed one
            stream-json `user` line per turn; `"per_turn"`: a new process per turn (the
            prompt one argument), resuming with `--resume`.
        idle_timeout_ms: warm mode: close the process after this long without a turn (ms;
            default 15 min). The next turn resumes the conversation on a new process.
        interrupt_grace_ms: warm mode: how long an interrupted turn may take to settle after
            the `interrupt` control request before the process tree is killed (ms).
        permission_timeout_ms: warm mode: how long a tool permission request waits for
            `handle_tool_permission` before it is denied (ms).
        tools: warm mode: the agent's Python tools (`gen_agent.tools.Tool`s, made from the
            functions or callables given), offered to the CLI as the in-process MCP server
            `gen_agent` (the model calls them `mcp__gen_agent__<name>`). Per-turn mode
            refuses them at start.
        prewarm: warm mode: start the process in the background once the agent has started
            (and after `reset_session`), not at the first turn; a process that dies between
            turns is then replaced at once, resuming the session (see
            `gen_agent.backends._subprocess.warm_fleet`). Default False (no process before a turn;
            True when `fleet` is given).
        fleet: warm mode: a `WarmFleet` of spare processes shared with other agents; a new
            session (no id to resume) of an identical configuration takes one at start.
        prewarm_context: with `prewarm` or `fleet`: once a process started ahead of a new
            session's first turn (no id to resume) answered `initialize`, ask it for its
            context usage (the `get_context_usage` control request) before it counts as
            ready. The CLI then builds and caches its tool schemas, the main one-time cost
            of its first turn (docs/pages/backends/claude.md#pre-warm-and-spares); the
            turn's request and the transcript are unchanged (checked on 2.1.197), but the
            CLI sends `count_tokens` requests to the model API for it (7 on 2.1.197; it
            falls back to a small model request when that endpoint fails). Default False.
    """

    cli_path: str = "claude"
    model: str | None = None
    system_prompt: str | None = None
    append_system_prompt: str | None = None
    allowed_tools: tuple[str, ...] = ()
    disallowed_tools: tuple[str, ...] = ()
    permission_mode: str | None = None
    max_turns: int | None = None
    add_dirs: tuple[str, ...] = ()
    mcp_config: str | None = None
    settings: str | None = None
    dangerously_skip_permissions: bool = False
    include_partial_messages: bool = False
    mode: str = "warm"
    idle_timeout_ms: int = DEFAULT_IDLE_TIMEOUT_MS
    interrupt_grace_ms: int = DEFAULT_INTERRUPT_GRACE_MS
    permission_timeout_ms: int = DEFAULT_PERMISSION_TIMEOUT_MS
    tools: tuple[Any, ...] = ()
    prewarm: bool | None = None
    fleet: WarmFleet | None = None
    prewarm_context: bool = False


MODES: Final = frozenset({"warm", "per_turn"})
"""The values of the `mode` option."""

OPTIONS: Final = frozenset(ClaudeOptions.__struct_fields__)
"""The option keys `ClaudeCLI.start_session` accepts."""

_CHECKS: Final = {
    **CLI_CHECKS,
    "model": (is_arg, "a non-empty str"),
    "system_prompt": (is_str, "a str"),
    "append_system_prompt": (is_str, "a str"),
    "allowed_tools": (is_arg_seq, "a list of non-empty str"),
    "disallowed_tools": (is_arg_seq, "a list of non-empty str"),
    "permission_mode": one_of(PERMISSION_MODES),
    "max_turns": (int_at_least(1), "an int >= 1"),
    "add_dirs": (is_arg_seq, "a list of non-empty str"),
    "mcp_config": (is_arg, "a non-empty str"),
    "settings": (is_arg, "a non-empty str"),
    "dangerously_skip_permissions": (is_bool, "a bool"),
    "include_partial_messages": (is_bool, "a bool"),
    "mode": one_of(MODES),
    "idle_timeout_ms": duration_ms(1),
    "interrupt_grace_ms": duration_ms(0),
    "permission_timeout_ms": duration_ms(1),
    "tools": (lambda v: isinstance(v, list | tuple) and all(_is_tool(t) for t in v),
              "a list of functions or gen_agent.tools.Tool"),
    "prewarm": (is_bool, "a bool"),
    "fleet": (lambda v: isinstance(v, WarmFleet), "a gen_agent.backends.claude.WarmFleet"),
    "prewarm_context": (is_bool, "a bool"),
}


# -- the session and the backend -------------------------------------------------------------


class ClaudeSession(CLISession, frozen=True, kw_only=True):
    """A `ClaudeCLI` session: options plus the conversation to resume. Immutable value.

    Fields:
        options: the validated `ClaudeOptions`.
        cli: the resolved path of the `claude` executable.
        session_id: the CLI session to resume on the next turn (`--resume`), or None for a
            new conversation.
        turns: successful turns so far (count).
        runner: the holder of the current turn's child process (per-turn mode; shared by
            copies).
        warm: the warm process and the session's totals (warm mode; shared by copies).
        json_schema: the JSON schema (encoded) a command line passes as `--json-schema`, or
            None. Set only on the copy `prompt` builds a turn's command from (the turn's
            `RequestOptions.output`, gen_agent._output); the agent's session keeps None.

    Thread-safety: immutable; the runner and the warm slot inside are thread-safe.
    """

    options: ClaudeOptions
    session_id: str | None = None
    warm: WarmSlot = msgspec.field(default_factory=FleetSlot)
    json_schema: str | None = None

    @property
    def pid(self) -> int | None:
        """Warm mode: the live `claude` process id, or None (per-turn mode: always None)."""
        return self.warm.pid

    @property
    def cost_usd(self) -> float:
        """Warm mode: the session's total cost so far (US dollars, over every process)."""
        return self.warm.cost_usd

    def wait_warm(self, timeout: float) -> bool:
        """Warm mode: wait up to `timeout` seconds until the session has an idle live process
        that answered `initialize` (a pre-warm or a replacement is ready). True when it
        has; False on timeout (for tests and benchmarks)."""
        return wait_ready(self.warm, timeout)


class ClaudeCLI(CLIBackend[ClaudeSession]):
    """The Claude Code CLI backend; pass the class itself as the agent's backend.

    Backend options (returned by `init_agent`; see `ClaudeOptions` for each one's meaning,
    default and unit): `cli_path`, `cwd`, `env`, `inherit_env`, `model`, `system_prompt`,
    `append_system_prompt`, `allowed_tools`, `disallowed_tools`, `permission_mode`,
    `max_turns`, `add_dirs`, `mcp_config`, `settings`, `dangerously_skip_permissions`,
    `include_partial_messages`, `session_id`, `extra_args`, `max_line_bytes`,
    `stderr_tail_bytes`, `exit_grace_ms`, `term_grace_ms`, `mode`, `idle_timeout_ms`,
    `interrupt_grace_ms`, `permission_timeout_ms`, `tools` (Python tools, warm mode),
    `prewarm`, `fleet` and `prewarm_context` (warm mode: start the process before the first
    turn, spares, and have it build its tool schemas then). `no_session_persistence` is
    rejected (resuming needs the CLI's saved session).

    Hooks (shared with `CodexCLI`): `start_session` validates the options and finds the CLI
    (no process); `resume_session(session_id, opts)` starts resuming that conversation;
    `prompt` runs one `claude` child per turn and streams its events, checkpointing the first
    session id; `update_session` / `checkpoint_session` keep the id to `--resume`;
    `reset_session` forgets it; `cancel` and `terminate_session` kill the running child's
    process tree.

    Errors (reasons are data): option errors at start are `SessionStartError` with
    `("unknown_option", key)` or `("invalid_option", key, value)`; every provider failure is
    a `BackendError` with provider `"claude"`, as a `SessionStartError` / `DispatchError`
    reason or as the `reason` of a terminal `error` event.

    Thread-safety: every hook may run in any thread; `cancel` may run while `prompt`'s stream
    is being read in another thread.

    Mirrors: `GenAgentClaude` (docs/pages/contract.md#s7-6, first bullet; docs: the backend guide).
    """

    _PROVIDER = PROVIDER
    _INSTALL_HINT = INSTALL_HINT
    _OPTIONS = ClaudeOptions
    _CHECKS = _CHECKS
    _REJECTED = {
        "no_session_persistence": "the backend resumes each next turn with --resume, which "
        "needs the CLI's session persistence",
    }
    _ESCAPING_MODE = "mode='warm'"
    _RESUME_FIELD = "session_id"
    _SESSION_NOT_FOUND = SESSION_NOT_FOUND

    @classmethod
    def start_session(cls, opts: Any) -> ClaudeSession:
        """Validate `opts` and find the CLI; no process is started (see
        `CLIBackend.start_session`). The `tools` option becomes `gen_agent.tools.Tool`s.

        Raises:
            SessionStartError: as `CLIBackend.start_session`; also
                `("invalid_option", "tools", value)` for a tool `gen_agent.tools.tool`
                refuses, two tools of one name, or tools in per-turn mode (they are served
                over the warm process's control channel).
        """
        session = super().start_session(opts)
        o = session.options
        check_warm_only("ClaudeCLI", opts, o, o.mode == "warm",
                        "warm mode (mode='warm', the default)")
        if o.prewarm_context and not _prewarms(o):
            raise SessionStartError(
                ("invalid_option", "prewarm_context", True),
                "ClaudeCLI option 'prewarm_context': needs prewarm=True or a fleet")
        if not o.tools:
            return session
        if o.mode != "warm":
            raise SessionStartError(
                ("invalid_option", "tools", opts.get("tools")),
                "ClaudeCLI option 'tools': Python tools need warm mode (mode='warm', the "
                "default); per-turn processes have no channel to call them back")
        from gen_agent._tools import as_tools

        try:
            tools = as_tools(o.tools)
        except (TypeError, ValueError) as exc:
            raise SessionStartError(("invalid_option", "tools", opts.get("tools")),
                                    f"ClaudeCLI option 'tools': {exc}") from None
        return msgspec.structs.replace(
            session, options=msgspec.structs.replace(o, tools=tools))

    @classmethod
    def command(cls, session: ClaudeSession, prompt: str) -> list[str]:
        """The argument list one turn runs: the CLI, its flags, `--`, then the prompt.

        Args:
            session: the session (its options and the id to resume).
            prompt: the prompt text, passed as one argument after `--`.

        Returns:
            The argv (`list[str]`).
        """
        o = session.options
        argv = [session.cli, "-p", "--output-format", "stream-json", "--verbose"]
        if o.include_partial_messages:
            argv.append("--include-partial-messages")
        if session.session_id is not None:
            argv += ["--resume", session.session_id]
        for flag, value in (
            ("--model", o.model),
            ("--system-prompt", o.system_prompt),
            ("--append-system-prompt", o.append_system_prompt),
            ("--permission-mode", o.permission_mode),
            ("--max-turns", None if o.max_turns is None else str(o.max_turns)),
            ("--mcp-config", o.mcp_config),
            ("--settings", o.settings),
        ):
            if value is not None:
                argv += [flag, value]
        for flag, values in (
            ("--allowedTools", o.allowed_tools),
            ("--disallowedTools", o.disallowed_tools),
            ("--add-dir", o.add_dirs),
        ):
            for value in values:
                argv += [flag, value]
        if o.dangerously_skip_permissions:
            argv.append("--dangerously-skip-permissions")
        if session.json_schema is not None:
            argv += ["--json-schema", session.json_schema]
        return [*argv, *o.extra_args, "--", prompt]

    @classmethod
    def warm_command(cls, session: ClaudeSession, *, permission_prompt: bool) -> list[str]:
        """The argument list of a warm process: stream-json in and out, no prompt argument.

        Args:
            session: the session (its options, the id to `--resume`, and model / permission
                mode changed by `set_model` / `set_permission_mode`).
            permission_prompt: pass `--permission-prompt-tool stdio` (the agent decides).

        Returns:
            The argv (`list[str]`).
        """
        argv = cls.command(session, "")[:-2]  # the same flags, without `-- PROMPT`
        # `--replay-user-messages`: the CLI echoes each prompt it takes (with the uuid we
        # gave it), which tells our turns from the ones it runs by itself.
        argv[2:2] = ["--input-format", "stream-json"]
        argv.insert(argv.index("--verbose") + 1, "--replay-user-messages")
        overrides = session.warm.overrides
        for key, flag in (("model", "--model"), ("permission_mode", "--permission-mode")):
            if key in overrides:
                if flag in argv:
                    at = argv.index(flag)
                    del argv[at : at + 2]
                argv[2:2] = [flag, overrides[key]]
        if permission_prompt:
            argv += ["--permission-prompt-tool", "stdio"]
        if session.options.tools:
            # The agent's Python tools: declared as an SDK MCP server, allowed in the CLI
            # (the agent's own permission callback is asked at each call instead).
            server = McpServer(session.options.tools)
            argv += ["--mcp-config", server.config_json()]
            for name in server.allowed_tools():
                argv += ["--allowedTools", name]
        return argv

    @classmethod
    def prompt(
        cls, session: ClaudeSession, prompt: str, context: TurnContext
    ) -> tuple[Iterator[Event], ClaudeSession]:
        """Run one turn: on the session's warm process (the default), or per-turn.

        Warm mode: the process is started at the first turn, or before it with `prewarm`
        (with `--resume` when the session has an id, and `--permission-prompt-tool stdio`
        when the agent defines `handle_tool_permission`) and kept; the prompt is one stdin
        line. Per-turn mode: see `CLIBackend.prompt`.

        Raises:
            TypeError: `prompt` is not a str.
            DispatchError: a `BackendError` (`"cli_not_found"`, `"cwd_not_found"`,
                `"cli_not_executable"`, `"spawn_failed"`, `"cli_exited"` when a new process
                died before it took the prompt, `"session_not_found"` when the session to
                resume does not exist, or, per-turn, `"argument_list_too_long"` and
                `"invalid_request"`: a NUL or lone surrogate, which warm mode sends
                escaped).

        Mirrors: `prompt/3` (docs/pages/contract.md#s7-1, #s7-6; docs: the backend guide).
        """
        o = session.options
        schema = _json_schema(context)
        # The command is built from a copy carrying the turn's schema; the agent keeps
        # `session` (a later turn without `output` must not inherit it).
        turn_session = (session if schema is None
                        else msgspec.structs.replace(session, json_schema=schema))
        if o.mode == "per_turn":
            events, _ = super().prompt(turn_session, prompt, context)
            return events, session
        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
        permission_prompt = context.handles_permissions
        mcp = McpServer(o.tools) if o.tools else None

        def spawn() -> ChildProcess:
            # Reads the slot's current session id: a respawn resumes the latest one.
            return ChildProcess.spawn(**cls._warm_spec(turn_session, permission_prompt, mcp),
                                      owner=session.warm)

        events = warm_turn(
            session.warm, prompt, context, spawn=spawn, idle_timeout_ms=o.idle_timeout_ms,
            interrupt_grace_ms=o.interrupt_grace_ms,
            permission_timeout_ms=o.permission_timeout_ms, mcp=mcp, json_schema=schema,
            resume_id=session.session_id, tail_bytes=o.stderr_tail_bytes,
            stream_partial=o.include_partial_messages)
        return events, session

    @classmethod
    def _warm_spec(cls, turn_session: ClaudeSession, permission_prompt: bool,
                   mcp: McpServer | None) -> dict[str, Any]:
        """The `ChildProcess.spawn` keyword arguments of a warm process (owner excluded)."""
        o = turn_session.options
        env = cls._child_env(o)
        # A long-lived CLI otherwise writes its transcript lazily (measured on 2.1.197: not
        # at all while turns follow each other within ~0.1 s), so a crash would lose turns
        # that were answered; eager flushing keeps them resumable (tested).
        env.setdefault("CLAUDE_CODE_EAGER_FLUSH", "1")
        if mcp is not None:
            # The CLI's own bound on an MCP call must not end a Python tool before its
            # own timeout_s (and the permission wait) do.
            env.setdefault("MCP_TOOL_TIMEOUT", str(_mcp_timeout_ms(o)))
        return {"argv": cls.warm_command(turn_session, permission_prompt=permission_prompt),
                "provider": PROVIDER, "env": env, "cwd": o.cwd,
                "max_line_bytes": o.max_line_bytes, "stderr_tail_bytes": o.stderr_tail_bytes,
                "exit_grace_ms": o.exit_grace_ms, "term_grace_ms": o.term_grace_ms,
                "install_hint": INSTALL_HINT, "stdin_pipe": True,
                "session_id": turn_session.session_id}

    @classmethod
    def prewarm_session(cls, session: ClaudeSession, *, info: Any,
                        handles_permissions: bool, output: Any = None) -> None:
        """Start the warm process in the background when the `prewarm` option (or a
        `fleet`) asks for it; otherwise do nothing. Called by the runtime in the agent
        thread once the agent has started (after `pre_run`); never blocks, never raises
        for the CLI's failures (the first turn reports them, as a spawn failure).

        Args:
            session: the started (or resumed) session.
            info: the agent's `handle_info` sink (`TurnContext.send_info`'s callable).
            handles_permissions: whether the agent defines `handle_tool_permission`.
            output: the agent's default structured output (`output=` of `start_agent`), or
                None: the process starts with its `--json-schema`.
        """
        o = session.options
        if o.mode != "warm" or not _prewarms(o):
            return
        schema = None if output is None else msgspec.json.encode(schema_of(output)).decode()
        cls._start_prewarm(session, info, handles_permissions, schema)

    @classmethod
    def _start_prewarm(cls, session: ClaudeSession, info: Any, permission_prompt: bool,
                       schema: str | None) -> None:
        o = session.options
        slot = session.warm
        if not isinstance(slot, FleetSlot):
            return

        def spec(session_id: str | None) -> dict[str, Any]:
            turn_session = msgspec.structs.replace(session, session_id=session_id,
                                                   json_schema=schema)
            mcp = McpServer(o.tools) if o.tools else None
            return cls._warm_spec(turn_session, permission_prompt, mcp)

        slot.prewarm = ClaudePrewarmer(
            spec, lambda: McpServer(o.tools) if o.tools else None, info,
            idle_timeout_ms=o.idle_timeout_ms, tail_bytes=o.stderr_tail_bytes,
            json_schema=schema, fleet=o.fleet, permission_prompt=permission_prompt,
            context=o.prewarm_context)
        slot.prewarm.start(slot, session.session_id)

    @classmethod
    def cancel(cls, session: ClaudeSession) -> None:
        """Interrupt the running turn: warm, the `interrupt` control request (the process
        survives; killed past `interrupt_grace_ms`); per-turn, SIGKILL to the process tree.
        Any thread; idempotent; quick."""
        session.warm.cancel()
        session.runner.cancel()

    @classmethod
    def steer(cls, session: ClaudeSession, prompt: str) -> bool:
        """Warm mode: write `prompt` into the running turn while one of its tool calls is in
        flight (a `user` line with `"priority": "next"`, which the CLI joins to the turn at
        the tool boundary). True when written; False otherwise (no turn, no tool running,
        per-turn mode): the runtime then runs the request next. The turn's terminal event
        reports how many steered prompts it took (`data["steered_joined"]`). Agent thread;
        quick; never raises for a gone process."""
        if session.options.mode != "warm":
            return False
        return claude_steer(session.warm, prompt)

    @classmethod
    def terminate_session(cls, session: ClaudeSession) -> None:
        """End the warm process and wait until it is gone; kill a per-turn child's tree.
        Idempotent.

        Warm: a turn still running is interrupted first (the CLI ends its tools and saves the
        turn) and gets up to `min(interrupt_grace_ms, 2000)` ms to settle, else its tree is
        SIGKILLed; then EOF on the CLI's stdin (SIGKILL to its tree past `exit_grace_ms`).
        Blocks the stopping agent for as long as that takes (measured: ~0.1 s for the exit).
        """
        o = session.options
        session.warm.stop(grace_s=stop_grace_s(o.interrupt_grace_ms),
                          wait_s=(o.exit_grace_ms + o.term_grace_ms) / 1000 + 1.0)
        super().terminate_session(session)  # per-turn children

    @classmethod
    def reset_session(cls, session: ClaudeSession) -> ClaudeSession:
        """Start a new conversation on the next turn.

        Warm mode replaces the process: the live one is closed now (stdin EOF) and the next
        turn starts a new `claude` without `--resume` (one process start, ~0.4 s measured,
        on that turn). The session's cost and usage totals start again at zero. Mirrors
        `reset_session/1` (§2.15).
        """
        old = session.warm
        prewarm = getattr(old, "prewarm", None)
        o = session.options
        # Pre-warmed: the old process is gone before its replacement starts.
        old.close(wait_s=None if prewarm is None else
                  (o.exit_grace_ms + o.term_grace_ms) / 1000 + 1.0)
        reset = msgspec.structs.replace(super().reset_session(session), warm=FleetSlot())
        if prewarm is not None:
            cls._start_prewarm(reset, prewarm.info, prewarm.permission_prompt,
                               prewarm.json_schema)
        return reset

    @classmethod
    def set_model(cls, session: ClaudeSession, model: str | None) -> None:
        """Use `model` for the next turns of a warm session, without a restart.

        Sends the `set_model` control request to the live process (None: the CLI's default)
        and remembers it for processes started later. Any thread.

        Raises:
            BackendError: kind `"control_failed"` when the live CLI refuses or does not
                answer within 10 s; `"unsupported"` in per-turn mode.
        """
        cls._control(session, "model", model, {"subtype": "set_model", "model": model})

    @classmethod
    def set_permission_mode(cls, session: ClaudeSession, mode: str) -> None:
        """Use permission `mode` (one of `PERMISSION_MODES`) for the next turns of a warm
        session, without a restart (the `set_permission_mode` control request). Any thread.

        Raises:
            ValueError: `mode` is not one of `PERMISSION_MODES`.
            BackendError: as `set_model`.
        """
        if mode not in PERMISSION_MODES:
            raise ValueError(f"mode must be one of {sorted(PERMISSION_MODES)}, got {mode!r}")
        cls._control(session, "permission_mode", mode,
                     {"subtype": "set_permission_mode", "mode": mode})

    @classmethod
    def _control(cls, session: ClaudeSession, key: str, value: str | None,
                 request: dict[str, Any]) -> None:
        if session.options.mode != "warm":
            raise BackendError.new(PROVIDER, "unsupported", None,
                                   message="control calls need warm mode")
        slot = session.warm
        if value is None:
            slot.overrides.pop(key, None)
        else:
            slot.overrides[key] = value
        process = slot.process
        if process is None or not process.live.alive:
            return  # applied when the next process starts
        try:
            answer = process.send_control(request, wait_s=10.0)
        except OSError:
            return  # gone: the next process starts with the new value
        if not isinstance(answer, dict) or answer.get("subtype") != "success":
            error = answer.get("error") if isinstance(answer, dict) else None
            raise BackendError.new(PROVIDER, "control_failed", answer,
                                   message=error if isinstance(error, str) else
                                   f"{request['subtype']} got no answer")

    @classmethod
    def _prompt_in_argv(cls, session: ClaudeSession) -> bool:
        return session.options.mode == "per_turn"  # warm: a stdin JSON line

    @classmethod
    def _new_session(cls, options: Any, cli: str) -> ClaudeSession:
        return ClaudeSession(options=options, cli=cli, session_id=options.session_id)

    @classmethod
    def _translator(cls, session: ClaudeSession) -> ClaudeStreamTranslator:
        return ClaudeStreamTranslator()


def _prewarms(o: ClaudeOptions) -> bool:
    """Whether a session of these options starts its process ahead of its first turn."""
    return bool(o.prewarm or (o.prewarm is None and o.fleet is not None))


def _json_schema(context: TurnContext) -> str | None:
    """The turn's `--json-schema` value: `schema_of(output)` as compact JSON, or None when the
    turn asks for no structured output (gen_agent._output)."""
    output = context.options.output
    if output is None:
        return None
    return msgspec.json.encode(schema_of(output)).decode()


def _is_tool(value: Any) -> bool:
    from gen_agent._tools import Tool

    return isinstance(value, Tool) or callable(value)


def _mcp_timeout_ms(o: ClaudeOptions) -> int:
    """`MCP_TOOL_TIMEOUT` for the CLI: the longest tool timeout plus the permission wait and a
    minute (ms); a day when a tool has no bound."""
    longest = max((t.timeout_s if t.timeout_s is not None else 86_400.0) for t in o.tools)
    return int(longest * 1000) + o.permission_timeout_ms + 60_000
