"""What the two CLI backends (Claude Code, Codex) share: options, session and the turn runner.

- `CLIOptions` and `CLI_CHECKS`: the options every CLI backend takes (the program, its working
  directory and environment, the session to resume, extra arguments, the process bounds).
- `CLISession`: the fields every CLI session has, including the `Runner` that lets `cancel`
  reach the current turn's child from another thread.
- `CLIBackend`: every backend hook, once. A turn spawns the CLI through `_process` (in its own
  process group, the prompt one argument), reads its stdout line by line through the
  backend's `LineTranslator`, checkpoints the first session id the stream reports (contract
  §7.3), and ends with exactly one terminal event: the stream's own, else `"line_too_long"`,
  `"cancelled"`, or the translator's end-of-stream error (`"no_result"` with the exit status
  and the stderr tail). The next turn resumes the checkpointed conversation.

A backend subclasses `CLIBackend` with its provider, install hint, options and session types,
option table, the session field that holds the id to resume, and its `command`.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Final, Generic, TypeVar

import msgspec
from loguru import logger

from gen_agent._event import Event
from gen_agent._response import TextAccumulator
from gen_agent.backend import Backend, BackendError, DispatchError, SessionStartError, TurnContext
from gen_agent.backends._option_checks import (
    Check,
    duration_ms,
    int_at_least,
    is_arg,
    is_arg_seq,
    is_bool,
    is_env,
    rich_fields,
    shown_options,
    validate_options,
)
from gen_agent.backends._subprocess.jsonl import LineTranslator, OutputTail, translate_line
from gen_agent.backends._subprocess.process import (
    DEFAULT_EXIT_GRACE_MS,
    DEFAULT_MAX_LINE_BYTES,
    DEFAULT_STDERR_TAIL_BYTES,
    DEFAULT_TERM_GRACE_MS,
    ChildProcess,
    LineTooLong,
)

__all__ = ["CLI_CHECKS", "CLIBackend", "CLIOptions", "CLISession", "Runner", "argv_unsafe"]

_EXIT_WAIT_S: Final = 2.0  # how long a CLI that said it cannot go on may take to exit

# What an argument of a command line cannot hold: the OS ends it at a NUL, and a lone surrogate
# has no UTF-8 form (os.fsencode fails on it, or turns it into a stray byte).
_ARGV_UNSAFE: Final = re.compile("[\x00\ud800-\udfff]")


def argv_unsafe(text: str) -> tuple[int, str] | None:
    """The first character of `text` a command-line argument cannot carry.

    Returns:
        `(index, what)`: its index in `text` (0-based) and what it is (`"a NUL character"`,
        `"a lone surrogate U+D800"`), or None when `text` can be passed as an argument.
    """
    match = _ARGV_UNSAFE.search(text)
    if match is None:
        return None
    char = match.group(0)
    what = "a NUL character" if char == "\x00" else f"a lone surrogate U+{ord(char):04X}"
    return match.start(), what


class CLIOptions(msgspec.Struct, frozen=True, kw_only=True):
    """The options every CLI backend takes (each backend's options Struct extends it).

    Fields:
        cli_path: the executable (a name looked up on PATH, or a path; a relative path is
            resolved against the caller's working directory when the session starts).
        cwd: the working directory of the CLI, or None for ours. It need not exist when the
            session starts (an agent may create it in `pre_run`, docs/pages/contract.md#s10
            Workspace); a turn dispatched while it is missing fails with `"cwd_not_found"`.
        env: environment variables for the CLI, over our own environment (or alone, see
            `inherit_env`).
        inherit_env: start from our own environment (`os.environ`); False gives the CLI
            `env` only.
        session_id: a conversation to resume on the first turn, or None.
        extra_args: further arguments placed before the prompt, as given.
        max_line_bytes: the bound on one stdout line (bytes; a longer line fails the turn).
        stderr_tail_bytes: how much of the CLI's stderr to keep for errors (bytes).
        exit_grace_ms: how long the CLI may run after its outcome line before SIGTERM (ms).
        term_grace_ms: how long between SIGTERM and SIGKILL (ms).
    """

    cli_path: str
    cwd: str | None = None
    env: dict[str, str] = msgspec.field(default_factory=dict)
    inherit_env: bool = True
    session_id: str | None = None
    extra_args: tuple[str, ...] = ()
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    stderr_tail_bytes: int = DEFAULT_STDERR_TAIL_BYTES
    exit_grace_ms: int = DEFAULT_EXIT_GRACE_MS
    term_grace_ms: int = DEFAULT_TERM_GRACE_MS

    def __repr__(self) -> str:
        return shown_options(self)  # credential environment variables masked

    def __rich_repr__(self) -> list[tuple[str, Any]]:
        return rich_fields(self)


CLI_CHECKS: Final[Mapping[str, Check]] = {
    "cli_path": (is_arg, "a non-empty str (a program name or path)"),
    "cwd": (is_arg, "a directory path (created by the first turn at the latest)"),
    "env": (is_env, "a dict of str names (without '=') to str values"),
    "inherit_env": (is_bool, "a bool"),
    "session_id": (is_arg, "a non-empty str"),
    "extra_args": (is_arg_seq, "a list of non-empty str"),
    "max_line_bytes": (int_at_least(1), "an int >= 1 (bytes)"),
    "stderr_tail_bytes": (int_at_least(0), "an int >= 0 (bytes)"),
    "exit_grace_ms": duration_ms(0),
    "term_grace_ms": duration_ms(0),
}
"""The option table rows of `CLIOptions` (see `_option_checks.validate_options`)."""


class Runner:
    """The children of a session: the current turn's (which `cancel` kills from the agent
    thread) and the earlier ones not yet reaped (ended in the background after their reply).
    Shared by every copy of the session. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._child: ChildProcess | None = None
        self._children: list[ChildProcess] = []
        self.last_child: ChildProcess | None = None

    def attach(self, child: ChildProcess) -> None:
        """Make `child` the current turn's child (and the latest one)."""
        with self._lock:
            self._children = [c for c in self._children if not c.reaped]
            self._children.append(child)
            self._child = child
            self.last_child = child

    def detach(self, child: ChildProcess) -> None:
        """The turn of `child` is over: it is no longer the one `cancel` kills."""
        with self._lock:
            if self._child is child:
                self._child = None

    def cancel(self) -> None:
        """Kill the current turn's child, if any (quick; idempotent)."""
        with self._lock:
            child = self._child
        if child is not None:
            child.cancel()

    def wait_previous(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds until every earlier child was reaped (a new turn
        starts only after the last one's CLI exited: it may still be saving the session).

        Returns:
            True if none is left.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            children = list(self._children)
        return all(child.wait_reaped(max(0.0, deadline - time.monotonic())) for child in children)

    def terminate(self, timeout: float) -> bool:
        """Kill the current turn's child (SIGKILL to its tree) and wait up to `timeout`
        seconds until every child is reaped: the earlier ones, whose turns are over, end by
        their own bounded escalation (a CLI that answered may still be saving its session,
        which the next incarnation resumes).

        Returns:
            True if every child was reaped in time.
        """
        with self._lock:
            children, current = list(self._children), self._child
            self._children, self._child = [], None
        if current is not None:
            current.cancel()
        deadline = time.monotonic() + timeout
        return all(child.wait_reaped(max(0.0, deadline - time.monotonic())) for child in children)


class CLISession(msgspec.Struct, frozen=True, kw_only=True):
    """The fields every CLI session has (each backend's session Struct extends it).

    Fields:
        options: the validated options.
        cli: the resolved path of the executable.
        turns: successful turns so far (count).
        runner: the holder of the current turn's child process (shared by copies).
    """

    options: CLIOptions
    cli: str
    turns: int = 0
    runner: Runner = msgspec.field(default_factory=Runner)

    @property
    def last_child(self) -> ChildProcess | None:
        """The child process of the latest turn (for diagnostics and tests), or None."""
        return self.runner.last_child


SessionT = TypeVar("SessionT", bound=CLISession)


class CLIBackend(Backend, Generic[SessionT]):
    """The backend hooks of a CLI backend, written once; subclasses configure them.

    Class attributes a subclass sets: `_PROVIDER`, `_INSTALL_HINT`, `_OPTIONS` (a
    `CLIOptions` subclass), `_CHECKS` (its option table), `_REJECTED` (keys refused on
    purpose, with why) and `_RESUME_FIELD` (the session field holding the id to resume).
    Class methods it implements: `command`, `_new_session`, `_translator`; it may extend
    `_child_env`, `_check_prompt` and `_prompt_in_argv`.

    Thread-safety: every hook may run in any thread; `cancel` may run while `prompt`'s stream
    is being read in another thread.
    """

    _PROVIDER: ClassVar[str]
    _INSTALL_HINT: ClassVar[str]
    _OPTIONS: ClassVar[type[CLIOptions]]
    _CHECKS: ClassVar[Mapping[str, Check]]
    _REJECTED: ClassVar[Mapping[str, str]] = {}
    _RESUME_FIELD: ClassVar[str]
    # What the CLI writes to stderr when the session it was asked to resume does not exist.
    _SESSION_NOT_FOUND: ClassVar[re.Pattern[str] | None] = None
    # The option that makes the backend send prompts on stdin (named in argv errors).
    _ESCAPING_MODE: ClassVar[str] = "a stdin mode"

    @classmethod
    def start_session(cls, opts: Mapping[str, Any]) -> SessionT:
        """Validate `opts` and find the CLI; no process is started.

        Args:
            opts: the backend options (`dict`), all optional.

        Returns:
            A session (resuming `opts["session_id"]` when given).

        Raises:
            SessionStartError: `("unknown_option", key)`, `("invalid_option", key, value)`,
                `("invalid_options", type_name)`, or a `BackendError` of kind
                `"cli_not_found"` whose message names what to install.

        Mirrors: `start_session/1` (docs/pages/contract.md#s7-1, #s7-6).
        """
        options = validate_options(
            opts,
            cls._OPTIONS,
            cls._CHECKS,
            backend=cls.__name__,
            rejected=cls._REJECTED,
            show_values=True,
        )
        try:
            cli = cls._resolve_cli(options)
        except BackendError as exc:
            raise SessionStartError(exc, exc.message) from None
        return cls._new_session(options, cli)

    @classmethod
    def resume_session(cls, session_id: str, opts: Mapping[str, Any]) -> SessionT:
        """`start_session(opts)` resuming the CLI conversation `session_id`.

        Raises:
            SessionStartError: as `start_session`; also for an empty `session_id`.
        """
        if not is_arg(session_id):
            raise SessionStartError(("invalid_session_id", session_id), "empty session id")
        return cls.start_session({**opts, "session_id": session_id})

    @classmethod
    def export_session(cls, session: SessionT) -> dict[str, Any]:
        """The resumable session for a session store: `{"session_id": id or None}`.

        The CLI keeps the transcript itself; the id is all it needs to resume.
        """
        return {"session_id": getattr(session, cls._RESUME_FIELD)}

    @classmethod
    def restore_session(cls, data: Mapping[str, Any], opts: Mapping[str, Any]) -> SessionT:
        """`start_session(opts)`, resuming the conversation in `export_session`'s `data`.

        Raises:
            SessionStartError: as `start_session`. ValueError: `data` is not such a record.
        """
        session_id = data.get("session_id") if isinstance(data, Mapping) else ...
        if session_id is ...:
            raise ValueError("a CLI session record is a dict with a session_id")
        if session_id is None:
            return cls.start_session(opts)
        return cls.resume_session(session_id, opts)

    @classmethod
    def check_prompt(cls, session: SessionT, prompt: str) -> None:
        """Refuse, at the client, a prompt this session's wire cannot carry: in the modes
        that pass the prompt as a command-line argument (`ClaudeCLI` per-turn, `CodexCLI`
        exec), a NUL or a lone surrogate. The warm and app-server modes carry any `str`
        (their stdin JSON escapes it), so nothing is refused there.

        Runs in the caller's thread, before the request is queued (`ask`, `tell`, ...), with
        the session the agent started with (the mode never changes).

        Raises:
            ValueError: naming the character and its index in the prompt.
        """
        if not cls._prompt_in_argv(session):
            return
        bad = argv_unsafe(prompt)
        if bad is not None:
            raise ValueError(cls._argv_message(session, bad))

    @classmethod
    def command(cls, session: SessionT, prompt: str) -> list[str]:
        """The argument list one turn runs: the CLI, its flags, then the prompt (one argument).

        Returns:
            The argv (`list[str]`).
        """
        raise NotImplementedError

    @classmethod
    def prompt(
        cls, session: SessionT, prompt: str, context: TurnContext
    ) -> tuple[Iterator[Event], SessionT]:
        """Start the CLI for one turn and return its lazily read event stream.

        Runs in the turn task. The child is started here (so a missing CLI is a dispatch
        error); the stream reads its stdout, checkpoints the first session id it sees, ends
        with exactly one terminal event, and on close ends the child (see `_process`).

        Args:
            session: the session.
            prompt: the prompt (`str`), passed as one argument (no shell).
            context: the `TurnContext` (checkpoint and cancel signal).

        Returns:
            `(events, session)`: a generator of `Event`s and the same session.

        Raises:
            TypeError: `prompt` is not a str.
            DispatchError: a `BackendError` (`"cli_not_found"`, `"cwd_not_found"`,
                `"cli_not_executable"`, `"argument_list_too_long"`, `"spawn_failed"`, or a
                prompt the CLI cannot take: `"invalid_request"` for a NUL or a lone surrogate,
                which a command-line argument cannot carry; `ask` and `tell` refuse those
                before queuing, so this is a prompt made by a callback).
            gen_agent.CheckpointError: while iterating, when the agent rejects the
                session id (the turn fails with the recorded checkpoint reason).

        Mirrors: `prompt/3` (docs/pages/contract.md#s7-1, #s7-3, #s7-6).
        """
        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
        bad = argv_unsafe(prompt)
        if bad is not None:
            message = cls._argv_message(session, bad)
            reason = BackendError.new(cls._PROVIDER, "invalid_request", {"index": bad[0]},
                                      message=message)
            raise DispatchError(reason, message)
        cls._check_prompt(prompt)
        o = session.options
        # The previous turn's CLI ends in the background after its reply; this turn starts
        # once it is gone (it may still be writing the session this turn resumes).
        if not session.runner.wait_previous((o.exit_grace_ms + o.term_grace_ms) / 1000 + 1.0):
            logger.debug("gen_agent {}: an earlier child is still running", cls._PROVIDER)
        env = cls._child_env(o)
        if context.trace_carrier:
            # The turn's trace context, so a CLI exporting its own spans nests them under the
            # agent's turn span (both CLIs read TRACEPARENT / TRACESTATE; docs/observability).
            env.update(context.trace_env())
        resumed = getattr(session, cls._RESUME_FIELD)
        try:
            child = ChildProcess.spawn(
                cls.command(session, prompt),
                provider=cls._PROVIDER,
                env=env,
                cwd=o.cwd,
                max_line_bytes=o.max_line_bytes,
                stderr_tail_bytes=o.stderr_tail_bytes,
                exit_grace_ms=o.exit_grace_ms,
                term_grace_ms=o.term_grace_ms,
                install_hint=cls._INSTALL_HINT,
                session_id=resumed if is_arg(resumed) else None,
                owner=session.runner,
            )
        except BackendError as exc:
            raise DispatchError(exc, exc.message) from None
        session.runner.attach(child)
        if context.cancelled:
            child.cancel()
        translator = cls._translator(session)
        ending = _Ending(cls._PROVIDER, resumed, cls._SESSION_NOT_FOUND, o.stderr_tail_bytes)
        return _turn_events(session.runner, child, context, translator, ending), session

    @classmethod
    def update_session(cls, session: SessionT, result_data: Mapping[str, Any]) -> SessionT:
        """After a successful turn: remember the result's session id and count the turn."""
        resume_id = result_data.get("session_id")
        if not is_arg(resume_id):
            resume_id = getattr(session, cls._RESUME_FIELD)
        changes = {cls._RESUME_FIELD: resume_id, "turns": session.turns + 1}
        return msgspec.structs.replace(session, **changes)

    @classmethod
    def checkpoint_session(cls, session: SessionT, session_id: str) -> SessionT:
        """Apply a session id acknowledged through `TurnContext.checkpoint` (§7.3)."""
        return msgspec.structs.replace(session, **{cls._RESUME_FIELD: session_id})

    @classmethod
    def reset_session(cls, session: SessionT) -> SessionT:
        """Start a new conversation on the next turn (forget the id to resume).

        Kills a child that is somehow still running. Mirrors `reset_session/1` (§2.15).
        """
        session.runner.cancel()
        return msgspec.structs.replace(session, **{cls._RESUME_FIELD: None, "turns": 0})

    @classmethod
    def cancel(cls, session: SessionT) -> None:
        """Kill the current turn's process tree now (any thread; idempotent; quick)."""
        session.runner.cancel()

    @classmethod
    def terminate_session(cls, session: SessionT) -> None:
        """Kill the running turn's child and return once every child of the session is
        reaped (the ones whose turn is over within their exit and term graces). Idempotent."""
        o = session.options
        if not session.runner.terminate((o.exit_grace_ms + o.term_grace_ms) / 1000 + 1.0):
            logger.warning("gen_agent {}: a child was not reaped in time", cls._PROVIDER)

    # -- what a subclass provides or extends ----------------------------------------------

    @classmethod
    def _new_session(cls, options: Any, cli: str) -> SessionT:
        """The session for validated `options` and the resolved executable `cli`."""
        raise NotImplementedError

    @classmethod
    def _translator(cls, session: SessionT) -> LineTranslator:
        """A fresh stream translator for one turn of `session`."""
        raise NotImplementedError

    @classmethod
    def _check_prompt(cls, prompt: str) -> None:
        """Raise `DispatchError` for a prompt the CLI cannot take (beyond what a command line
        cannot carry, which `prompt` checks itself); any prompt by default."""

    @classmethod
    def _prompt_in_argv(cls, session: SessionT) -> bool:
        """Whether this session passes the prompt as a command-line argument (True here)."""
        return True

    @classmethod
    def _argv_message(cls, session: SessionT, bad: tuple[int, str]) -> str:
        index, what = bad
        return (f"the prompt holds {what} at index {index}; {cls.__name__} passes the "
                "prompt as one command-line argument in this mode, which cannot carry it "
                f"({cls._ESCAPING_MODE} sends it escaped)")

    @classmethod
    def _child_env(cls, options: Any) -> dict[str, str]:
        """The complete environment of the child."""
        return {**os.environ, **options.env} if options.inherit_env else dict(options.env)

    @classmethod
    def _resolve_cli(cls, options: CLIOptions) -> str:
        search = options.env.get("PATH", os.environ.get("PATH") if options.inherit_env else None)
        path = shutil.which(options.cli_path, path=search)
        if path is None:
            raise BackendError.new(
                cls._PROVIDER,
                "cli_not_found",
                options.cli_path,
                message=f"executable {options.cli_path!r} not found; {cls._INSTALL_HINT}",
            )
        # Absolute, against the caller's working directory now: the CLI runs in `cwd`, where
        # a relative path (e.g. `.venv/npm/node_modules/.bin/claude`) would name nothing.
        return os.path.abspath(path)


class _Ending:
    """How a turn's terminal error is completed: its provider, the session it resumed and
    the stderr pattern of a resume of a session that does not exist."""

    __slots__ = ("provider", "resumed", "session_not_found", "tail_bytes")

    def __init__(self, provider: str, resumed: Any, session_not_found: re.Pattern[str] | None,
                 tail_bytes: int) -> None:
        self.provider = provider
        self.resumed = resumed if is_arg(resumed) else None
        self.session_not_found = session_not_found
        self.tail_bytes = tail_bytes


def _turn_events(
    runner: Runner,
    child: ChildProcess,
    context: TurnContext,
    translator: LineTranslator,
    ending: _Ending,
) -> Iterator[Event]:
    provider = ending.provider
    plain = OutputTail(ending.tail_bytes)  # what the CLI printed that was not JSON

    def unparsed(raw: bytes) -> None:
        logger.debug("gen_agent {}: a stdout line was not JSON ({} bytes)", provider, len(raw))
        plain.add(raw)

    text = TextAccumulator()
    try:
        for item in child.read_lines():
            if isinstance(item, LineTooLong):
                child.cancel()
                yield _diagnosed(translator.error(_line_too_long(provider, item)), child, text,
                                 plain)
                return
            events = translate_line(translator, item, on_unparsed=unparsed)
            session_id = translator.take_session_id()
            if session_id is not None:
                child.session_id = session_id
                context.checkpoint(session_id)  # a CheckpointError fails the turn (§7.3)
            for event in events:
                if event.kind == "text":
                    text.add(event.data)
                elif event.kind == "error":
                    reason = event.data.get("reason")
                    if isinstance(reason, BackendError) and reason.kind == "session_not_found":
                        # It exits right after saying so: its exit status and stderr belong
                        # on the error (a bounded wait).
                        child.wait_exit(_EXIT_WAIT_S)
                    event = _diagnosed(event, child, text, plain)
                yield event
                if event.is_terminal:
                    return
        yield _diagnosed(_ended_without_outcome(child, translator, context, ending), child, text,
                         plain)
    finally:
        runner.detach(child)
        child.release()


def _diagnosed(event: Event, child: ChildProcess, text: TextAccumulator,
               plain: OutputTail) -> Event:
    """`event` (a terminal error) with its reason's diagnostics filled: the text streamed so
    far, the session id, the exit status (once the child exited), the stderr tail and the
    stdout lines that were not JSON."""
    reason = event.data.get("reason")
    if not isinstance(reason, BackendError):
        return event
    session_id = event.data.get("session_id") if reason.kind != "session_not_found" else None
    reason = reason.with_diagnostics(
        partial_text=text.assembled(),
        session_id=session_id if is_arg(session_id) else None,
        exit_code=child.returncode,
        stderr_tail=child.stderr_tail().decode("utf-8", errors="replace"),
        stdout_tail=plain.value(),
    )
    return Event(event.kind, {**event.data, "reason": reason}, event.timestamp)


def _line_too_long(provider: str, item: LineTooLong) -> BackendError:
    message = (
        f"a {provider} stdout line of {item.size_bytes} bytes exceeds "
        f"max_line_bytes={item.limit_bytes}"
    )
    raw = {"size_bytes": item.size_bytes, "limit_bytes": item.limit_bytes}
    return BackendError.new(provider, "line_too_long", raw, message=message)


def _ended_without_outcome(
    child: ChildProcess, translator: LineTranslator, context: TurnContext, ending: _Ending
) -> Event:
    provider = ending.provider
    if child.cancelled or context.cancelled:
        reason = BackendError.new(provider, "cancelled", None, message="the turn was cancelled")
        return translator.error(reason)
    code = child.close()
    tail = child.stderr_tail().decode("utf-8", errors="replace")
    pattern = ending.session_not_found
    if code != 0 and ending.resumed is not None and pattern is not None and pattern.search(tail):
        message = f"{provider} has no session {ending.resumed!r} to resume"
        raw = {"exit_code": code, "stderr_tail": tail, "session_id": ending.resumed}
        reason = BackendError.new(provider, "session_not_found", raw, message=message)
        return translator.error(reason)
    event = translator.end_of_stream(code, tail)
    assert event is not None  # the stream loop returns as soon as a terminal is seen
    return event
