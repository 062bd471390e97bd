"""What the `gen-agent` commands share: backend set-up, error messages, one turn, records.

Kept apart from `gen_agent.cli` (the typer app and its rendering) so the logic is testable
without a terminal:

- `backend_setup` turns a backend name and the command-line options into a backend and its
  options, refusing bad input with a `CliError` that says what to do (install a CLI or an SDK,
  set an API key, fix a path);
- `start_error_message` explains an `AgentStartError` in one line;
- `run_turn` runs one prompt on an agent, relays its events as they arrive and turns Ctrl-C
  into an interrupt of that turn;
- `response_record` / `failure_record` are the JSON objects of `--json`.
"""

from __future__ import annotations

import importlib
import os
import queue
import re
import shutil
import time
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

import msgspec

from gen_agent._agent import GenAgent, NoReply
from gen_agent._errors import AgentStartError
from gen_agent._event import Event
from gen_agent._reasons import terminal_reason
from gen_agent._response import Response
from gen_agent.backend import BackendError

__all__ = [
    "BACKENDS",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "BackendSetup",
    "CliAgent",
    "CliError",
    "TurnResult",
    "backend_setup",
    "failure_record",
    "mock_scripts",
    "reason_json",
    "require_cli",
    "require_sdk",
    "response_record",
    "run_turn",
    "start_error_message",
]

BACKENDS: Final = ("claude", "codex", "anthropic", "openai", "mock")
"""The backend names the commands accept."""

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
"""A prompt failed (its turn ended in an error)."""
EXIT_USAGE: Final = 2
"""Bad input: unknown backend, missing CLI/SDK/API key, unreadable file (click's own code)."""
EXIT_INTERRUPTED: Final = 130
"""Ctrl-C ended `gen-agent run` (128 + SIGINT, the shell convention)."""

ANTHROPIC_MODEL: Final = "claude-sonnet-4-6"
"""The model the CLI asks the Anthropic API for when `--model` is not given."""

LOCAL_API_KEY: Final = "gen-agent-local-key"
"""The placeholder key sent to a `--base-url` server when no real key is set."""

# After Ctrl-C the interrupted turn reports back at once; this bounds the wait if it never
# reached the agent (the Ctrl-C landed while the prompt was being handed over).
_INTERRUPT_GRACE_S: Final = 10.0
_POLL_S: Final = 0.1

_SDK_EXTRAS: Final = {"anthropic": "anthropic", "openai": "openai"}
_KEY_VARS: Final = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
_CLI_INSTALL: Final = {
    "claude": "npm install -g @anthropic-ai/claude-code",
    "codex": "npm install -g @openai/codex",
}


