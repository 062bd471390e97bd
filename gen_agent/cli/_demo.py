"""`gen-agent demo`: a supervised pool of agents on a real client, against a scripted model.

`run_demo` starts `ScriptedModelServer` on 127.0.0.1 with the built-in script
(`gen_agent.cli._demo_script`), then a `Pool` of three `DemoAgent` workers on a real client: the
official Anthropic SDK (`AnthropicAPI`, the default) or the Claude Code CLI (`ClaudeCLI`, which
runs its tools on real files in a temporary workspace). It submits the eight tasks, waits for
them while reporting progress, and returns a `DemoReport` with one `TurnRow` per turn.

What the demo agent does beyond answering:

- retry policy (docs/pages/contract.md#s4-8, caller-owned): `handle_error` returns `Prompt(same
  prompt)` for a retryable `BackendError` (HTTP 529 "Overloaded" here), at most `MAX_RETRIES` times,
  so the pool's caller never sees the overload;
- tools: with the Anthropic API the model asks for `word_count`; the agent runs it on the
  workspace and sends the result back as a follow-up turn (the Claude CLI runs its own tools);
- a deliberate crash: `handle_response` raises on the task marked `CRASH_MARK`, the agent
  stops, and the pool's supervisor restarts it (`resume_session=True`: a backend with
  `resume_session`, like `ClaudeCLI`, continues the conversation; `AnthropicAPI` has none, so
  the restarted worker starts a new session, and the report says so).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import msgspec

from gen_agent._agent import GenAgent, NoReply, Proceed, Prompt
from gen_agent._context import current_name
from gen_agent._errors import CallTimeout, TurnError
from gen_agent._event import Event
from gen_agent._pool import Pool
from gen_agent._reasons import terminal_reason
from gen_agent._system import AgentSystem
from gen_agent.backend import BackendError
from gen_agent.cli._demo_script import (
    CRASH_MARK,
    TASKS,
    TOOL_RESULT_PREFIX,
    WORD_COUNT_TOOL,
    WORKERS,
    DemoModel,
    count_words,
    write_workspace,
)
from gen_agent.cli._support import CliError, require_cli, require_sdk
from gen_agent.testing._model_server import ScriptedModelServer

__all__ = [
    "DEMO_BACKENDS",
    "MAX_RETRIES",
    "DemoAgent",
    "DemoCrash",
    "DemoOptions",
    "DemoProgress",
    "DemoReport",
    "Recorder",
    "TurnRow",
    "run_demo",
]

DEMO_BACKENDS: Final = ("anthropic", "claude")
"""The clients the demo can run on."""

MAX_RETRIES: Final = 2
"""Retries the demo agent's policy allows per request (count)."""

MODEL: Final = "claude-sonnet-4-6"
_API_KEY: Final = "sk-ant-demo-loopback"
_SCRIPT_ITEMS: Final = 200  # far more model requests than the demo makes
_TICK_S: Final = 0.1


class DemoCrash(RuntimeError):
    """Raised on purpose by `DemoAgent.handle_response` to show a supervised restart."""


class TurnRow(msgspec.Struct, frozen=True, kw_only=True):
    """One turn of the demo, as the summary table shows it.

    Fields:
        task: the task number (1-based).
        step: 0 for the task's own turn, 1 for the follow-up that returns a tool result.
        label: what the turn is.
        worker: the worker's name.
        outcome: `"ok"`, `"crashed"` (on purpose) or `"error: ..."`.
        latency_ms: from the first dispatch to the outcome, retries included (milliseconds).
        input_tokens, output_tokens: the turn's usage (tokens).
        tools: the names of the tools called during the turn.
        retries: caller-owned retries before the outcome (count).
        restarts: how often the worker had been restarted when the turn ran (count).
        session_id: the provider session the turn ran in, or None.
        text: the answer's text.
    """

    task: int
    step: int
    label: str
    worker: str
    outcome: str
    latency_ms: int
    input_tokens: int
    output_tokens: int
    tools: tuple[str, ...]
    retries: int
    restarts: int
    session_id: str | None
    text: str


class WorkerView(msgspec.Struct, frozen=True, kw_only=True):
    """A worker as the live view shows it: name, restarts so far, what it does now (`label`,
    e.g. "task 3", and `activity`, e.g. the tail of the text being streamed)."""

    name: str
    restarts: int
    label: str
    activity: str


