"""`CodexCLI`: the OpenAI Codex CLI backend (`codex exec --json`, one JSON event per line).

Each turn runs `codex exec --json [options] -- PROMPT` (or, once a thread exists,
`codex exec --json [options] resume -- THREAD_ID PROMPT`) as a child in its own process group;
the prompt is one argument and never seen by a shell. Its stdout is read line by line (bounded,
see `gen_agent.backends._subprocess.process`) and every line is normalized into
`Event`s (docs/pages/contract.md#s7-6, second bullet; docs: the backend guide). The thread id is
checkpointed as soon as `thread.started` reports it (§7.3).

Two layers:

- `CodexStreamTranslator` (in `_codex_stream`, re-exported here): pure; one decoded JSONL
  line in, `Event`s out. Tested on recorded output of the real CLI, without a process.
- `CodexCLI`: the backend hooks, written once for both CLI backends in
  `gen_agent.backends._subprocess.base` (which spawns and reads the child through `_process`); this
  module gives the options, the command line and the environment (`CODEX_HOME`).

Normalization (what each line becomes):

- `thread.started` → no event; its `thread_id` is checkpointed and becomes `session_id`;
- `turn.started` → nothing; `item.started` of a `command_execution`, `file_change`,
  `mcp_tool_call` or `web_search` → `codex.tool_started` with the whole item (what the tool
  journal of an agent with a store records as the call's start:
  docs/pages/durable-sessions.md); `item.started`, `item.updated` of other items → nothing,
  but for a `todo_list` (its progress) → `codex.item` with the whole item;
- an item's type is its `type`, else the older `item_type` (`assistant_message` is the older
  name of `agent_message`);
- `item.completed` with an `agent_message` → `text` {text, message_boundary: True, item_id};
- `item.completed` with a `command_execution`, `file_change`, `mcp_tool_call` or
  `web_search` → `tool_use` and then `tool_result`, each with the whole item;
  `tool_call` → `tool_use`; `tool_result` → `tool_result`;
- `item.completed` with any other item (`reasoning`, `todo_list`, a non-fatal `error`
  warning, or an item this backend cannot read) → `codex.item` with the whole item (its
  `type` says which): visible, never dropped;
- `error` (a notification, e.g. a retry or the reason a turn is about to fail) →
  `codex.error` {message}; remembered, never terminal by itself;
- `turn.completed` → `usage` {input_tokens, output_tokens, cached_input_tokens, and the
  CLI's other counters} then the terminal `result` **without text** (the text is assembled from
  the messages) with `session_id` (the thread id), `model`, `provider`, `raw`;
- `turn.failed` → the terminal `error` with a `BackendError` reason (the failure's message,
  else the last notification), whatever the exit status and stderr say: kind `"quota"` for
  a usage limit or exhausted quota (not retryable), the HTTP kind of a status named in the
  message, `"rate_limited"` (retryable) for a rate limit named without one, else
  `"turn_failed"`;
- any other line type → `codex.<type>`; a line that is not JSON → `codex.unparsed`.

When stdout ends without `turn.completed` / `turn.failed`, the turn ends with a terminal
`error` all the same: kind `"cli_error"` carrying the last notification when there was one,
else `"no_result"` with the exit status and the stderr tail, or `"session_not_found"` when
the CLI refused to resume the thread ("no rollout found for thread id", "No saved session
found with ID"): the agent then forgets the thread (see `docs/pages/errors.md`).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import weakref
from collections.abc import Iterator, Mapping
from typing import Any, Final

import msgspec

from gen_agent._event import Event
from gen_agent._output import strict_schema_of
from gen_agent._permission import DEFAULT_PERMISSION_TIMEOUT_MS
from gen_agent.backend import BackendError, DispatchError, TurnContext
from gen_agent.backends._option_checks import (
    check_warm_only,
    duration_ms,
    is_arg,
    is_arg_seq,
    is_bool,
    is_dir,
    one_of,
)
from gen_agent.backends._subprocess.base import CLI_CHECKS, CLIBackend, CLIOptions, CLISession
from gen_agent.backends._subprocess.codex_app import AppPrewarmer, AppSlot, app_turn
from gen_agent.backends._subprocess.codex_stream import (
    PROVIDER,
    THREAD_NOT_FOUND,
    CodexStreamTranslator,
    translate_lines,
)
from gen_agent.backends._subprocess.codex_stream import decode_line as decode_line
from gen_agent.backends._subprocess.process import ChildProcess
from gen_agent.backends._subprocess.warm_fleet import WarmFleet, wait_ready
from gen_agent.backends.warm import (
    DEFAULT_IDLE_TIMEOUT_MS,
    DEFAULT_INTERRUPT_GRACE_MS,
    stop_grace_s,
)

__all__ = [
    "APPROVAL_POLICIES",
    "INSTALL_HINT",
    "MODES",
    "OPTIONS",
    "SANDBOX_MODES",
    "CodexCLI",
    "CodexOptions",
    "CodexSession",
    "CodexStreamTranslator",
    "WarmFleet",
    "translate_lines",
]

INSTALL_HINT: Final = (
    "install the Codex CLI with `npm install -g @openai/codex` "
    "(or set the `cli_path` option to its `codex` executable)"
)
"""What the "not found" errors tell the user to install."""

SANDBOX_MODES: Final = frozenset({"read-only", "workspace-write", "danger-full-access"})
"""The values of the `sandbox` option (`codex exec --sandbox`)."""


# -- options -------------------------------------------------------------------------------


class CodexOptions(CLIOptions, frozen=True, kw_only=True):
    """The validated options of a `CodexCLI` session (see `OPTIONS` for the accepted keys).

    Fields:
        cli_path: the `codex` executable (a name looked up on PATH, or a path, relative to
            the caller's working directory at `start_agent`).
        cwd: the working directory of the CLI and its `--cd` root (an existing directory), or
            None for ours.
        env: environment variables for the CLI, over our own environment (or alone, see
            `inherit_env`).
        inherit_env: start from our own environment (`os.environ`); False gives the CLI `env`
            only (tests use it to keep a developer's credentials away from the CLI).
        session_id: a thread to resume on the first turn, or None for a new one.
        extra_args: further arguments placed before the prompt, as given.
        max_line_bytes: the bound on one stdout line (bytes; a longer line fails the turn).
        stderr_tail_bytes: how much of the CLI's stderr to keep for errors (bytes).
        exit_grace_ms: how long the CLI may run after its outcome line before SIGTERM (ms).
        term_grace_ms: how long between SIGTERM and SIGKILL (ms).
        codex_home: the CLI's configuration folder (`CODEX_HOME`), or None for its default.
        model: `--model`, or None for the configured default.
        profile: `--profile`, or None.
        sandbox: `--sandbox` (one of `SANDBOX_MODES`), or None for the configured default.
        config: `-c key=value` overrides; each value (str, int, float, bool or a list of
            them) is written as TOML.
        skip_git_repo_check: pass `--skip-git-repo-check` (default True: an agent's working
            folder is often not a git repository).
        images: `--image` files attached to every prompt (exec mode only).
        mode: `"exec"` (default): one `codex exec --json` process per turn, resuming the
            thread; `"app_server"`: one long-lived `codex app-server` process per session,
            driven over JSON-RPC (turns on one thread; approvals go to
            `handle_tool_permission`).
        approval_policy: app-server mode: the thread's `approvalPolicy` (`"untrusted"`,
            `"on-request"`, `"never"`), or None for the configured default.
        idle_timeout_ms: app-server mode: close the process after this long without a turn
            (ms; default 15 min); the next turn resumes the thread on a new process.
        interrupt_grace_ms: app-server mode: how long an interrupted turn may take to
            complete after `turn/interrupt` before the process tree is killed (ms).
        permission_timeout_ms: app-server mode: how long an approval waits for
            `handle_tool_permission` before it is declined (ms).
        prewarm: app-server mode: start the process, `initialize` it and start (or resume)
            the thread in the background once the agent has started (and after
            `reset_session`), not at the first turn; a process that dies between turns is
            then replaced at once, resuming the thread (see
            `gen_agent.backends._subprocess.warm_fleet`). Default False (no process before a
            turn; True when `fleet` is given).
        fleet: app-server mode: a `WarmFleet` of spare processes shared with other agents
            (the one class `ClaudeCLI` takes too); a new session (no thread to resume) of an
            identical configuration takes one, with its started thread, at start.
    """

    cli_path: str = "codex"
    codex_home: str | None = None
    model: str | None = None
    profile: str | None = None
    sandbox: str | None = None
    config: dict[str, Any] = msgspec.field(default_factory=dict)
    skip_git_repo_check: bool = True
    images: tuple[str, ...] = ()
    mode: str = "exec"
    approval_policy: str | None = None
    idle_timeout_ms: int = DEFAULT_IDLE_TIMEOUT_MS
    interrupt_grace_ms: int = DEFAULT_INTERRUPT_GRACE_MS
    permission_timeout_ms: int = DEFAULT_PERMISSION_TIMEOUT_MS
    prewarm: bool | None = None
    fleet: WarmFleet | None = None


MODES: Final = frozenset({"exec", "app_server"})
"""The values of the `mode` option."""

APPROVAL_POLICIES: Final = frozenset({"untrusted", "on-request", "never"})
"""The values of the `approval_policy` option (app-server `approvalPolicy`)."""

OPTIONS: Final = frozenset(CodexOptions.__struct_fields__)
"""The option keys `CodexCLI.start_session` accepts."""


def _is_toml_scalar(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" not in value
    return isinstance(value, bool | int | float)


def _is_config(value: Any) -> bool:
    return isinstance(value, Mapping) and all(
        is_arg(key)
        and "=" not in key
        and (
            _is_toml_scalar(item)
            or (isinstance(item, list | tuple) and all(_is_toml_scalar(x) for x in item))
        )
        for key, item in value.items()
    )


_CHECKS: Final = {
    **CLI_CHECKS,
    "codex_home": (is_dir, "the path of an existing directory"),
    "model": (is_arg, "a non-empty str"),
    "profile": (is_arg, "a non-empty str"),
    "sandbox": one_of(SANDBOX_MODES),
    "config": (_is_config, "a dict of str keys to str/int/float/bool values or lists of them"),
    "skip_git_repo_check": (is_bool, "a bool"),
    "images": (is_arg_seq, "a list of non-empty str (file paths)"),
    "mode": one_of(MODES),
    "approval_policy": one_of(APPROVAL_POLICIES),
    "idle_timeout_ms": duration_ms(1),
    "interrupt_grace_ms": duration_ms(0),
    "permission_timeout_ms": duration_ms(1),
    "prewarm": (is_bool, "a bool"),
    "fleet": (lambda v: isinstance(v, WarmFleet), "a gen_agent.backends.codex.WarmFleet"),
}


def _toml(value: Any) -> str:
    """A TOML literal for a validated config value (JSON strings are valid TOML strings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return "[" + ", ".join(_toml(item) for item in value) + "]"


# -- the session and the backend -------------------------------------------------------------


class CodexSession(CLISession, frozen=True, kw_only=True):
    """A `CodexCLI` session: options plus the thread to resume. Immutable value.

    Fields:
        options: the validated `CodexOptions`.
        cli: the resolved path of the `codex` executable.
        thread_id: the Codex thread resumed by the next turn, or None for a new thread.
        turns: successful turns so far (count).
        runner: the holder of the current turn's child process (exec mode; shared by
            copies).
        app: the live `codex app-server` process and its thread (app-server mode; shared by
            copies).
        thread_usage: exec mode: the thread's token totals after its last completed turn
            (`turn.completed` reports the thread's totals; a turn's `usage` is the
            difference), or None when unknown (a new thread, or one resumed from a bare id).
        schema_file: exec mode, set only on the copy one turn runs with: the temporary JSON
            schema file passed as `--output-schema` (structured output), else None.

    Thread-safety: immutable; the runner and the slot inside are thread-safe.
    """

    options: CodexOptions
    thread_id: str | None = None
    app: AppSlot = msgspec.field(default_factory=AppSlot)
    thread_usage: dict[str, int] | None = None
    schema_file: str | None = None

    @property
    def pid(self) -> int | None:
        """App-server mode: the live `codex app-server` process id, or None."""
        return self.app.pid

    def wait_warm(self, timeout: float) -> bool:
        """App-server mode: wait up to `timeout` seconds until the session has an idle live
        process that answered `initialize` and started its thread (a pre-warm or a
        replacement is ready). True when it has; False on timeout (for tests and
        benchmarks)."""
        return wait_ready(self.app, timeout)


class CodexCLI(CLIBackend[CodexSession]):
    """The Codex CLI backend; pass the class itself as the agent's backend.

    Backend options (returned by `init_agent`; see `CodexOptions` for each one's meaning,
    default and unit): `cli_path`, `cwd`, `env`, `inherit_env`, `codex_home`, `model`,
    `profile`, `sandbox`, `config`, `skip_git_repo_check`, `images`, `session_id`,
    `extra_args`, `max_line_bytes`, `stderr_tail_bytes`, `exit_grace_ms`, `term_grace_ms`;
    app-server mode also `approval_policy`, `idle_timeout_ms`, `interrupt_grace_ms`,
    `permission_timeout_ms`, `prewarm` and `fleet` (docs/pages/backends/codex.md).
    `ephemeral` is rejected (resuming needs the saved thread).

    Hooks (shared with `ClaudeCLI`): `start_session` validates the options and finds the CLI
    (no process); `resume_session(session_id, opts)` starts resuming that thread; `prompt`
    runs one `codex exec` child per turn and streams its events, checkpointing the thread id
    (the prompt `"-"`, which the CLI reads as "read the prompt from stdin", is a
    `DispatchError` of kind `"invalid_prompt"`); `update_session` / `checkpoint_session`
    keep the thread to resume; `reset_session` forgets it; `cancel` and `terminate_session`
    kill the running child's process tree.

    Errors (reasons are data): option errors at start are `SessionStartError` with
    `("unknown_option", key)` or `("invalid_option", key, value)`; every provider failure is
    a `BackendError` with provider `"codex"`, as a `SessionStartError` / `DispatchError`
    reason or as the `reason` of a terminal `error` event.

    Thread-safety: every hook may run in any thread; `cancel` may run while `prompt`'s stream
    is being read in another thread.

    Mirrors: `GenAgentCodex` (docs/pages/contract.md#s7-6, second bullet; docs: the backend guide).
    """

    _PROVIDER = PROVIDER
    _INSTALL_HINT = INSTALL_HINT
    _OPTIONS = CodexOptions
    _CHECKS = _CHECKS
    _REJECTED = {
        "ephemeral": "the backend resumes each next turn from the thread the CLI saved, which "
        "--ephemeral turns off",
    }
    _ESCAPING_MODE = "mode='app_server'"
    _RESUME_FIELD = "thread_id"
    _SESSION_NOT_FOUND = THREAD_NOT_FOUND
    # What the thread the CLI saved keeps of a turn cut short (its process killed, or an
    # interrupt), in both modes, measured on 0.171.0: the user message, and every tool call
    # with its output (a call still running gets "aborted"). `interrupted_preamble` leaves
    # these out (docs/pages/durable-sessions.md#what-the-clis-keep-of-a-cut-turn).
    keeps_cut_turn: Final = frozenset({"prompt", "tool_calls"})

    @classmethod
    def command(cls, session: CodexSession, prompt: str) -> list[str]:
        """The argument list one turn runs.

        `codex exec --json [flags] -- PROMPT` for a new thread, and
        `codex exec --json [flags] resume -- THREAD_ID PROMPT` to continue one; the `--` keeps
        a prompt that starts with `-` from being read as an option. The flags include
        `--output-schema FILE` when the turn asks for structured output (`schema_file`).

        Args:
            session: the session (its options and the thread to resume).
            prompt: the prompt text, one argument.

        Returns:
            The argv (`list[str]`).
        """
        o = session.options
        argv = [session.cli, "exec", "--json"]
        if o.skip_git_repo_check:
            argv.append("--skip-git-repo-check")
        for flag, value in (
            ("--model", o.model),
            ("--profile", o.profile),
            ("--sandbox", o.sandbox),
            ("--cd", o.cwd),
        ):
            if value is not None:
                argv += [flag, value]
        for key, value in o.config.items():
            argv += ["--config", f"{key}={_toml(value)}"]
        for image in o.images:
            argv += ["--image", image]
        if session.schema_file is not None:
            argv += ["--output-schema", session.schema_file]
        argv += o.extra_args
        if session.thread_id is not None:
            return [*argv, "resume", "--", session.thread_id, prompt]
        return [*argv, "--", prompt]

    @classmethod
    def app_server_command(cls, session: CodexSession) -> list[str]:
        """The argument list of an app-server process: `codex app-server [-c key=value]...`.

        Returns:
            The argv (`list[str]`).
        """
        o = session.options
        argv = [session.cli, "app-server"]
        config = dict(o.config)
        if o.profile is not None:
            config.setdefault("profile", o.profile)
        for key, value in config.items():
            argv += ["--config", f"{key}={_toml(value)}"]
        return [*argv, *o.extra_args]

    @classmethod
    def prompt(
        cls, session: CodexSession, prompt: str, context: TurnContext
    ) -> tuple[Iterator[Event], CodexSession]:
        """Run one turn: per-turn `codex exec` (the default), or on the session's
        `codex app-server` process (`mode="app_server"`: started at the first turn, which
        starts or resumes the thread, or before it with `prewarm`; kept across turns).

        Structured output (`context.options.output`, see `gen_agent._output`): the type's
        `strict_schema_of` goes to the CLI, which sends it as the Responses API's
        `text.format` (strict): exec mode writes it to a temporary file passed as
        `--output-schema FILE` and removes the file when the turn's stream ends (completed,
        failed, interrupted or closed; a stream never read removes it when collected);
        app-server mode sends it as `outputSchema` in `turn/start`.

        Raises:
            TypeError: `prompt` is not a str.
            DispatchError: a `BackendError`: see `CLIBackend.prompt`; in app-server mode also
                `"rpc_error"` (the server refused `thread/start`, `thread/resume` or
                `turn/start`), `"rpc_timeout"`, `"cli_exited"`.

        Mirrors: `prompt/3` (docs/pages/contract.md#s7-1, #s7-6; docs: the backend guide).
        """
        o = session.options
        output = context.options.output
        if o.mode != "app_server":
            if output is None:
                return super().prompt(session, prompt, context)
            schema_file = _write_schema(strict_schema_of(output))
            try:
                events, _ = super().prompt(
                    msgspec.structs.replace(session, schema_file=schema_file), prompt, context)
            except BaseException:
                _remove(schema_file)
                raise
            return _removing_after(events, schema_file), session
        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")

        def spawn() -> ChildProcess:
            return ChildProcess.spawn(**cls._app_spec(session, session.thread_id),
                                      owner=session.app)

        model = o.model if o.model is not None else _configured_model(o)
        events = app_turn(
            session.app, prompt, context, spawn=spawn, thread_params=_thread_params(o),
            resume_id=session.thread_id, model=model, idle_timeout_ms=o.idle_timeout_ms,
            interrupt_grace_ms=o.interrupt_grace_ms,
            permission_timeout_ms=o.permission_timeout_ms,
            output_schema=None if output is None else strict_schema_of(output),
            tail_bytes=o.stderr_tail_bytes)
        return events, session

    @classmethod
    def _app_spec(cls, session: CodexSession, thread_id: str | None) -> dict[str, Any]:
        """The `ChildProcess.spawn` keyword arguments of an app-server process for
        `thread_id` (None: a new thread), owner excluded."""
        o = session.options
        return {"argv": cls.app_server_command(session), "provider": PROVIDER,
                "env": cls._child_env(o), "cwd": o.cwd, "max_line_bytes": o.max_line_bytes,
                "stderr_tail_bytes": o.stderr_tail_bytes, "exit_grace_ms": o.exit_grace_ms,
                "term_grace_ms": o.term_grace_ms, "install_hint": INSTALL_HINT,
                "stdin_pipe": True, "session_id": thread_id}

    @classmethod
    def start_session(cls, opts: Any) -> CodexSession:
        """Validate `opts` and find the CLI; no process is started (see
        `CLIBackend.start_session`).

        Raises:
            SessionStartError: as `CLIBackend.start_session`; also
                `("invalid_option", key, value)` for `prewarm` or `fleet` outside app-server
                mode.
        """
        session = super().start_session(opts)
        o = session.options
        check_warm_only("CodexCLI", opts, o, o.mode == "app_server",
                        "app-server mode (mode='app_server')")
        return session

    @classmethod
    def prewarm_session(cls, session: CodexSession, *, info: Any,
                        handles_permissions: bool = False, output: Any = None) -> None:
        """Start the app-server in the background when the `prewarm` option (or a `fleet`)
        asks for it: the process, `initialize`, and `thread/start` (or `thread/resume` of
        the session's thread); otherwise do nothing. Called by the runtime in the agent
        thread once the agent has started (after `pre_run`); never blocks, never raises for
        the CLI's failures (the first turn reports them, as a spawn failure).
        `handles_permissions` and `output` change nothing here: approvals and the output
        schema are per turn (`turn/start`)."""
        o = session.options
        if o.mode != "app_server" or not (
                o.prewarm or (o.prewarm is None and o.fleet is not None)):
            return
        cls._start_prewarm(session, info)

    @classmethod
    def _start_prewarm(cls, session: CodexSession, info: Any) -> None:
        o = session.options
        slot = session.app
        slot.prewarm = AppPrewarmer(
            lambda thread_id: cls._app_spec(session, thread_id), _thread_params(o), info,
            idle_timeout_ms=o.idle_timeout_ms, tail_bytes=o.stderr_tail_bytes, fleet=o.fleet)
        slot.prewarm.start(slot, session.thread_id)

    @classmethod
    def cancel(cls, session: CodexSession) -> None:
        """Interrupt the running turn: app-server, `turn/interrupt` (the process survives;
        killed past `interrupt_grace_ms`); exec, SIGKILL to the process tree. Any thread;
        idempotent; quick."""
        session.app.cancel()
        session.runner.cancel()

    @classmethod
    def terminate_session(cls, session: CodexSession) -> None:
        """End the app-server process and wait until it is gone; kill an exec child's tree.
        Idempotent.

        App-server: a turn still running gets `turn/interrupt` first (the CLI ends its
        command) and up to `min(interrupt_grace_ms, 2000)` ms to settle, else its tree is
        SIGKILLed; then EOF on its stdin (SIGKILL to its tree past `exit_grace_ms`)."""
        o = session.options
        session.app.stop(grace_s=stop_grace_s(o.interrupt_grace_ms),
                         wait_s=(o.exit_grace_ms + o.term_grace_ms) / 1000 + 1.0)
        super().terminate_session(session)

    @classmethod
    def reset_session(cls, session: CodexSession) -> CodexSession:
        """Start a new thread on the next turn; app-server mode closes the process (the next
        turn starts a new one and a new thread: one process start; pre-warmed, the old
        process is gone before the new one starts in the background). Mirrors
        `reset_session/1` (§2.15)."""
        old = session.app
        prewarm = old.prewarm
        o = session.options
        old.close(wait_s=None if prewarm is None else
                  (o.exit_grace_ms + o.term_grace_ms) / 1000 + 1.0)
        reset = msgspec.structs.replace(super().reset_session(session), app=AppSlot(),
                                        thread_usage=None)
        if prewarm is not None:
            cls._start_prewarm(reset, prewarm.info)
        return reset

    @classmethod
    def update_session(cls, session: CodexSession, result_data: Mapping[str, Any]) -> CodexSession:
        """After a successful turn: remember the thread, count the turn, and keep the
        thread's token totals the result reports (`thread_usage`, exec mode)."""
        updated = super().update_session(session, result_data)
        totals = result_data.get("thread_usage")
        if isinstance(totals, dict):
            return msgspec.structs.replace(updated, thread_usage=dict(totals))
        return updated

    @classmethod
    def checkpoint_session(cls, session: CodexSession, session_id: str) -> CodexSession:
        """Apply a thread id acknowledged through `TurnContext.checkpoint` (§7.3); another
        thread than the one whose totals are kept forgets them."""
        updated = super().checkpoint_session(session, session_id)
        if session_id != session.thread_id:
            return msgspec.structs.replace(updated, thread_usage=None)
        return updated

    @classmethod
    def export_session(cls, session: CodexSession) -> dict[str, Any]:
        """The resumable session for a session store: `{"session_id": thread id or None,
        "thread_usage": the thread's token totals or None}` (the totals let the first turn
        after a restore report its own usage, not the thread's)."""
        return {"session_id": session.thread_id,
                "thread_usage": None if session.thread_usage is None
                else dict(session.thread_usage)}

    @classmethod
    def restore_session(cls, data: Mapping[str, Any], opts: Mapping[str, Any]) -> CodexSession:
        """`start_session(opts)` resuming the thread of `export_session`'s `data` (with its
        token totals; a record without them, e.g. an older one, is restored without).

        Raises:
            SessionStartError: as `start_session`. ValueError: `data` is not such a record.
        """
        session = super().restore_session(data, opts)
        totals = data.get("thread_usage")
        if session.thread_id is not None and isinstance(totals, dict) and all(
                isinstance(k, str) and type(v) is int for k, v in totals.items()):
            return msgspec.structs.replace(session, thread_usage=dict(totals))
        return session

    @classmethod
    def _new_session(cls, options: Any, cli: str) -> CodexSession:
        return CodexSession(options=options, cli=cli, thread_id=options.session_id)

    @classmethod
    def _translator(cls, session: CodexSession) -> CodexStreamTranslator:
        o = session.options
        return CodexStreamTranslator(
            o.model if o.model is not None else _configured_model(o),
            thread_usage=session.thread_usage if session.thread_id is not None else None)

    @classmethod
    def _prompt_in_argv(cls, session: CodexSession) -> bool:
        return session.options.mode != "app_server"  # app-server: a stdin JSON-RPC line

    @classmethod
    def _check_prompt(cls, prompt: str) -> None:
        if prompt == "-":
            reason = BackendError.new(
                PROVIDER,
                "invalid_prompt",
                prompt,
                message="codex reads the prompt '-' as 'read the prompt from stdin'",
            )
            raise DispatchError(reason, reason.message)

    @classmethod
    def _child_env(cls, options: Any) -> dict[str, str]:
        env = super()._child_env(options)
        if options.codex_home is not None:
            env["CODEX_HOME"] = options.codex_home
        return env


def _write_schema(schema: dict[str, Any]) -> str:
    """Write `schema` (JSON) to a new private temporary file; return its path."""
    fd, path = tempfile.mkstemp(prefix="gen_agent-codex-schema-", suffix=".json")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(msgspec.json.encode(schema))
    except BaseException:
        _remove(path)
        raise
    return path


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _removing_after(events: Iterator[Event], path: str) -> Iterator[Event]:
    """`events`, removing the file at `path` once they end or are closed (and, for a stream
    never started, when it is collected)."""

    def stream() -> Iterator[Event]:
        try:
            yield from events
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()
            remove()

    wrapped = stream()
    remove = weakref.finalize(wrapped, _remove, path)
    return wrapped


def _thread_params(o: CodexOptions) -> dict[str, Any]:
    """The `thread/start` / `thread/resume` parameters of the options."""
    return {key: value for key, value in (
        ("cwd", o.cwd), ("model", o.model), ("sandbox", o.sandbox),
        ("approvalPolicy", o.approval_policy)) if value is not None}


def _configured_model(options: CodexOptions) -> str | None:
    model = options.config.get("model")
    return model if isinstance(model, str) and model else None