class CliError(Exception):
    """Bad input or set-up, reported as `error: <message>` with `exit_code` (no traceback).

    Args:
        message: what went wrong and what to do about it (one or two sentences).
        exit_code: the process exit code (default `EXIT_USAGE`, 2).
    """

    def __init__(self, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


class BackendSetup(msgspec.Struct, frozen=True, kw_only=True):
    """A backend chosen on the command line, ready for `start_agent` / `Pool`.

    Fields:
        name: the backend name (one of `BACKENDS`).
        backend: the backend class.
        backend_opts: the options `init_agent` returns for it (a dict).
    """

    name: str
    backend: Any
    backend_opts: dict[str, Any]


def backend_setup(name: str, *, model: str | None = None, cwd: str | None = None,
                  base_url: str | None = None, cli_path: str | None = None,
                  streaming: bool = True, mock_turns: int = 1_000) -> BackendSetup:
    """Resolve a backend name and the command-line options into a `BackendSetup`.

    Args:
        name: `"claude"`, `"codex"`, `"anthropic"`, `"openai"` or `"mock"`.
        model: the model to ask for; None = the backend's (the CLI's) default.
        cwd: the working directory of a CLI backend (must be a directory); ignored by the
            others.
        base_url: the API root of an Anthropic- or OpenAI-compatible server (e.g. a local
            one); with it a missing API key is replaced by a placeholder. For `claude` it
            becomes `ANTHROPIC_BASE_URL`; `codex` does not support it.
        cli_path: the `claude` / `codex` executable (default: looked up on PATH).
        streaming: ask the Claude CLI for text deltas as they are generated.
        mock_turns: how many turns the mock backend can answer.

    Returns:
        The `BackendSetup`.

    Raises:
        CliError: an unknown backend, a missing CLI or SDK (naming what to install), no
            API key for a real provider, a `--cwd` that is not a directory, or `--base-url`
            with `codex`.
    """
    name = name.strip().lower()
    if name not in BACKENDS:
        raise CliError(f"unknown backend {name!r}; choose one of: {', '.join(BACKENDS)}")
    if base_url is not None:
        base_url = normalize_base_url(name, base_url)
    if cwd is not None and not Path(cwd).is_dir():
        raise CliError(f"--cwd {cwd!r} is not a directory")
    if name == "mock":
        from gen_agent.backends.mock import MockBackend

        opts = {"scripts": mock_scripts(mock_turns), "session_id": "mock-session"}
        return BackendSetup(name=name, backend=MockBackend, backend_opts=opts)
    if name in _CLI_INSTALL:
        return _cli_setup(name, model=model, cwd=cwd, base_url=base_url, cli_path=cli_path,
                          streaming=streaming)
    return _api_setup(name, model=model, base_url=base_url)


def _cli_setup(name: str, *, model: str | None, cwd: str | None, base_url: str | None,
               cli_path: str | None, streaming: bool) -> BackendSetup:
    opts: dict[str, Any] = {"cli_path": require_cli(name, cli_path)}
    if cwd is not None:
        opts["cwd"] = cwd
    if model is not None:
        opts["model"] = model
    if name == "claude":
        from gen_agent.backends.claude import ClaudeCLI

        opts["include_partial_messages"] = streaming
        if base_url is not None:
            env = {"ANTHROPIC_BASE_URL": base_url}
            if not os.environ.get("ANTHROPIC_API_KEY"):
                env["ANTHROPIC_API_KEY"] = LOCAL_API_KEY
            opts["env"] = env
        return BackendSetup(name=name, backend=ClaudeCLI, backend_opts=opts)
    from gen_agent.backends.codex import CodexCLI

    if base_url is not None:
        raise CliError("--base-url is not supported with the codex backend: configure a model "
                       "provider in the Codex config.toml instead")
    return BackendSetup(name=name, backend=CodexCLI, backend_opts=opts)


def require_cli(name: str, cli_path: str | None) -> str:
    """Return the absolute path of the `claude` / `codex` CLI to run (`cli_path` or the name,
    looked up on PATH).

    Raises:
        CliError: it is not found; the message says how to install it.
    """
    executable = cli_path or name
    if cli_path is not None and os.path.exists(cli_path):
        if os.path.isdir(cli_path):
            raise CliError(f"--cli-path {cli_path!r} is a directory, not the {_cli_title(name)} "
                           f"executable (e.g. {os.path.join(cli_path, name)!r}?)")
        if not os.access(cli_path, os.X_OK):
            raise CliError(f"--cli-path {cli_path!r} exists but is not executable "
                           f"(chmod +x {cli_path}, or point it at the {name} executable)")
    found = shutil.which(executable)
    if found is None:
        where = f"{executable!r} was not found" + ("" if cli_path else " on PATH")
        local = os.path.join(".venv", "npm", "node_modules", ".bin", name)
        hint = (f" (this checkout has one: --cli-path {local})"
                if not cli_path and os.access(local, os.X_OK) else "")
        raise CliError(
            f"the {name} backend needs the {_cli_title(name)} CLI, and {where}. Install it "
            f"with `{_CLI_INSTALL[name]}` (needs node and npm), or pass --cli-path to its "
            f"executable{hint}.")
    # Absolute: the CLI may run in another working directory (--cwd).
    return os.path.abspath(found)


def normalize_base_url(name: str, base_url: str) -> str:
    """`--base-url` as the backend's client expects it: a bare host (`127.0.0.1:8080`) gets
    `http://`; for `openai`, a root without a path gets the API's `/v1` (the SDK appends
    `/responses` to it).

    Raises:
        CliError: not an http(s) URL.
    """
    url = base_url.strip()
    if "://" not in url:
        url = "http://" + url
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise CliError(f"--base-url {base_url!r} is not an http(s) URL, e.g. "
                       "http://127.0.0.1:8080")
    if name == "openai" and parts.path in ("", "/"):
        url = urllib.parse.urlunsplit((parts.scheme, parts.netloc, "/v1", "", ""))
    return url.rstrip("/")


def require_sdk(name: str) -> None:
    """Check that the official SDK of the `anthropic` / `openai` backend is installed.

    Raises:
        CliError: it is not; the message names the pip extra to install.
    """
    try:
        importlib.import_module(name)
    except ImportError:
        raise CliError(
            f"the {name} backend needs the `{name}` Python package (the official SDK): "
            f"pip install 'gen-agent[{_SDK_EXTRAS[name]}]'") from None


def _cli_title(name: str) -> str:
    return "Claude Code" if name == "claude" else "Codex"


def _api_setup(name: str, *, model: str | None, base_url: str | None) -> BackendSetup:
    require_sdk(name)
    key_var = _KEY_VARS[name]
    api_key = os.environ.get(key_var)
    if not api_key:
        if base_url is None:
            raise CliError(f"no API key for the {name} backend: set {key_var} (or pass "
                           "--base-url to use a compatible server that needs no key)")
        api_key = LOCAL_API_KEY
    opts: dict[str, Any] = {"api_key": api_key}
    if base_url is not None:
        opts["base_url"] = base_url
    if name == "anthropic":
        from gen_agent.backends.anthropic import AnthropicAPI

        opts["model"] = model or ANTHROPIC_MODEL
        return BackendSetup(name=name, backend=AnthropicAPI, backend_opts=opts)
    from gen_agent.backends.openai import OpenAIResponses

    if model is not None:
        opts["model"] = model
    return BackendSetup(name=name, backend=OpenAIResponses, backend_opts=opts)


# -- the mock backend's canned replies ------------------------------------------------------


def _mock_reply(prompt: str) -> list[Event]:
    text = f"(mock) You said: {prompt}"
    words = re.findall(r"\S+\s*", text)
    usage = {"input_tokens": len(prompt.split()), "output_tokens": len(words)}
    result = {"text": text, "session_id": "mock-session", "model": "mock",
              "stop_reason": "end_turn", "provider": "mock"}
    return [*(Event.new("text", {"text": word}) for word in words),
            Event.new("usage", usage), Event.new("result", result)]


def mock_scripts(turns: int) -> list[Callable[[str], list[Event]]]:
    """`turns` MockBackend scripts, each answering the canned reply `"(mock) You said: ..."`.

    The reply streams word by word, reports usage (input tokens = words of the prompt, output
    tokens = words of the reply), model `"mock"` and session `"mock-session"`.
    """
    return [_mock_reply] * turns


# -- messages ---------------------------------------------------------------------------------


def reason_json(reason: Any) -> Any:
    """A failure reason as JSON-able data (`BackendError` → a dict of its fields but `raw`)."""
    if isinstance(reason, BackendError):
        return {"provider": reason.provider, "kind": reason.kind, "status": reason.status,
                "retryable": reason.retryable, "retry_after": reason.retry_after,
                "message": reason.message}
    if isinstance(reason, str | int | float | bool) or reason is None:
        return reason
    if isinstance(reason, tuple | list):
        return [reason_json(part) for part in reason]
    if isinstance(reason, BaseException):
        return type(reason).__name__
    if isinstance(reason, msgspec.Struct):
        return msgspec.to_builtins(reason)
    return repr(reason)


def start_error_message(exc: AgentStartError) -> str:
    """Explain why an agent (or a pool worker) could not start, in one line.

    Unwraps `("failed_to_start_child", id, r)` and `("backend_start_failed", r)`; a
    `BackendError` gives its own message (e.g. what to install), an option error names it.
    """
    reason = exc.reason
    while isinstance(reason, tuple) and reason and reason[0] in (
            "failed_to_start_child", "backend_start_failed"):
        reason = reason[-1]
    if isinstance(reason, BackendError) and reason.message:
        return reason.message
    if isinstance(reason, tuple) and len(reason) >= 2 and reason[0] in (
            "unknown_option", "invalid_option"):
        return f"the backend refused its options ({reason[0].replace('_', ' ')} {reason[1]!r})"
    return f"the agent could not start: {terminal_reason(reason)}"


# -- the agent the commands run ----------------------------------------------------------------


class CliAgent(GenAgent):
    """The agent of `gen-agent run/chat/pool`: passes `backend_opts` through, counts turns.

    Start options: `backend_opts` (dict, required). State: `{"turns": int}`.
    """

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        """Return `(opts["backend_opts"], {"turns": 0})`. Mirrors `init_agent/1`."""
        return dict(opts["backend_opts"]), {"turns": 0}

    def handle_response(self, ref: Any, response: Any, state: Any) -> NoReply:
        """Count the turn and go idle. Mirrors `handle_response/3`."""
        return NoReply({**state, "turns": state["turns"] + 1})


# -- one turn ----------------------------------------------------------------------------------


class TurnResult(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of `run_turn`.

    Fields:
        prompt: the prompt sent.
        response: the `Response`, or None when the turn failed.
        reason: the failure reason, or None.
        interrupted: whether Ctrl-C interrupted the turn.
    """

    prompt: str
    response: Response | None = None
    reason: Any = None
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        """True when the turn produced a `Response`."""
        return self.response is not None


def run_turn(agent: Any, prompt: str, *, on_event: Callable[[Event], Any] | None = None,
             timeout: float | None = None) -> TurnResult:
    """Run `prompt` as one turn of `agent` and wait for it; Ctrl-C interrupts the turn only.

    Args:
        agent: the `AgentRef`.
        prompt: the prompt.
        on_event: called in the calling thread with every `Event` of the turn as it arrives
            (None: no relay).
        timeout: seconds to wait before interrupting the turn; None = no bound (the agent's
            watchdog still applies).

    Returns:
        A `TurnResult`. A KeyboardInterrupt while waiting interrupts the turn (the agent
        lives on) and returns `interrupted=True` with the turn's own outcome, usually the
        reason `"interrupted"`.

    Raises:
        TurnError, AgentDown, AgentNotFound: the prompt was refused or the agent is gone.
    """
    inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
    waiter = _TurnWaiter(agent, timeout)
    sent = False
    while True:
        try:
            if not sent:
                sent = True
                agent.tell_with_completion(prompt, inbox,
                                           stream_to=inbox if on_event is not None else None)
            try:
                message = inbox.get(timeout=_POLL_S)
            except queue.Empty:
                if waiter.expired():
                    return TurnResult(prompt=prompt, reason="interrupted", interrupted=True)
                continue
            if message[1] == "event":
                if on_event is not None and not waiter.interrupted:
                    on_event(message[4])
                continue
        except KeyboardInterrupt:
            waiter.interrupt()
            continue
        kind, value = message[4]
        if kind == "ok":
            return TurnResult(prompt=prompt, response=value, interrupted=waiter.interrupted)
        return TurnResult(prompt=prompt, reason=value, interrupted=waiter.interrupted)


class _TurnWaiter:
    """The deadline of one `run_turn`: at `timeout`, or on Ctrl-C, the turn is interrupted
    once; then its outcome is awaited for a grace period."""

    def __init__(self, agent: Any, timeout: float | None) -> None:
        self._agent = agent
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self.interrupted = False

    def interrupt(self) -> None:
        if self.interrupted:
            return  # a second Ctrl-C: the interrupt is already on its way
        self.interrupted = True
        self._deadline = time.monotonic() + _INTERRUPT_GRACE_S
        self._agent.interrupt()

    def expired(self) -> bool:
        """True when the grace after an interrupt is over (give up waiting)."""
        if self._deadline is None or time.monotonic() <= self._deadline:
            return False
        if self.interrupted:
            return True
        self.interrupt()
        return False


# -- JSON records -----------------------------------------------------------------------------


def _tool_call(event: Event) -> dict[str, Any]:
    data: Mapping[str, Any] = event.data
    return {"name": data.get("name"), "input": reason_json(_jsonable(data.get("input")))}


def _jsonable(value: Any) -> Any:
    try:
        return msgspec.to_builtins(value)
    except (TypeError, msgspec.EncodeError):
        return repr(value)


def response_record(prompt: str, response: Response) -> dict[str, Any]:
    """The JSON object of one successful turn.

    Keys: `prompt`, `ok` (True), `text`, `usage` (token counts), `cost_usd` (US dollars or
    None), `duration_ms`, `session_id`, `model`, `stop_reason`, `tool_calls` (`[{name,
    input}]`).
    """
    session = response.session_id
    return {
        "prompt": prompt,
        "ok": True,
        "text": response.text,
        "usage": _jsonable(response.usage),
        "cost_usd": response.cost_usd,
        "duration_ms": response.duration_ms,
        "session_id": session if session is None or isinstance(session, str) else str(session),
        "model": response.model if isinstance(response.model, str) else None,
        "stop_reason": response.stop_reason,
        "tool_calls": [_tool_call(event) for event in response.tool_calls],
    }


def failure_record(prompt: str, reason: Any) -> dict[str, Any]:
    """The JSON object of one failed turn: `prompt`, `ok` (False), `error` (one line),
    `reason` (data, see `reason_json`)."""
    return {"prompt": prompt, "ok": False, "error": terminal_reason(reason),
            "reason": reason_json(reason)}