class DemoProgress(msgspec.Struct, frozen=True, kw_only=True):
    """A progress report: tasks done of `total`, the workers, the turns recorded so far."""

    done: int
    total: int
    workers: tuple[WorkerView, ...]
    rows: tuple[TurnRow, ...]


class Recorder:
    """Where the demo agents report their turns and activity. Thread-safe (agent threads and
    turn threads write, the demo's thread reads)."""

    _DETAIL_CHARS: Final = 56

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: list[TurnRow] = []
        self._starts: dict[str, int] = {}
        self._activity: dict[str, tuple[str, str]] = {}

    def started(self, worker: str) -> int:
        """Count an incarnation of `worker`; return its restarts so far (0 for the first)."""
        with self._lock:
            self._starts[worker] = self._starts.get(worker, 0) + 1
            restarts = self._starts[worker] - 1
            self._activity[worker] = ("restarted" if restarts else "started", "")
            return restarts

    def activity(self, worker: str, label: str, detail: str = "") -> None:
        """Set what `worker` is doing now: a `label` (e.g. "task 3") and a detail."""
        with self._lock:
            self._activity[worker] = (label, detail[-self._DETAIL_CHARS:])

    def stream(self, worker: str, text: str) -> None:
        """Append streamed text to `worker`'s detail (only the tail is kept)."""
        with self._lock:
            label, detail = self._activity.get(worker, ("", ""))
            self._activity[worker] = (label, (detail + text)[-self._DETAIL_CHARS:])

    def record(self, row: TurnRow) -> None:
        """Add one finished turn."""
        with self._lock:
            self._rows.append(row)

    def rows(self) -> tuple[TurnRow, ...]:
        """The turns recorded so far, ordered by task and step."""
        with self._lock:
            return tuple(sorted(self._rows, key=lambda r: (r.task, r.step)))

    def workers(self) -> tuple[WorkerView, ...]:
        """The workers seen so far, by name."""
        with self._lock:
            views = []
            for name, count in sorted(self._starts.items()):
                label, detail = self._activity.get(name, ("", ""))
                views.append(WorkerView(name=name, restarts=count - 1, label=label,
                                        activity=detail.replace("\n", " ").strip()))
            return tuple(views)


def _task_of(prompt: str) -> tuple[int, str]:
    for task in TASKS:
        if task.prompt == prompt:
            return task.number, task.label
    return 0, "other"


