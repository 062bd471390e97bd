"""`CodexCLI`: the OpenAI Codex CLI backend (`codex exec --json`, one JSON event per line).

Each turn runs `codex exec --json [options] -- PROMPT` (or, once a thread exists,
`codex exec --json [options] resume -- THREAD_ID PROMPT`) as a child in its own process group;
the prompt is one argument and never seen by a shell. Its stdout is read line by line (bounded,
see `gen_agent.backends._process`) and every line is normalized into `Event`s (contract §7.6,
second bullet). The thread id is checkpointed as soon as `thread.started` reports it (§7.3).

Two layers:

- `CodexStreamTranslator`: pure; one decoded JSONL line in, `Event`s out. Tested on recorded
  output of the real CLI, without a process.
- `CodexCLI`: the backend hooks; spawns and reads the child through `_process`.

Normalization (what each line becomes):

- `thread.started` → no event; its `thread_id` is checkpointed and becomes `session_id`;
- `turn.started`, `item.started`, `item.updated` → nothing;
- `item.completed` with an `agent_message` → `text` {text, message_boundary: True, item_id};
- `item.completed` with a `command_execution`, `file_change`, `mcp_tool_call` or
  `web_search` → `tool_use` and then `tool_result`, each with the whole item;
  `tool_call` → `tool_use`; `tool_result` → `tool_result`;
- `item.completed` with any other item (`reasoning`, `todo_list`, a non-fatal `error`
  warning...) → `codex.item` with the whole item (its `type` says which);
- `error` (a notification, e.g. a retry or the reason a turn is about to fail) →
  `codex.error` {message}; remembered, never terminal by itself;
- `turn.completed` → `usage` {input_tokens, output_tokens, cached_input_tokens, and the
  CLI's other counters} then the terminal `result` **without text** (the text is assembled from
  the messages) with `session_id` (the thread id), `model`, `provider`, `raw`;
- `turn.failed` → the terminal `error` with a `BackendError` reason (the failure's message,
  else the last notification);
- any other line type → `codex.<type>`; a line that is not JSON → `codex.unparsed`.

When stdout ends without `turn.completed` / `turn.failed`, the turn ends with a terminal
`error` all the same: kind `"cli_error"` carrying the last notification when there was one,
else `"no_result"` with the exit status and the stderr tail.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

import msgspec
from loguru import logger

from gen_agent.backend import Backend, BackendError, DispatchError, SessionStartError, TurnContext
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
    "SANDBOX_MODES",
    "CodexCLI",
    "CodexOptions",
    "CodexSession",
    "CodexStreamTranslator",
    "translate_lines",
]

PROVIDER: Final = "codex"

INSTALL_HINT: Final = (
    "install the Codex CLI with `npm install -g @openai/codex` "
    "(or set the `cli_path` option to its `codex` executable)"
)
"""What the "not found" errors tell the user to install."""

SANDBOX_MODES: Final = frozenset({"read-only", "workspace-write", "danger-full-access"})
"""The values of the `sandbox` option (`codex exec --sandbox`)."""

# Items that are tool activity: each becomes a tool_use and a tool_result with the whole item.
_TOOL_ITEMS: Final = frozenset({"command_execution", "file_change", "mcp_tool_call", "web_search"})
_UNPARSED_PREFIX_BYTES: Final = 1024
# The CLI reports HTTP failures only as text ("unexpected status 401 Unauthorized: ...",
# "exceeded retry limit, last status: 429 ..."); the status is what makes a reason retryable.
_STATUS_IN_MESSAGE: Final = re.compile(r"\b(?:unexpected status|last status:)\s+([1-5]\d\d)\b")
_json_decoder = msgspec.json.Decoder()


# -- options -------------------------------------------------------------------------------


class CodexOptions(msgspec.Struct, frozen=True, kw_only=True):
    """The validated options of a `CodexCLI` session (see `OPTIONS` for the accepted keys).

    Fields:
        cli_path: the `codex` executable (a name looked up on PATH, or a path).
        cwd: the working directory of the CLI and its `--cd` root (an existing directory), or
            None for ours.
        env: environment variables for the CLI, over our own environment (or alone, see
            `inherit_env`).
        inherit_env: start from our own environment (`os.environ`); False gives the CLI `env`
            only (tests use it to keep a developer's credentials away from the CLI).
        codex_home: the CLI's configuration folder (`CODEX_HOME`), or None for its default.
        model: `--model`, or None for the configured default.
        profile: `--profile`, or None.
        sandbox: `--sandbox` (one of `SANDBOX_MODES`), or None for the configured default.
        config: `-c key=value` overrides; each value (str, int, float, bool or a list of
            them) is written as TOML.
        skip_git_repo_check: pass `--skip-git-repo-check` (default True: an agent's working
            folder is often not a git repository).
        images: `--image` files attached to every prompt.
        session_id: a thread to resume on the first turn, or None for a new one.
        extra_args: further arguments placed before the prompt, as given.
        max_line_bytes: the bound on one stdout line (bytes; a longer line fails the turn).
        stderr_tail_bytes: how much of the CLI's stderr to keep for errors (bytes).
        exit_grace_ms: how long the CLI may run after its outcome line before SIGTERM (ms).
        term_grace_ms: how long between SIGTERM and SIGKILL (ms).
    """

    cli_path: str = "codex"
    cwd: str | None = None
    env: dict[str, str] = msgspec.field(default_factory=dict)
    inherit_env: bool = True
    codex_home: str | None = None
    model: str | None = None
    profile: str | None = None
    sandbox: str | None = None
    config: dict[str, Any] = msgspec.field(default_factory=dict)
    skip_git_repo_check: bool = True
    images: tuple[str, ...] = ()
    session_id: str | None = None
    extra_args: tuple[str, ...] = ()
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    stderr_tail_bytes: int = DEFAULT_STDERR_TAIL_BYTES
    exit_grace_ms: int = DEFAULT_EXIT_GRACE_MS
    term_grace_ms: int = DEFAULT_TERM_GRACE_MS


OPTIONS: Final = frozenset(CodexOptions.__struct_fields__)
"""The option keys `CodexCLI.start_session` accepts."""

_REJECTED: Final = {
    "ephemeral": "the backend resumes each next turn from the thread the CLI saved, which "
    "--ephemeral turns off",
}


def _is_text(value: Any) -> bool:
    return isinstance(value, str) and value != "" and "\x00" not in value


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _is_str_seq(value: Any) -> bool:
    return isinstance(value, list | tuple) and all(_is_text(item) for item in value)


def _is_positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_env(value: Any) -> bool:
    return isinstance(value, Mapping) and all(
        _is_text(k) and "=" not in k and isinstance(v, str) and "\x00" not in v
        for k, v in value.items()
    )


def _is_dir(value: Any) -> bool:
    return _is_text(value) and os.path.isdir(value)


def _is_toml_scalar(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" not in value
    return isinstance(value, bool | int | float)


def _is_config(value: Any) -> bool:
    return isinstance(value, Mapping) and all(
        _is_text(key)
        and "=" not in key
        and (
            _is_toml_scalar(item)
            or (isinstance(item, list | tuple) and all(_is_toml_scalar(x) for x in item))
        )
        for key, item in value.items()
    )


# key -> (check, expected form for the error message)
_CHECKS: Final = {
    "cli_path": (_is_text, "a non-empty str (a program name or path)"),
    "cwd": (_is_dir, "the path of an existing directory"),
    "env": (_is_env, "a dict of str names (without '=') to str values"),
    "inherit_env": (_is_bool, "a bool"),
    "codex_home": (_is_dir, "the path of an existing directory"),
    "model": (_is_text, "a non-empty str"),
    "profile": (_is_text, "a non-empty str"),
    "sandbox": (SANDBOX_MODES.__contains__, f"one of {sorted(SANDBOX_MODES)}"),
    "config": (_is_config, "a dict of str keys to str/int/float/bool values or lists of them"),
    "skip_git_repo_check": (_is_bool, "a bool"),
    "images": (_is_str_seq, "a list of non-empty str (file paths)"),
    "session_id": (_is_text, "a non-empty str"),
    "extra_args": (_is_str_seq, "a list of non-empty str"),
    "max_line_bytes": (_is_positive_int, "an int >= 1 (bytes)"),
    "stderr_tail_bytes": (_is_count, "an int >= 0 (bytes)"),
    "exit_grace_ms": (_is_count, "an int >= 0 (milliseconds)"),
    "term_grace_ms": (_is_count, "an int >= 0 (milliseconds)"),
}


def _validate(opts: Any) -> CodexOptions:
    if not isinstance(opts, Mapping):
        raise SessionStartError(
            ("invalid_options", type(opts).__name__),
            f"CodexCLI options must be a dict, got {type(opts).__name__}",
        )
    for key, value in opts.items():
        if key in _REJECTED:
            raise SessionStartError(
                ("invalid_option", key, value), f"CodexCLI option {key!r}: {_REJECTED[key]}"
            )
        if key not in _CHECKS:
            raise SessionStartError(
                ("unknown_option", key),
                f"unknown CodexCLI option {key!r}; valid options: {', '.join(sorted(OPTIONS))}",
            )
        check, expected = _CHECKS[key]
        if value is not None and not check(value):
            raise SessionStartError(
                ("invalid_option", key, value),
                f"CodexCLI option {key!r} must be {expected}, got {_shape(value)}",
            )
    given: dict[str, Any] = {
        k: (tuple(v) if isinstance(v, list) else v) for k, v in opts.items() if v is not None
    }
    for key in ("env", "config"):
        if key in given:
            given[key] = dict(given[key])
    return CodexOptions(**given)


def _shape(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 80 else text[:77] + '...'}"


def _toml(value: Any) -> str:
    """A TOML literal for a validated config value (JSON strings are valid TOML strings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return "[" + ", ".join(_toml(item) for item in value) + "]"


def _child_env(options: CodexOptions) -> dict[str, str]:
    env = {**os.environ, **options.env} if options.inherit_env else dict(options.env)
    if options.codex_home is not None:
        env["CODEX_HOME"] = options.codex_home
    return env


def _resolve_cli(options: CodexOptions) -> str:
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


# -- the pure translator ----------------------------------------------------------------


class CodexStreamTranslator:
    """Turns decoded `codex exec --json` lines of one turn into `Event`s. Pure: no I/O.

    Feed every line, in order, to `translate(line)`; it returns the events that line produces
    (possibly none). After the first terminal event every further line produces nothing.
    `take_thread_id()` returns a thread id not yet reported, once. `end_of_stream()` gives
    the terminal event for a stream that ended without an outcome line.

    Args:
        model: the model to report in the result (the CLI's JSONL does not name it), or None.

    Not thread-safe: one turn, one owner.
    """

    def __init__(self, model: str | None = None) -> None:
        self.model = model
        self.thread_id: str | None = None
        self.finished = False
        self.last_notification: str | None = None
        self._reported_thread_id: str | None = None

    def translate(self, line: Any) -> list[Event]:
        """Translate one decoded line (normally a `dict`) into events.

        Args:
            line: the decoded JSON value of one stdout line.

        Returns:
            The events, in order; empty for lines that produce none. Never raises for
            unexpected shapes: unknown types become `codex.<type>` events.
        """
        if self.finished:
            return []
        if not isinstance(line, dict):
            return [Event.new("codex.unknown", {"value": line})]
        kind = line.get("type")
        handler = _HANDLERS.get(kind) if isinstance(kind, str) else None
        if handler is None:
            name = kind if isinstance(kind, str) and kind else "unknown"
            return [Event.new(f"codex.{name}", _without_type(line))]
        events = handler(self, line)
        if any(event.is_terminal for event in events):
            self.finished = True
        return events

    def unparsed(self, raw: bytes) -> Event:
        """The event for a stdout line that is not JSON (non-terminal).

        Returns:
            `codex.unparsed` with `size_bytes` and the first 1 KiB as text (`line`).
        """
        prefix = raw[:_UNPARSED_PREFIX_BYTES].decode("utf-8", errors="replace")
        return Event.new("codex.unparsed", {"size_bytes": len(raw), "line": prefix})

    def take_thread_id(self) -> str | None:
        """A thread id seen since the last call (the first one, or a changed one), or None."""
        if self.thread_id is None or self.thread_id == self._reported_thread_id:
            return None
        self._reported_thread_id = self.thread_id
        return self.thread_id

    def end_of_stream(self, exit_code: int | None = None, stderr_tail: str = "") -> Event | None:
        """The terminal event for stdout ending before `turn.completed` / `turn.failed`.

        Args:
            exit_code: the CLI's exit status, if known.
            stderr_tail: the end of the CLI's stderr (text).

        Returns:
            None if the turn already ended; else a terminal `error`: kind `"cli_error"` with
            the last `error` notification as message when there was one, else `"no_result"`.
        """
        if self.finished:
            return None
        self.finished = True
        raw = {
            "exit_code": exit_code,
            "stderr_tail": stderr_tail,
            "notification": self.last_notification,
        }
        if self.last_notification is not None:
            reason = BackendError.new(PROVIDER, "cli_error", raw, message=self.last_notification)
        else:
            message = f"codex exited with status {exit_code} before turn.completed"
            if stderr_tail.strip():
                message += f"; stderr tail: {stderr_tail.strip()}"
            reason = BackendError.new(PROVIDER, "no_result", raw, message=message)
        return self._error_event(reason)

    # -- per line type ----------------------------------------------------------------

    def _thread_started(self, line: dict[str, Any]) -> list[Event]:
        thread_id = line.get("thread_id")
        if _is_text(thread_id):
            self.thread_id = thread_id
        return []

    def _nothing(self, line: dict[str, Any]) -> list[Event]:
        return []

    def _item_completed(self, line: dict[str, Any]) -> list[Event]:
        item = line.get("item")
        if not isinstance(item, dict):
            return [Event.new("codex.item", {"value": item})]
        item_type = item.get("type")
        if item_type == "agent_message":
            text = item.get("text")
            if not isinstance(text, str):
                return [Event.new("codex.item", dict(item))]
            data: dict[str, Any] = {"text": text, "message_boundary": True}
            if isinstance(item.get("id"), str):
                data["item_id"] = item["id"]
            return [Event.new("text", data)]
        if item_type in _TOOL_ITEMS:
            return [Event.new("tool_use", dict(item)), Event.new("tool_result", dict(item))]
        if item_type == "tool_call":
            return [Event.new("tool_use", dict(item))]
        if item_type == "tool_result":
            return [Event.new("tool_result", dict(item))]
        return [Event.new("codex.item", dict(item))]

    def _notification(self, line: dict[str, Any]) -> list[Event]:
        message = line.get("message")
        if isinstance(message, str) and message:
            self.last_notification = message
        return [Event.new("codex.error", _without_type(line))]

    def _turn_completed(self, line: dict[str, Any]) -> list[Event]:
        events: list[Event] = []
        usage = _usage_data(line.get("usage"))
        if usage:
            events.append(Event.new("usage", usage))
        data = {
            "session_id": self.thread_id,
            "model": self.model,
            "provider": PROVIDER,
            "raw": line,
        }
        events.append(Event.new("result", data))
        return events

    def _turn_failed(self, line: dict[str, Any]) -> list[Event]:
        error = line.get("error")
        message = error.get("message") if isinstance(error, dict) else error
        if not isinstance(message, str) or not message:
            message = self.last_notification
        return [self._error_event(_failure_reason(line, message))]

    def _error_event(self, reason: BackendError) -> Event:
        data = {"reason": reason, "session_id": self.thread_id, "model": self.model}
        return Event.new("error", {**data, "provider": PROVIDER})


def _failure_reason(line: dict[str, Any], message: str | None) -> BackendError:
    """The `BackendError` of a `turn.failed` line (the one mapping for CLI failures).

    An HTTP status named in the message ("unexpected status 401 ...") gives the kind and
    retryable flag of `BackendError.http`; any other failure is kind `"turn_failed"`.
    """
    match = _STATUS_IN_MESSAGE.search(message or "")
    if match is not None:
        body = {"error": {"message": message}}
        return BackendError.http(PROVIDER, int(match.group(1)), body, None, line)
    return BackendError.new(PROVIDER, "turn_failed", line, message=message)


_HANDLERS: Final = {
    "thread.started": CodexStreamTranslator._thread_started,
    "turn.started": CodexStreamTranslator._nothing,
    "item.started": CodexStreamTranslator._nothing,
    "item.updated": CodexStreamTranslator._nothing,
    "item.completed": CodexStreamTranslator._item_completed,
    "error": CodexStreamTranslator._notification,
    "turn.completed": CodexStreamTranslator._turn_completed,
    "turn.failed": CodexStreamTranslator._turn_failed,
}


def _without_type(line: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in line.items() if key != "type"}


def _usage_data(usage: Any) -> dict[str, Any]:
    if not isinstance(usage, dict):
        return {}
    return {
        key: value
        for key, value in usage.items()
        if isinstance(key, str) and isinstance(value, int) and not isinstance(value, bool)
    }


def decode_line(raw: bytes) -> Any:
    """Decode one stdout line with msgspec; raises `msgspec.DecodeError` if it is not JSON."""
    return _json_decoder.decode(raw)


def translate_lines(lines: Iterable[bytes | str | Any], model: str | None = None) -> list[Event]:
    """Translate a whole recorded turn (JSONL lines or decoded dicts) into its events.

    Args:
        lines: the lines in order: `bytes`/`str` JSON text (blank lines skipped) or decoded
            values.
        model: the model to report in the result, or None.

    Returns:
        The events up to and including the first terminal event, like a live turn (a
        recording without an outcome line ends with the `end_of_stream` error).
    """
    translator = CodexStreamTranslator(model)
    events: list[Event] = []
    for line in lines:
        if isinstance(line, str):
            line = line.encode()
        if isinstance(line, bytes):
            if not line.strip():
                continue
            try:
                value = decode_line(line)
            except msgspec.DecodeError:
                events.append(translator.unparsed(line))
                continue
        else:
            value = line
        events.extend(translator.translate(value))
        if translator.finished:
            return events
    end = translator.end_of_stream()
    return [*events, end] if end is not None else events


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


class CodexSession(msgspec.Struct, frozen=True, kw_only=True):
    """A `CodexCLI` session: options plus the thread to resume. Immutable value.

    Fields:
        options: the validated `CodexOptions`.
        cli: the resolved path of the `codex` executable.
        thread_id: the Codex thread resumed by the next turn, or None for a new thread.
        turns: successful turns so far (count).
        runner: the holder of the current turn's child process (shared by copies).

    Thread-safety: immutable; the runner inside is thread-safe.
    """

    options: CodexOptions
    cli: str
    thread_id: str | None = None
    turns: int = 0
    runner: _Runner = msgspec.field(default_factory=_Runner)

    @property
    def last_child(self) -> ChildProcess | None:
        """The child process of the latest turn (for diagnostics and tests), or None."""
        return self.runner.last_child


class CodexCLI(Backend):
    """The Codex CLI backend; pass the class itself as the agent's backend.

    Backend options (returned by `init_agent`; see `CodexOptions` for each one's meaning,
    default and unit): `cli_path`, `cwd`, `env`, `inherit_env`, `codex_home`, `model`,
    `profile`, `sandbox`, `config`, `skip_git_repo_check`, `images`, `session_id`,
    `extra_args`, `max_line_bytes`, `stderr_tail_bytes`, `exit_grace_ms`, `term_grace_ms`.
    `ephemeral` is rejected (resuming needs the saved thread).

    Errors (reasons are data): option errors at start are `SessionStartError` with
    `("unknown_option", key)` or `("invalid_option", key, value)`; every provider failure is
    a `BackendError` with provider `"codex"`, as a `SessionStartError` / `DispatchError`
    reason or as the `reason` of a terminal `error` event.

    Thread-safety: every hook may run in any thread; `cancel` may run while `prompt`'s stream
    is being read in another thread.

    Mirrors: `GenAgentCodex` (contract §7.6, second bullet).
    """

    @classmethod
    def start_session(cls, opts: Mapping[str, Any]) -> CodexSession:
        """Validate `opts` and find the CLI; no process is started.

        Args:
            opts: the backend options (`dict`), all optional.

        Returns:
            A `CodexSession` (resuming `opts["session_id"]` when given).

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
        return CodexSession(options=options, cli=cli, thread_id=options.session_id)

    @classmethod
    def resume_session(cls, session_id: str, opts: Mapping[str, Any]) -> CodexSession:
        """`start_session(opts)` resuming the Codex thread `session_id`.

        Raises:
            SessionStartError: as `start_session`; also for an empty `session_id`.
        """
        if not _is_text(session_id):
            raise SessionStartError(("invalid_session_id", session_id), "empty session id")
        return cls.start_session({**opts, "session_id": session_id})

    @classmethod
    def command(cls, session: CodexSession, prompt: str) -> list[str]:
        """The argument list one turn runs.

        `codex exec --json [flags] -- PROMPT` for a new thread, and
        `codex exec --json [flags] resume -- THREAD_ID PROMPT` to continue one; the `--` keeps
        a prompt that starts with `-` from being read as an option.

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
        argv += o.extra_args
        if session.thread_id is not None:
            return [*argv, "resume", "--", session.thread_id, prompt]
        return [*argv, "--", prompt]

    @classmethod
    def prompt(
        cls, session: CodexSession, prompt: str, context: TurnContext
    ) -> tuple[Iterator[Event], CodexSession]:
        """Start the CLI for one turn and return its lazily read event stream.

        Runs in the turn task. The child is started here (so a missing CLI is a dispatch
        error); the stream reads its stdout, checkpoints the thread id, ends with exactly one
        terminal event, and on close ends the child (see `_process`).

        Args:
            session: the `CodexSession`.
            prompt: the prompt (`str`), passed as one argument (no shell).
            context: the `TurnContext` (checkpoint and cancel signal).

        Returns:
            `(events, session)`: a generator of `Event`s and the same session.

        Raises:
            TypeError: `prompt` is not a str.
            DispatchError: a `BackendError`: `"invalid_prompt"` (the prompt `"-"`, which
                the CLI reads as "take the prompt from stdin"), `"cli_not_found"`,
                `"cwd_not_found"`, `"cli_not_executable"`, `"argument_list_too_long"` or
                `"spawn_failed"`.
            gen_agent.errors.CheckpointError: while iterating, when the agent rejects the
                thread id (the turn fails with the recorded checkpoint reason).

        Mirrors: `prompt/3` (contract §7.1, §7.3, §7.6).
        """
        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
        if prompt == "-":
            reason = BackendError.new(
                PROVIDER,
                "invalid_prompt",
                prompt,
                message="codex reads the prompt '-' as 'read the prompt from stdin'",
            )
            raise DispatchError(reason, reason.message)
        o = session.options
        try:
            child = ChildProcess.spawn(
                cls.command(session, prompt),
                provider=PROVIDER,
                env=_child_env(o),
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
        model = o.model if o.model is not None else _configured_model(o)
        return _turn_events(session, child, context, model), session

    @classmethod
    def update_session(cls, session: CodexSession, result_data: Mapping[str, Any]) -> Any:
        """After a successful turn: remember the result's thread id and count the turn."""
        thread_id = result_data.get("session_id")
        if not _is_text(thread_id):
            thread_id = session.thread_id
        return msgspec.structs.replace(session, thread_id=thread_id, turns=session.turns + 1)

    @classmethod
    def checkpoint_session(cls, session: CodexSession, session_id: str) -> CodexSession:
        """Apply a thread id acknowledged through `TurnContext.checkpoint` (§7.3)."""
        return msgspec.structs.replace(session, thread_id=session_id)

    @classmethod
    def reset_session(cls, session: CodexSession) -> CodexSession:
        """Start a new thread on the next turn (forget the thread id).

        Kills a child that is somehow still running. Mirrors `reset_session/1` (§2.15).
        """
        session.runner.cancel()
        return msgspec.structs.replace(session, thread_id=None, turns=0)

    @classmethod
    def cancel(cls, session: CodexSession) -> None:
        """Kill the current turn's process group now (any thread; idempotent; quick)."""
        session.runner.cancel()

    @classmethod
    def terminate_session(cls, session: CodexSession) -> None:
        """Kill a running child, if any. Idempotent."""
        session.runner.cancel()


def _configured_model(options: CodexOptions) -> str | None:
    model = options.config.get("model")
    return model if isinstance(model, str) and model else None


def _turn_events(
    session: CodexSession, child: ChildProcess, context: TurnContext, model: str | None
) -> Iterator[Event]:
    translator = CodexStreamTranslator(model)
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
        yield _ended_without_outcome(child, translator, context)
    finally:
        session.runner.detach(child)
        child.release()


def _line_events(
    raw: bytes, translator: CodexStreamTranslator, context: TurnContext
) -> list[Event]:
    if not raw.strip():
        return []
    try:
        value = decode_line(raw)
    except msgspec.DecodeError:
        logger.debug("gen_agent codex: a stdout line was not JSON ({} bytes)", len(raw))
        return [translator.unparsed(raw)]
    events = translator.translate(value)
    thread_id = translator.take_thread_id()
    if thread_id is not None:
        context.checkpoint(thread_id)  # a CheckpointError fails the turn (contract §7.3)
    return events


def _line_too_long(item: LineTooLong, translator: CodexStreamTranslator) -> Event:
    message = (
        f"a codex stdout line of {item.size_bytes} bytes exceeds max_line_bytes={item.limit_bytes}"
    )
    reason = BackendError.new(
        PROVIDER,
        "line_too_long",
        {"size_bytes": item.size_bytes, "limit_bytes": item.limit_bytes},
        message=message,
    )
    translator.finished = True
    return translator._error_event(reason)


def _ended_without_outcome(
    child: ChildProcess, translator: CodexStreamTranslator, context: TurnContext
) -> Event:
    if child.cancelled or context.cancelled:
        reason = BackendError.new(PROVIDER, "cancelled", None, message="the turn was cancelled")
        translator.finished = True
        return translator._error_event(reason)
    code = child.close()
    tail = child.stderr_tail().decode("utf-8", errors="replace")
    event = translator.end_of_stream(code, tail)
    assert event is not None  # the stream loop returns as soon as a terminal is seen
    return event
