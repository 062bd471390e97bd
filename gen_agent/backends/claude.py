"""`ClaudeCLI`: the Claude Code CLI backend (print mode, stream-json output).

Each turn runs `claude -p --output-format stream-json --verbose [options] -- PROMPT` as a child
in its own process group (the prompt is one argument, never seen by a shell), reads its stdout
line by line and normalizes every line into `Event`s (contract §7.6, first bullet). The first
line that carries a `session_id` is checkpointed (§7.3) and the next turn resumes that
conversation with `--resume ID`.

Two layers:

- `ClaudeStreamTranslator` (in `_claude_stream`, re-exported here): pure; one decoded
  stream-json line in, `Event`s out, with the per-turn state that deduplicates tool calls and
  streamed text. Tested on recorded output of the real CLI, without a process.
- `ClaudeCLI`: the backend hooks; spawns and reads the child through
  `gen_agent.backends._process`.

Normalization (what each line becomes):

- `system`/`init` → `session` {session_id, model, cwd, tools, permission_mode,
  claude_code_version};
- `system` with another subtype (e.g. `api_retry`) → `claude.<subtype>` with the line's fields;
- `stream_event` text delta → `text` (the first delta of a text block has `message_boundary`);
- `assistant` → `text` (adjacent text blocks joined, `message_boundary: True`, only the text
  not already streamed), `tool_use` (once per id), `claude.<block type>` for other blocks;
- `user` → `tool_result` (once per `tool_use_id`);
- `result` → `usage`, then the terminal: `result` on success; `error` with a `BackendError`
  reason when `is_error` is true (whatever the subtype) or the subtype is `error*`;
- `error` → terminal `error` with a `BackendError` reason;
- any other type → `claude.<type>` with the line's fields;
- a line that is not JSON → `claude.unparsed` {size_bytes, line (its first 1 KiB)}.

Messages from a sub-agent (a line with `parent_tool_use_id`) never add to the turn's text: their
text is `claude.subagent_text`; their tool events keep their kinds.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator, Mapping
from typing import Any, Final

import msgspec
from loguru import logger

from gen_agent.backend import Backend, BackendError, DispatchError, SessionStartError, TurnContext
from gen_agent.backends._claude_stream import (
    PROVIDER,
    ClaudeStreamTranslator,
    decode_line,
    translate_lines,
)
from gen_agent.backends._process import (
    DEFAULT_EXIT_GRACE_MS,
    DEFAULT_MAX_LINE_BYTES,
    DEFAULT_STDERR_TAIL_BYTES,
    DEFAULT_TERM_GRACE_MS,
    ChildProcess,
    LineTooLong,
)
from gen_agent.event import Event

__all__ = [
    "INSTALL_HINT",
    "OPTIONS",
    "PERMISSION_MODES",
    "PROVIDER",
    "ClaudeCLI",
    "ClaudeOptions",
    "ClaudeSession",
    "ClaudeStreamTranslator",
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


class ClaudeOptions(msgspec.Struct, frozen=True, kw_only=True):
    """The validated options of a `ClaudeCLI` session (see `OPTIONS` for the accepted keys).

    Fields:
        cli_path: the `claude` executable (a name looked up on PATH, or a path).
        cwd: the working directory of the CLI (an existing directory), or None for ours.
        env: environment variables for the CLI, over our own environment (or alone, see
            `inherit_env`).
        inherit_env: start from our own environment (`os.environ`); False gives the CLI
            `env` only (tests use it to keep a developer's credentials away from the CLI).
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
        session_id: a conversation to resume on the first turn (`--resume`), or None.
        extra_args: further arguments placed before the prompt, as given.
        max_line_bytes: the bound on one stdout line (bytes; a longer line fails the turn).
        stderr_tail_bytes: how much of the CLI's stderr to keep for errors (bytes).
        exit_grace_ms: how long the CLI may run after its result line before SIGTERM (ms).
        term_grace_ms: how long between SIGTERM and SIGKILL (ms).
    """

    cli_path: str = "claude"
    cwd: str | None = None
    env: dict[str, str] = msgspec.field(default_factory=dict)
    inherit_env: bool = True
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
    session_id: str | None = None
    extra_args: tuple[str, ...] = ()
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    stderr_tail_bytes: int = DEFAULT_STDERR_TAIL_BYTES
    exit_grace_ms: int = DEFAULT_EXIT_GRACE_MS
    term_grace_ms: int = DEFAULT_TERM_GRACE_MS


OPTIONS: Final = frozenset(ClaudeOptions.__struct_fields__)
"""The option keys `ClaudeCLI.start_session` accepts."""

_REJECTED: Final = {
    "no_session_persistence": "the backend resumes each next turn with --resume, which needs "
    "the CLI's session persistence",
}


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_text(value: Any) -> bool:
    return isinstance(value, str) and value != "" and "\x00" not in value


def _is_str_seq(value: Any) -> bool:
    return isinstance(value, list | tuple) and all(_is_text(item) for item in value)


def _is_positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _is_ms(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_env(value: Any) -> bool:
    return isinstance(value, Mapping) and all(
        _is_text(k) and "=" not in k and isinstance(v, str) and "\x00" not in v
        for k, v in value.items()
    )


def _is_dir(value: Any) -> bool:
    return _is_text(value) and os.path.isdir(value)


# key -> (check, expected form for the error message)
_CHECKS: Final = {
    "cli_path": (_is_text, "a non-empty str (a program name or path)"),
    "cwd": (_is_dir, "the path of an existing directory"),
    "env": (_is_env, "a dict of str names (without '=') to str values"),
    "inherit_env": (lambda v: isinstance(v, bool), "a bool"),
    "model": (_is_text, "a non-empty str"),
    "system_prompt": (_is_str, "a str"),
    "append_system_prompt": (_is_str, "a str"),
    "allowed_tools": (_is_str_seq, "a list of non-empty str"),
    "disallowed_tools": (_is_str_seq, "a list of non-empty str"),
    "permission_mode": (PERMISSION_MODES.__contains__, f"one of {sorted(PERMISSION_MODES)}"),
    "max_turns": (_is_positive_int, "an int >= 1"),
    "add_dirs": (_is_str_seq, "a list of non-empty str"),
    "mcp_config": (_is_text, "a non-empty str"),
    "settings": (_is_text, "a non-empty str"),
    "dangerously_skip_permissions": (lambda v: isinstance(v, bool), "a bool"),
    "include_partial_messages": (lambda v: isinstance(v, bool), "a bool"),
    "session_id": (_is_text, "a non-empty str"),
    "extra_args": (_is_str_seq, "a list of non-empty str"),
    "max_line_bytes": (_is_positive_int, "an int >= 1 (bytes)"),
    "stderr_tail_bytes": (_is_ms, "an int >= 0 (bytes)"),
    "exit_grace_ms": (_is_ms, "an int >= 0 (milliseconds)"),
    "term_grace_ms": (_is_ms, "an int >= 0 (milliseconds)"),
}


def _validate(opts: Any) -> ClaudeOptions:
    if not isinstance(opts, Mapping):
        raise SessionStartError(
            ("invalid_options", type(opts).__name__),
            f"ClaudeCLI options must be a dict, got {type(opts).__name__}",
        )
    for key, value in opts.items():
        if key in _REJECTED:
            raise SessionStartError(
                ("invalid_option", key, value), f"ClaudeCLI option {key!r}: {_REJECTED[key]}"
            )
        if key not in _CHECKS:
            raise SessionStartError(
                ("unknown_option", key),
                f"unknown ClaudeCLI option {key!r}; valid options: {', '.join(sorted(OPTIONS))}",
            )
        check, expected = _CHECKS[key]
        if value is not None and not check(value):
            raise SessionStartError(
                ("invalid_option", key, value),
                f"ClaudeCLI option {key!r} must be {expected}, got {_shape(value)}",
            )
    given: dict[str, Any] = {
        key: tuple(value) if isinstance(value, list) else value
        for key, value in opts.items()
        if value is not None
    }
    if "env" in given:
        given["env"] = dict(given["env"])
    return ClaudeOptions(**given)


def _shape(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 80 else text[:77] + '...'}"


def _resolve_cli(options: ClaudeOptions) -> str:
    search = options.env.get("PATH", os.environ.get("PATH") if options.inherit_env else None)
    path = shutil.which(options.cli_path, path=search)
    if path is None:
        raise BackendError.new(
            PROVIDER,
            "cli_not_found",
            options.cli_path,
            message=f"executable {options.cli_path!r} not found; {INSTALL_HINT}",
        )
    return path


# -- the session and the backend -------------------------------------------------------------


class _Runner:
    """The live child of a session's current turn; shared by every copy of the session so
    that `cancel` reaches it from the agent thread. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._child: ChildProcess | None = None
        self.last_child: ChildProcess | None = None

    def attach(self, child: ChildProcess) -> None:
        with self._lock:
            self._child = child
            self.last_child = child

    def detach(self, child: ChildProcess) -> None:
        with self._lock:
            if self._child is child:
                self._child = None

    def cancel(self) -> None:
        with self._lock:
            child = self._child
        if child is not None:
            child.cancel()


class ClaudeSession(msgspec.Struct, frozen=True, kw_only=True):
    """A `ClaudeCLI` session: options plus the conversation to resume. Immutable value.

    Fields:
        options: the validated `ClaudeOptions`.
        cli: the resolved path of the `claude` executable.
        session_id: the CLI session to resume on the next turn (`--resume`), or None for a
            new conversation.
        turns: successful turns so far (count).
        runner: the holder of the current turn's child process (shared by copies).

    Thread-safety: immutable; the runner inside is thread-safe.
    """

    options: ClaudeOptions
    cli: str
    session_id: str | None = None
    turns: int = 0
    runner: _Runner = msgspec.field(default_factory=_Runner)

    @property
    def last_child(self) -> ChildProcess | None:
        """The child process of the latest turn (for diagnostics and tests), or None."""
        return self.runner.last_child


class ClaudeCLI(Backend):
    """The Claude Code CLI backend; pass the class itself as the agent's backend.

    Backend options (returned by `init_agent`; see `ClaudeOptions` for each one's meaning,
    default and unit): `cli_path`, `cwd`, `env`, `inherit_env`, `model`, `system_prompt`,
    `append_system_prompt`, `allowed_tools`, `disallowed_tools`, `permission_mode`,
    `max_turns`, `add_dirs`, `mcp_config`, `settings`, `dangerously_skip_permissions`,
    `include_partial_messages`, `session_id`, `extra_args`, `max_line_bytes`,
    `stderr_tail_bytes`, `exit_grace_ms`, `term_grace_ms`.

    Errors (reasons are data): option errors at start are `SessionStartError` with
    `("unknown_option", key)` or `("invalid_option", key, value)`; every provider failure is
    a `BackendError` with provider `"claude"`, as a `SessionStartError` / `DispatchError`
    reason or as the `reason` of a terminal `error` event.

    Thread-safety: every hook may run in any thread; `cancel` may run while `prompt`'s stream
    is being read in another thread.

    Mirrors: `GenAgentClaude` (contract §7.6, first bullet).
    """

    @classmethod
    def start_session(cls, opts: Mapping[str, Any]) -> ClaudeSession:
        """Validate `opts` and find the CLI; no process is started.

        Args:
            opts: the backend options (`dict`), all optional.

        Returns:
            A `ClaudeSession` (resuming `opts["session_id"]` when given).

        Raises:
            SessionStartError: `("unknown_option", key)`, `("invalid_option", key, value)`,
                `("invalid_options", type_name)`, or a `BackendError` of kind
                `"cli_not_found"` whose message names what to install.

        Mirrors: `start_session/1` (contract §7.1, §7.6).
        """
        options = _validate(opts)
        try:
            cli = _resolve_cli(options)
        except BackendError as exc:
            raise SessionStartError(exc, exc.message) from None
        return ClaudeSession(options=options, cli=cli, session_id=options.session_id)

    @classmethod
    def resume_session(cls, session_id: str, opts: Mapping[str, Any]) -> ClaudeSession:
        """`start_session(opts)` resuming the CLI conversation `session_id`.

        Raises:
            SessionStartError: as `start_session`; also for an empty `session_id`.
        """
        if not _is_text(session_id):
            raise SessionStartError(("invalid_session_id", session_id), "empty session id")
        return cls.start_session({**opts, "session_id": session_id})

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
        return [*argv, *o.extra_args, "--", prompt]

    @classmethod
    def prompt(
        cls, session: ClaudeSession, prompt: str, context: TurnContext
    ) -> tuple[Iterator[Event], ClaudeSession]:
        """Start the CLI for one turn and return its lazily read event stream.

        Runs in the turn task. The child is started here (so a missing CLI is a dispatch
        error); the stream reads its stdout, checkpoints the first session id it sees, ends
        with exactly one terminal event, and on close ends the child (see `_process`).

        Args:
            session: the `ClaudeSession`.
            prompt: the prompt (`str`), passed as one argument (no shell).
            context: the `TurnContext` (checkpoint and cancel signal).

        Returns:
            `(events, session)`: a generator of `Event`s and the same session.

        Raises:
            DispatchError: a `BackendError` (`"cli_not_found"`, `"cwd_not_found"`,
                `"cli_not_executable"`, `"argument_list_too_long"`, `"spawn_failed"`).
            gen_agent.errors.CheckpointError: while iterating, when the agent rejects the
                session id (the turn fails with the recorded checkpoint reason).

        Mirrors: `prompt/3` (contract §7.1, §7.3, §7.6).
        """
        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
        o = session.options
        try:
            child = ChildProcess.spawn(
                cls.command(session, prompt),
                provider=PROVIDER,
                env={**os.environ, **o.env} if o.inherit_env else dict(o.env),
                cwd=o.cwd,
                max_line_bytes=o.max_line_bytes,
                stderr_tail_bytes=o.stderr_tail_bytes,
                exit_grace_ms=o.exit_grace_ms,
                term_grace_ms=o.term_grace_ms,
                install_hint=INSTALL_HINT,
            )
        except BackendError as exc:
            raise DispatchError(exc, exc.message) from None
        session.runner.attach(child)
        if context.cancelled:
            child.cancel()
        return _turn_events(session, child, context), session

    @classmethod
    def update_session(
        cls, session: ClaudeSession, result_data: Mapping[str, Any]
    ) -> ClaudeSession:
        """After a successful turn: remember the result's session id and count the turn."""
        session_id = result_data.get("session_id")
        if not _is_text(session_id):
            session_id = session.session_id
        return msgspec.structs.replace(session, session_id=session_id, turns=session.turns + 1)

    @classmethod
    def checkpoint_session(cls, session: ClaudeSession, session_id: str) -> ClaudeSession:
        """Apply a session id acknowledged through `TurnContext.checkpoint` (§7.3)."""
        return msgspec.structs.replace(session, session_id=session_id)

    @classmethod
    def reset_session(cls, session: ClaudeSession) -> ClaudeSession:
        """Start a new conversation on the next turn (forget the session id).

        Kills a child that is somehow still running. Mirrors `reset_session/1` (§2.15).
        """
        session.runner.cancel()
        return msgspec.structs.replace(session, session_id=None, turns=0)

    @classmethod
    def cancel(cls, session: ClaudeSession) -> None:
        """Kill the current turn's process group now (any thread; idempotent; quick)."""
        session.runner.cancel()

    @classmethod
    def terminate_session(cls, session: ClaudeSession) -> None:
        """Kill a running child, if any. Idempotent."""
        session.runner.cancel()


def _turn_events(
    session: ClaudeSession, child: ChildProcess, context: TurnContext
) -> Iterator[Event]:
    translator = ClaudeStreamTranslator()
    try:
        for item in child.read_lines():
            if isinstance(item, LineTooLong):
                child.cancel()
                yield _line_too_long(item, translator)
                return
            for event in _line_events(item, translator, context):
                yield event
                if event.is_terminal:
                    return
        yield _ended_without_result(child, translator, context)
    finally:
        session.runner.detach(child)
        child.release()


def _line_events(
    raw: bytes, translator: ClaudeStreamTranslator, context: TurnContext
) -> list[Event]:
    if not raw.strip():
        return []
    try:
        value = decode_line(raw)
    except msgspec.DecodeError:
        logger.debug("gen_agent claude: a stdout line was not JSON ({} bytes)", len(raw))
        return [translator.unparsed(raw)]
    events = translator.translate(value)
    session_id = translator.take_session_id()
    if session_id is not None:
        context.checkpoint(session_id)  # a CheckpointError fails the turn (contract §7.3)
    return events


def _line_too_long(item: LineTooLong, translator: ClaudeStreamTranslator) -> Event:
    message = (
        f"a claude stdout line of {item.size_bytes} bytes exceeds max_line_bytes={item.limit_bytes}"
    )
    reason = BackendError.new(
        PROVIDER,
        "line_too_long",
        {"size_bytes": item.size_bytes, "limit_bytes": item.limit_bytes},
        message=message,
    )
    return Event.new("error", {"reason": reason, "session_id": translator.session_id})


def _ended_without_result(
    child: ChildProcess, translator: ClaudeStreamTranslator, context: TurnContext
) -> Event:
    if child.cancelled or context.cancelled:
        reason = BackendError.new(PROVIDER, "cancelled", None, message="the turn was cancelled")
        return Event.new("error", {"reason": reason, "session_id": translator.session_id})
    code = child.close()
    tail = child.stderr_tail().decode("utf-8", errors="replace")
    message = f"claude exited with status {code} before its result line"
    if tail.strip():
        message += f"; stderr tail: {tail.strip()}"
    reason = BackendError.new(
        PROVIDER, "no_result", {"exit_code": code, "stderr_tail": tail}, message=message
    )
    return Event.new("error", {"reason": reason, "session_id": translator.session_id})