class DemoAgent(GenAgent):
    """The demo's worker: records every turn, retries overloads, runs `word_count`, and
    crashes on purpose on the task marked `CRASH_MARK`.

    Start options: `backend_opts` (dict), `recorder` (`Recorder`), `workspace` (a directory
    path, where `word_count` may read).
    """

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        """Register this incarnation with the recorder (agent thread, at every (re)start).

        Returns `(opts["backend_opts"], state)`; the state tracks the current turn: task,
        label, step, start time (`time.monotonic()`), retries. Mirrors `init_agent/1`.
        """
        self._recorder: Recorder = opts["recorder"]
        self._workspace = Path(opts["workspace"])
        self._name = str(current_name())
        restarts = self._recorder.started(self._name)
        state = {"restarts": restarts, "prompt": None, "task": 0, "label": "", "step": 0,
                 "started": 0.0, "retries": 0, "retrying": False, "streaming": False}
        return dict(opts["backend_opts"]), state

    def pre_turn(self, prompt: str, state: Any) -> Proceed:
        """Note which task a turn belongs to and when it started; a retry keeps both (agent
        thread, before every dispatch). Always proceeds with the prompt unchanged."""
        if state["retrying"]:
            return Proceed(prompt, {**state, "retrying": False})
        if prompt.startswith(TOOL_RESULT_PREFIX):
            task, label, step = state["task"], "↳ result", state["step"] + 1
        else:
            (task, label), step = _task_of(prompt), 0
        self._recorder.activity(self._name, f"task {task}", "waiting for the model")
        return Proceed(prompt, {**state, "prompt": prompt, "task": task, "label": label,
                                "step": step, "started": time.monotonic(), "retries": 0})

    def handle_stream_event(self, event: Event, state: Any) -> Any:
        """Show the turn's progress live: streamed text, tool calls and results (turn task
        thread, every event). Returns the state with `streaming` set while text flows."""
        label = f"task {state['task']}"
        if event.kind == "text":
            if not state["streaming"]:
                self._recorder.activity(self._name, label)
            self._recorder.stream(self._name, str(event.data.get("text") or ""))
            return {**state, "streaming": True}
        if event.kind == "tool_use":
            self._recorder.activity(self._name, label, f"→ tool {event.data.get('name')}")
        elif event.kind == "tool_result":
            self._recorder.activity(self._name, label, "← tool result")
        else:
            return state
        return {**state, "streaming": False}

    def handle_response(self, ref: Any, response: Any, state: Any) -> NoReply | Prompt:
        """Agent thread, after a successful turn. Records a crash row and raises `DemoCrash`
        on the marked task (the agent stops with `("callback_failed", "error", "DemoCrash")`
        and its supervisor restarts it); returns `Prompt(tool result)` after a `word_count`
        call (a follow-up turn); else `NoReply`."""
        state = {**state, "streaming": False}
        if CRASH_MARK in (response.prompt or ""):
            self._record(state, response, "crashed")
            self._recorder.activity(self._name, "crashed", "on purpose: its supervisor restarts it")
            raise DemoCrash("the demo crashes this worker on purpose")
        calls = [e for e in response.tool_calls if e.data.get("name") == "word_count"]
        if calls:
            self._recorder.activity(self._name, f"task {state['task']}", "running word_count")
            return Prompt(self._run_word_count(calls[0]), state)
        self._recorder.activity(self._name, "idle", f"task {state['task']} done")
        return NoReply(state)

    def handle_error(self, ref: Any, reason: Any, state: Any) -> NoReply | Prompt:
        """The retry policy (agent thread): a retryable `BackendError` is retried with the same
        prompt, at most `MAX_RETRIES` times per request: `Prompt(prompt)` is a caller-owned
        retry under the same ref (§4.8). Anything else: `NoReply` (the error is delivered)."""
        state = {**state, "streaming": False}
        if (isinstance(reason, BackendError) and reason.retryable
                and state["retries"] < MAX_RETRIES and state["prompt"] is not None):
            status = f"HTTP {reason.status}" if reason.status else reason.kind
            self._recorder.activity(self._name, f"task {state['task']}", f"{status}, retrying")
            return Prompt(state["prompt"], {**state, "retries": state["retries"] + 1,
                                            "retrying": True})
        return NoReply(state)

    def post_turn(self, outcome: tuple[str, Any], ref: Any, state: Any) -> Any:
        """Record the turn once it has its final outcome, not the attempts that are retried
        (agent thread, after the decision callback). Returns the state unchanged."""
        kind, value = outcome
        if kind == "ok":
            self._record(state, value, "ok")
        elif not state["retrying"]:
            self._record_failure(state, value)
        return state

    # -- helpers -----------------------------------------------------------------------------

    def _latency_ms(self, state: Any) -> int:
        return int((time.monotonic() - state["started"]) * 1000)

    def _record(self, state: Any, response: Any, outcome: str) -> None:
        usage = response.usage or {}
        session = response.session_id
        self._recorder.record(TurnRow(
            task=state["task"], step=state["step"], label=state["label"], worker=self._name,
            outcome=outcome, latency_ms=self._latency_ms(state),
            input_tokens=int(usage.get("input_tokens") or 0),
            output_tokens=int(usage.get("output_tokens") or 0),
            tools=tuple(str(e.data.get("name")) for e in response.tool_calls),
            retries=state["retries"], restarts=state["restarts"],
            session_id=session if isinstance(session, str) else None, text=response.text))

    def _record_failure(self, state: Any, reason: Any) -> None:
        self._recorder.record(TurnRow(
            task=state["task"], step=state["step"], label=state["label"], worker=self._name,
            outcome=f"error: {terminal_reason(reason)}", latency_ms=self._latency_ms(state),
            input_tokens=0, output_tokens=0, tools=(), retries=state["retries"],
            restarts=state["restarts"], session_id=None, text=""))

    def _run_word_count(self, call: Event) -> str:
        tool_input = call.data.get("input")
        name = tool_input.get("path") if isinstance(tool_input, dict) else None
        path = (self._workspace / str(name)).resolve()
        if path.parent != self._workspace.resolve() or not path.is_file():
            output = f"error: no file {name!r} in the workspace"
        else:
            output = str(count_words(path.read_text(encoding="utf-8")))
        return f"{TOOL_RESULT_PREFIX} of {call.data.get('id')} (word_count {name}): {output}"


# -- the run ---------------------------------------------------------------------------------


class DemoOptions(msgspec.Struct, frozen=True, kw_only=True):
    """How to run the demo.

    Fields:
        backend: `"anthropic"` (the official SDK, default) or `"claude"` (the Claude Code
            CLI).
        fast: no artificial delays in the scripted model (tests).
        cli_path: the `claude` executable (default: `claude` on PATH).
        timeout: seconds the whole run may take before it is abandoned.
    """

    backend: str = "anthropic"
    fast: bool = False
    cli_path: str | None = None
    timeout: float = 180.0


class DemoReport(msgspec.Struct, frozen=True, kw_only=True):
    """What a demo run produced.

    Fields:
        backend: the client used.
        rows: one `TurnRow` per turn, by task and step.
        outcomes: per task number, `"ok"` or the failure described in one line.
        restarts: per worker name, how often its supervisor restarted it (count).
        resume_supported: whether the backend implements `resume_session`.
        resumed: whether the crashed worker continued its session after the restart.
        words: the real word count of the workspace's notes.md.
        workspace: the (temporary, now removed) workspace directory.
        unmatched_requests: model requests the script had no answer for (count).
        elapsed_ms: the run's duration (milliseconds).
    """

    backend: str
    rows: tuple[TurnRow, ...]
    outcomes: dict[int, str]
    restarts: dict[str, int]
    resume_supported: bool
    resumed: bool
    words: int
    workspace: str
    unmatched_requests: int
    elapsed_ms: int

    def problems(self) -> list[str]:
        """What did not go as the script says (empty when the demo worked)."""
        found = []
        for task in TASKS:
            expected = "worker down" if task.crash else "ok"
            got = self.outcomes.get(task.number, "missing")
            if not got.startswith(expected):
                found.append(f"task {task.number} ({task.label}): {got}")
        crashed = f"demo-{next(t.worker for t in TASKS if t.crash)}"
        expected_restarts = {f"demo-{i}": int(f"demo-{i}" == crashed) for i in range(WORKERS)}
        if self.restarts != expected_restarts:
            found.append(f"restarts {self.restarts}, expected {expected_restarts}")
        if self.resume_supported and not self.resumed:
            found.append("the restarted worker did not resume its session")
        if self.unmatched_requests:
            found.append(f"{self.unmatched_requests} model requests had no scripted answer")
        return found


def run_demo(options: DemoOptions,
             on_progress: Callable[[DemoProgress], Any] | None = None,
             system: AgentSystem | None = None) -> DemoReport:
    """Run the demo scenario once and return its report.

    Args:
        options: the `DemoOptions`.
        on_progress: called in the calling thread about every 0.1 s with a `DemoProgress`.
        system: the `AgentSystem` to run the agents in (e.g. one an observer watches);
            default: a fresh one, shut down at the end.

    Returns:
        The `DemoReport` (check `problems()`).

    Raises:
        CliError: the chosen client is not available (CLI or SDK missing, naming what to
            install), or the run did not finish within `options.timeout`.
    """
    if options.backend not in DEMO_BACKENDS:
        raise CliError(f"the demo runs on {' or '.join(DEMO_BACKENDS)}, "
                       f"not {options.backend!r}")
    if options.backend == "claude":
        cli = require_cli("claude", options.cli_path)
    else:
        require_sdk("anthropic")
        cli = None
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gen-agent-demo-") as tmp:
        workspace, home = Path(tmp) / "workspace", Path(tmp) / "home"
        workspace.mkdir()
        home.mkdir()
        notes = write_workspace(workspace)
        model = DemoModel(tool="Bash" if cli else "word_count", fast=options.fast)
        agents = AgentSystem() if system is None else contextlib.nullcontext(system)
        with ScriptedModelServer([model] * _SCRIPT_ITEMS) as server, agents as used:
            backend, backend_opts = _client(options, cli, server.url, workspace, home)
            report = _run_pool(options, backend, backend_opts, workspace, on_progress, used)
        words = count_words(notes.read_text(encoding="utf-8"))
    return msgspec.structs.replace(
        report, words=words, unmatched_requests=model.unmatched,
        elapsed_ms=int((time.monotonic() - started) * 1000))


def _client(options: DemoOptions, cli: str | None, url: str, workspace: Path,
            home: Path) -> tuple[Any, dict[str, Any]]:
    if cli is None:
        from gen_agent.backends.anthropic import AnthropicAPI

        return AnthropicAPI, {"api_key": _API_KEY, "base_url": url, "model": MODEL,
                              "tools": [WORD_COUNT_TOOL], "timeout": 30.0}
    from gen_agent.backends.claude import ClaudeCLI

    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),  # the CLI's settings and sessions stay in the temporary dir
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": _API_KEY,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",  # the agent's retry policy owns retries
    }
    return ClaudeCLI, {"cli_path": cli, "cwd": str(workspace), "env": env,
                       "inherit_env": False, "model": MODEL, "allowed_tools": ["Bash"],
                       "include_partial_messages": True}


def _run_pool(options: DemoOptions, backend: Any, backend_opts: dict[str, Any],
              workspace: Path, on_progress: Callable[[DemoProgress], Any] | None,
              system: AgentSystem) -> DemoReport:
    recorder = Recorder()
    deadline = time.monotonic() + options.timeout
    pool = Pool(DemoAgent, size=WORKERS, backend=backend, name_prefix="demo", system=system,
                routing="round_robin", shared_conversation=True,
                resume_session=getattr(backend, "resume_session", None) is not None,
                max_restarts=3, max_seconds=60,
                backend_opts=backend_opts, recorder=recorder, workspace=str(workspace),
                watchdog_ms=int(options.timeout * 1000))
    try:
        refs = {pool.submit(task.prompt): task.number for task in TASKS}
        outcomes = _collect(pool, refs, recorder, deadline, on_progress)
        pool.wait_idle(max(0.1, deadline - time.monotonic()))
        restarts = {str(c.id): c.restarts for c in pool.supervisor.which_children()}
    except CallTimeout:
        raise CliError(f"the demo did not finish within {options.timeout:g} s",
                       exit_code=1) from None
    finally:
        pool.stop(30)
    if on_progress is not None:
        on_progress(DemoProgress(done=len(TASKS), total=len(TASKS),
                                 workers=recorder.workers(), rows=recorder.rows()))
    rows = recorder.rows()
    return DemoReport(backend=options.backend, rows=rows, outcomes=outcomes, restarts=restarts,
                      resume_supported=hasattr(backend, "resume_session"),
                      resumed=_resumed(rows), words=0, workspace=str(workspace),
                      unmatched_requests=0, elapsed_ms=0)


def _collect(pool: Pool, refs: dict[Any, int], recorder: Recorder, deadline: float,
             on_progress: Callable[[DemoProgress], Any] | None) -> dict[int, str]:
    """Wait for every task's outcome, reporting progress meanwhile."""
    outcomes: dict[int, str] = {}
    pending = dict(refs)
    while pending:
        if time.monotonic() > deadline:
            raise CallTimeout(None)
        for position, (ref, number) in enumerate(list(pending.items())):
            try:
                pool.result(ref, _TICK_S if position == 0 else 0)
                outcomes[number] = "ok"
            except CallTimeout:
                continue
            except TurnError as exc:
                outcomes[number] = terminal_reason(exc.reason)
            del pending[ref]
        if on_progress is not None:
            on_progress(DemoProgress(done=len(outcomes), total=len(refs),
                                     workers=recorder.workers(), rows=recorder.rows()))
    return outcomes


def _resumed(rows: tuple[TurnRow, ...]) -> bool:
    """Whether the crashed worker's turn after its restart ran in its earlier session."""
    crash = next(t for t in TASKS if t.crash)
    worker = f"demo-{crash.worker}"
    before = [r.session_id for r in rows if r.worker == worker and r.restarts == 0]
    after = [r.session_id for r in rows if r.worker == worker and r.restarts > 0]
    return bool(before and after and before[-1] is not None and after[0] == before[-1])
