"""The `gen-agent` command line (typer + rich). See `docs/cli.md`.

Commands:

- `gen-agent run --backend B PROMPT...`: one agent, the prompts as successive turns of one
  conversation, text and tool calls shown live, then each turn's summary (`--json`: one JSON
  object per turn).
- `gen-agent chat --backend B`: an interactive session with one long-lived agent; Ctrl-C
  interrupts the turn, not the program; `/status`, `/reset`, `/quit`.
- `gen-agent pool --backend B --workers N FILE`: one prompt per line through a supervised
  `Pool`, with a progress bar, then a results table (`--json`: JSON lines).
- `gen-agent demo`: the embedded demo (see `gen_agent.cli._demo`).
- `gen-agent observe`: the demo's agents, round after round, with the observer's web view
  (`gen_agent.observer`; extra `gen_agent[observer]`).
- `gen-agent sessions list|show|delete --db FILE`: the durable sessions of a `SQLiteStore`
  (see `gen_agent.cli._sessions`).

Exit codes: 0 all turns succeeded; 1 a turn failed; 2 bad input or set-up (unknown backend,
missing CLI / SDK / API key, unreadable file, and every usage error click finds: a missing
argument, an unknown option or command, a bad value); 130 Ctrl-C ended `run`. Errors are one
line on stderr, `error: ...`, never a traceback or a box. Text from the model, its tools and
the provider is shown without terminal escape sequences (`gen_agent.cli._terminal`); `--json`
keeps it as it came.
"""

from __future__ import annotations

import functools
import json
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

import gen_agent
from gen_agent._errors import AgentStartError, CallTimeout, GenAgentError, TurnError
from gen_agent._event import Event
from gen_agent._reasons import terminal_reason
from gen_agent._response import Response
from gen_agent._timers import MAX_DURATION_MS
from gen_agent.cli._inputs import (
    STDIN,
    expand_prompts,
    label,
    read_line,
    read_prompt_file,
    strict_stdin,
)
from gen_agent.cli._sessions import sessions_app
from gen_agent.cli._support import (
    BACKENDS,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    CliAgent,
    CliError,
    TurnResult,
    backend_setup,
    failure_record,
    response_record,
    run_turn,
    start_error_message,
)
from gen_agent.cli._terminal import TerminalText, strip_controls

try:  # a recent typer carries its own copy of click
    from typer._click import exceptions as click_errors
except ImportError:  # older typer runs on click itself
    from click import exceptions as click_errors  # type: ignore[no-redef]

__all__ = ["app", "main"]

_CONTEXT = {"help_option_names": ["-h", "--help"]}


class _OneLineErrors(TyperGroup):
    """The root command: a usage error click finds while parsing (a missing argument, an
    unknown option or command, a bad or out-of-range value) is one `error:` line on stderr
    and exit code 2, as the commands' own bad-input errors are, instead of a usage box."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,  # type: ignore[override]
             complete_var: str | None = None, standalone_mode: bool = True,
             **extra: Any) -> Any:
        # (typer's own `main` has a few more keywords, which **extra passes on.)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click_errors.NoArgsIsHelpError as exc:  # the help is printed already
            if not standalone_mode:
                raise
            sys.exit(exc.exit_code)
        except click_errors.ClickException as exc:
            if not standalone_mode:
                raise
            _print_error(_usage_message(exc))
            sys.exit(exc.exit_code)
        except typer.Abort:
            if not standalone_mode:
                raise
            _print_error("aborted")
            sys.exit(EXIT_FAILED)
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else EXIT_OK)


def _usage_message(exc: Any) -> str:
    """click's message on one line, with where to find help (`... (see 'gen-agent run --help')`)."""
    message = " ".join(exc.format_message().split()).rstrip(".")
    message = message[:1].lower() + message[1:]
    ctx = getattr(exc, "ctx", None)
    if ctx is None:
        return message
    return f"{message} (see '{ctx.command_path} --help')"


app = typer.Typer(cls=_OneLineErrors, add_completion=False, no_args_is_help=True,
                  pretty_exceptions_enable=False, context_settings=_CONTEXT,
                  help="Run long-lived LLM agents as supervised actors.")


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"gen-agent {gen_agent.__version__}")
        raise typer.Exit(EXIT_OK)


VersionOpt = Annotated[bool, typer.Option(
    "--version", callback=_show_version, is_eager=True, help="Print the version and exit.")]


@app.callback()
def _main(version: VersionOpt = False) -> None:
    """Run long-lived LLM agents as supervised actors."""

app.add_typer(sessions_app, name="sessions")  # gen-agent sessions list/show/delete

_F = TypeVar("_F", bound=Callable[..., Any])

BackendOpt = Annotated[str | None, typer.Option(
    "--backend", "-b", envvar="GEN_AGENT_BACKEND", show_default=False,
    help=f"The backend: {', '.join(BACKENDS)}.")]
ModelOpt = Annotated[str | None, typer.Option("--model", "-m", help="The model to ask for.")]
CwdOpt = Annotated[str | None, typer.Option(
    "--cwd", help="Working directory of the claude / codex CLI (its tools act there).")]
BaseUrlOpt = Annotated[str | None, typer.Option(
    "--base-url", help="API root of a compatible server, e.g. http://127.0.0.1:8080 "
                       "(anthropic, openai, claude); no API key is then required.")]
CliPathOpt = Annotated[str | None, typer.Option(
    "--cli-path", help="The claude / codex executable (default: looked up on PATH).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON lines instead of text.")]
TimeoutOpt = Annotated[float, typer.Option(
    "--timeout", min=1, help="Seconds one turn may take (the agent's watchdog); inf: no bound.")]


def _watchdog_ms(timeout: float) -> int | str:
    """`--timeout` seconds as the agent's `watchdog_ms` (`inf`: "infinity").

    Raises:
        CliError: beyond what the platform can wait (`threading.TIMEOUT_MAX`).
    """
    if math.isinf(timeout):
        return "infinity"
    if timeout * 1000 > MAX_DURATION_MS:
        raise CliError(f"--timeout must be at most {MAX_DURATION_MS // 1000} seconds, or inf "
                       f"for no bound; got {timeout:g}")
    return int(timeout * 1000)


def _out() -> Console:
    # Made per command so that output follows sys.stdout (as replaced by tests' runners).
    return Console(highlight=False)


def _err() -> Console:
    return Console(stderr=True, highlight=False)


def _guarded(command: _F) -> _F:
    """Turn every expected failure of a command into `error: ...` and an exit code."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except CliError as exc:
            _fail(exc.message, exc.exit_code)
        except AgentStartError as exc:
            _fail(start_error_message(exc), 2)
        except GenAgentError as exc:
            _fail(f"{type(exc).__name__}: {terminal_reason(exc.reason)}", EXIT_FAILED)

    return wrapper  # type: ignore[return-value]


def _print_error(message: str) -> None:
    # The message may quote a provider's or a model's text: no escape sequence gets through.
    _err().print(f"[bold red]error:[/] {escape(strip_controls(message))}", soft_wrap=True)


def _fail(message: str, code: int) -> None:
    _print_error(message)
    raise typer.Exit(code)


def _require_backend(backend: str | None) -> str:
    if backend is None:
        raise CliError(f"choose a backend with --backend ({', '.join(BACKENDS)})")
    name = backend.strip().lower()  # "Claude", "OPENAI" work too
    if name not in BACKENDS:
        raise CliError(f"unknown backend {backend!r}; choose one of: {', '.join(BACKENDS)}")
    return name


@contextmanager
def _agent(setup: Any, name: str, timeout: float) -> Iterator[Any]:
    """Start one `CliAgent` in its own `AgentSystem`; stop everything on exit."""
    with gen_agent.AgentSystem():
        ref = gen_agent.start_agent(CliAgent, name=name, backend=setup.backend,
                                    backend_opts=setup.backend_opts,
                                    watchdog_ms=_watchdog_ms(timeout))
        yield ref


def _emit_json(record: dict[str, Any]) -> None:
    typer.echo(json.dumps(record, ensure_ascii=False, default=repr))


# -- live turn output -------------------------------------------------------------------------


class _TurnPrinter:
    """Prints a turn's text deltas and tool calls as they arrive, without escape sequences
    (a sequence split between two deltas is removed whole: `TerminalText`)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.printed_text = False
        self._line_open = False
        self._text = TerminalText()

    def __call__(self, event: Event) -> None:
        if event.kind == "text":
            text = str(event.data.get("text") or "")
            if event.data.get("message_boundary") and self.printed_text:
                self._print_text(self._text.flush())  # a sequence never ends across messages
                text = "\n\n" + text
            self._print_text(self._text.feed(text))
        elif event.kind == "tool_use":
            self._close_line()
            data = event.data
            shown = json.dumps(data.get("input"), ensure_ascii=False, default=repr)
            self.console.print(f"[cyan]→ tool[/] {escape(_clip(str(data.get('name')), 120))} "
                               f"{escape(_clip(shown, 120))}", soft_wrap=True)
        elif event.kind == "tool_result":
            self._close_line()
            content = event.data.get("content")
            shown = content if isinstance(content, str) else json.dumps(content, default=repr)
            self.console.print(f"[cyan]← result[/] {escape(_clip(shown, 120))}", soft_wrap=True)

    def _print_text(self, text: str) -> None:
        self.console.print(text, end="", markup=False, soft_wrap=True)
        self.printed_text = self.printed_text or bool(text)
        self._line_open = bool(text) or self._line_open

    def _close_line(self) -> None:
        self._print_text(self._text.flush())
        if self._line_open:
            self.console.print()
            self._line_open = False

    def finish(self, response: Response | None) -> None:
        """End the turn's output; print the text if nothing was streamed."""
        if response is not None and not self.printed_text and response.text:
            self.console.print(strip_controls(response.text), markup=False, soft_wrap=True)
            self._line_open = False
        self._close_line()


def _clip(text: str, limit: int) -> str:
    """`text` on one line, at most `limit` characters, without escape sequences."""
    text = strip_controls(text).replace("\n", " ").replace("\t", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _summary_line(response: Response) -> str:
    usage = response.usage or {}
    parts = [f"tokens {usage.get('input_tokens', '?')} in / {usage.get('output_tokens', '?')} out"]
    if response.cost_usd is not None:
        parts.append(f"cost ${response.cost_usd:.4f}")
    parts.append(f"{response.duration_ms} ms")
    if response.session_id is not None:
        parts.append(f"session {response.session_id}")
    if response.stop_reason:
        parts.append(f"stop {response.stop_reason}")
    if isinstance(response.model, str):
        parts.append(f"model {response.model}")
    return strip_controls(" · ".join(parts))  # the ids and names come from the provider


def _show_turn(console: Console, prompt: str, agent: Any) -> TurnResult:
    printer = _TurnPrinter(console)
    result = run_turn(agent, prompt, on_event=printer)
    printer.finish(result.response)
    if result.response is not None:
        console.print(f"[dim]{escape(_summary_line(result.response))}[/]", soft_wrap=True)
    elif result.interrupted:
        console.print("[yellow]interrupted[/]")
    else:  # on stderr: stdout holds only the answers
        reason = strip_controls(terminal_reason(result.reason))
        _err().print(f"[red]turn failed:[/] {escape(reason)}", soft_wrap=True)
    return result


# -- run --------------------------------------------------------------------------------------


@app.command()
@_guarded
def run(
    prompts: Annotated[list[str], typer.Argument(
        help="Prompts, sent as successive turns: '-' reads one from stdin, '@FILE' one from "
             "a file, '@@text' is the prompt '@text'.")],
    backend: BackendOpt = None, model: ModelOpt = None, cwd: CwdOpt = None,
    base_url: BaseUrlOpt = None, cli_path: CliPathOpt = None, json_out: JsonOpt = False,
    timeout: TimeoutOpt = 600.0, version: VersionOpt = False,
) -> None:
    """Send PROMPTS as successive turns of one conversation with one agent."""
    name = _require_backend(backend)
    prompts = expand_prompts(prompts)
    setup = backend_setup(name, model=model, cwd=cwd, base_url=base_url,
                          cli_path=cli_path, mock_turns=len(prompts))
    console = _out()
    code = EXIT_OK
    with _agent(setup, "gen-agent-run", timeout) as agent:
        for prompt in prompts:
            if json_out:
                result = run_turn(agent, prompt)
                _emit_json(response_record(prompt, result.response) if result.response
                           else failure_record(prompt, result.reason))
            else:
                console.print(f"[bold]> {escape(_clip(prompt, 200))}[/]", soft_wrap=True)
                result = _show_turn(console, prompt, agent)
            if result.interrupted:
                raise typer.Exit(EXIT_INTERRUPTED)
            if not result.ok:
                code = EXIT_FAILED
                break
    raise typer.Exit(code)


# -- chat -------------------------------------------------------------------------------------

_CHAT_HELP = ("Type a prompt and press Enter. Ctrl-C interrupts a turn. Commands: /status, "
              "/reset (new conversation), /quit (or Ctrl-D), /help.")


@app.command()
@_guarded
def chat(
    backend: BackendOpt = None, model: ModelOpt = None, cwd: CwdOpt = None,
    base_url: BaseUrlOpt = None, cli_path: CliPathOpt = None, timeout: TimeoutOpt = 600.0,
    version: VersionOpt = False,
) -> None:
    """Talk with one long-lived agent (Ctrl-C interrupts a turn; /status, /reset, /quit)."""
    name = _require_backend(backend)
    setup = backend_setup(name, model=model, cwd=cwd, base_url=base_url, cli_path=cli_path,
                          mock_turns=10_000)
    console = _out()
    strict_stdin()
    with _agent(setup, "gen-agent-chat", timeout) as agent:
        console.print(f"[bold]gen-agent chat[/] ({name} backend). {_CHAT_HELP}", soft_wrap=True)
        session: list[Any] = [None]
        while True:
            try:
                line = read_line(console, "[bold green]you>[/] ")
            except EOFError:
                console.print()
                break
            except KeyboardInterrupt:
                console.print("\n[dim](no turn is running: /quit or Ctrl-D leaves)[/]")
                continue
            if not line:
                continue
            if line.startswith("/"):
                if not _chat_command(console, agent, line, name, session):
                    break
                continue
            result = _show_turn(console, line, agent)
            if result.response is not None:
                session[0] = result.response.session_id
    raise typer.Exit(EXIT_OK)


def _chat_command(console: Console, agent: Any, line: str, backend: str,
                  session: list[Any]) -> bool:
    """Run a /command; False means leave the chat."""
    command = line.split()[0].lower()
    if command in ("/quit", "/exit"):
        return False
    if command == "/status":
        status = agent.status(timeout=10)
        turns = (status.agent_state or {}).get("turns", 0)
        plural = "" if turns == 1 else "s"
        console.print(strip_controls(f"agent {status.name} · {status.state} · {turns} "
                                     f"turn{plural} · session {session[0] or '-'} · backend "
                                     f"{backend}"), markup=False, soft_wrap=True)
    elif command == "/reset":
        try:
            agent.reset_session(timeout=10)
        except GenAgentError as exc:
            _err().print(f"[red]reset refused:[/] {escape(terminal_reason(exc.reason))}")
        else:
            old = session[0] or "-"
            raw = gen_agent.backend_session(agent.name, timeout=10)
            new = getattr(raw, "session_id", None)
            session[0] = new
            shown = new or "a new one, its id assigned by the next turn"
            console.print(strip_controls(f"conversation reset: session {old} ended; new "
                                         f"session: {shown}"), markup=False, soft_wrap=True)
    elif command == "/help":
        console.print(_CHAT_HELP, soft_wrap=True)
    else:
        console.print(f"unknown command {strip_controls(command)}; {_CHAT_HELP}", markup=False,
                      soft_wrap=True)
    return True


# -- pool -------------------------------------------------------------------------------------


def _read_prompts(file: str) -> list[str]:
    text = read_prompt_file(file)
    prompts = [line.strip() for line in text.splitlines() if line.strip()]
    if not prompts:
        raise CliError(f"{label(file)} has no prompts (one prompt per line)")
    return prompts


@app.command()
@_guarded
def pool(
    file: Annotated[str, typer.Argument(
        help=f"A text file with one prompt per line ('{STDIN}': stdin).")],
    backend: BackendOpt = None,
    workers: Annotated[int, typer.Option("--workers", "-w", min=1, max=64,
                                         help="Pool size.")] = 4,
    model: ModelOpt = None, cwd: CwdOpt = None, base_url: BaseUrlOpt = None,
    cli_path: CliPathOpt = None, json_out: JsonOpt = False, timeout: TimeoutOpt = 600.0,
    version: VersionOpt = False,
) -> None:
    """Run every line of FILE as a prompt through a supervised pool of WORKERS agents."""
    name = _require_backend(backend)
    prompts = _read_prompts(file)
    setup = backend_setup(name, model=model, cwd=cwd, base_url=base_url, cli_path=cli_path,
                          streaming=False, mock_turns=len(prompts))
    with gen_agent.AgentSystem():
        workers_pool = gen_agent.Pool(CliAgent, size=workers, backend=setup.backend,
                                      name_prefix="gen-agent-pool",
                                      backend_opts=setup.backend_opts,
                                      watchdog_ms=_watchdog_ms(timeout))
        try:
            outcomes, interrupted = _pool_outcomes(workers_pool, prompts)
        finally:
            workers_pool.stop(30)
    finished = [(index, prompts[index], outcomes[index]) for index in sorted(outcomes)]
    failed = sum(1 for _, _, outcome in finished if outcome[0] != "ok")
    if json_out:
        for index, prompt, (kind, value) in finished:
            record = response_record(prompt, value) if kind == "ok" else failure_record(
                prompt, value)
            _emit_json({"index": index + 1, **record})
    elif finished:
        _out().print(_pool_table(finished))
    if interrupted:
        left = len(prompts) - len(finished)
        _err().print(f"[yellow]interrupted: {len(finished)} of {len(prompts)} prompts finished "
                     f"({len(finished) - failed} ok, {failed} failed); {left} not finished[/]",
                     soft_wrap=True)
        raise typer.Exit(EXIT_INTERRUPTED)
    if not json_out:
        summary = f"{len(prompts) - failed} of {len(prompts)} prompts succeeded"
        _err().print(summary if not failed else f"[red]{summary}; {failed} failed[/]")
    raise typer.Exit(EXIT_FAILED if failed else EXIT_OK)


def _pool_outcomes(workers_pool: gen_agent.Pool,
                   prompts: list[str]) -> tuple[dict[int, tuple[str, Any]], bool]:
    """Submit every prompt, show a progress bar (stderr); return the outcomes by input index
    and whether Ctrl-C ended the wait early (then only the finished ones are there)."""
    refs = [workers_pool.submit(prompt) for prompt in prompts]
    outcomes: dict[int, tuple[str, Any]] = {}
    columns = (TextColumn("prompts"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    try:
        _collect_outcomes(workers_pool, refs, outcomes, columns)
    except KeyboardInterrupt:
        for index, ref in enumerate(refs):  # everything finished by now counts as done
            if index not in outcomes:
                try:
                    outcomes[index] = ("ok", workers_pool.result(ref, 0))
                except CallTimeout:
                    continue
                except TurnError as exc:
                    outcomes[index] = ("error", exc.reason)
        return outcomes, True
    return outcomes, False


def _collect_outcomes(workers_pool: gen_agent.Pool, refs: list[Any],
                      outcomes: dict[int, tuple[str, Any]], columns: Any) -> None:
    # auto_refresh=False: no refresh thread, which a Ctrl-C landing inside Progress.__enter__
    # would leave running; this loop refreshes at least every 0.1 s itself.
    with Progress(*columns, console=_err(), auto_refresh=False) as progress:
        bar = progress.add_task("prompts", total=len(refs))
        while len(outcomes) < len(refs):
            progress.refresh()
            waited = False
            for index, ref in enumerate(refs):
                if index in outcomes:
                    continue
                try:
                    # Block briefly on the first unfinished task only; sweep the others.
                    outcomes[index] = ("ok", workers_pool.result(ref, 0 if waited else 0.1))
                except CallTimeout:
                    waited = True
                    continue
                except TurnError as exc:
                    outcomes[index] = ("error", exc.reason)
                progress.advance(bar)


def _pool_table(finished: list[tuple[int, str, tuple[str, Any]]]) -> Table:
    table = Table(title="gen-agent pool: results", header_style="bold")
    for column, justify in (("#", "right"), ("prompt", "left"), ("result", "left"),
                            ("in tok", "right"), ("out tok", "right"), ("ms", "right")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for position, prompt, (kind, value) in finished:
        index = position + 1
        if kind == "ok":
            usage = value.usage or {}
            table.add_row(str(index), Text(_clip(prompt, 50)), Text(_clip(value.text, 70)),
                          str(usage.get("input_tokens", "-")),
                          str(usage.get("output_tokens", "-")), str(value.duration_ms))
        else:
            error = Text(f"error: {_clip(terminal_reason(value), 70)}", style="red")
            table.add_row(str(index), Text(_clip(prompt, 50)), error, "-", "-", "-")
    return table


# -- demo -------------------------------------------------------------------------------------


@app.command()
@_guarded
def demo(
    backend: Annotated[str, typer.Option(
        "--backend", "-b", help="The real client: anthropic (the official SDK) or claude "
                                "(the Claude Code CLI).")] = "anthropic",
    fast: Annotated[bool, typer.Option("--fast", help="No artificial model delays.")] = False,
    cli_path: CliPathOpt = None, json_out: JsonOpt = False,
    timeout: Annotated[float, typer.Option("--timeout", min=1,
                                           help="Seconds the demo may take.")] = 180.0,
    version: VersionOpt = False,
) -> None:
    """Supervised agents on a real client against a scripted model on 127.0.0.1."""
    from gen_agent.cli._demo import DEMO_BACKENDS, DemoOptions, run_demo
    from gen_agent.cli._demo_view import live_view, report_json, summary_notes, summary_table

    if backend not in DEMO_BACKENDS:
        raise CliError(f"the demo runs on {' or '.join(DEMO_BACKENDS)}, not {backend!r}")
    options = DemoOptions(backend=backend, fast=fast, cli_path=cli_path, timeout=timeout)
    console = _out()
    if json_out:
        report = run_demo(options)
        for record in report_json(report):
            _emit_json(record)
    else:
        console.print(f"[bold]gen-agent demo[/]: 3 supervised workers on the {backend} "
                      "client, a scripted model on 127.0.0.1")
        with Live(console=console, refresh_per_second=10, transient=True) as live:
            report = run_demo(options, on_progress=lambda p: live.update(live_view(p)))
        console.print(summary_table(report))
        for note in summary_notes(report):
            console.print(f"• {note}", markup=False)
    problems = report.problems()
    if problems:
        _fail("the demo did not go as scripted: " + "; ".join(problems), EXIT_FAILED)
    raise typer.Exit(EXIT_OK)


# -- observe ----------------------------------------------------------------------------------


@app.command()
@_guarded
def observe(
    backend: Annotated[str, typer.Option(
        "--backend", "-b", help="The demo's client: anthropic or claude.")] = "anthropic",
    host: Annotated[str, typer.Option(
        "--host", help="Address to listen on (loopback unless --allow-remote).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535,
                                      help="Port to listen on (0: any free one).")] = 8765,
    allow_remote: Annotated[bool, typer.Option(
        "--allow-remote", help="Allow a non-loopback --host; every request then needs the "
                               "token.")] = False,
    token: Annotated[str | None, typer.Option(
        "--token", envvar="GEN_AGENT_OBSERVER_TOKEN", show_default=False,
        help="The observer's token (>= 16 characters; default: a random one).")] = None,
    show_text: Annotated[bool, typer.Option(
        "--show-text", help="Also show each turn's prompt on the page.")] = False,
    rounds: Annotated[int, typer.Option(
        "--rounds", min=0, help="Demo runs before exiting (0: until Ctrl-C).")] = 0,
    pause: Annotated[float, typer.Option(
        "--pause", min=0, help="Seconds between two demo runs.")] = 5.0,
    fast: Annotated[bool, typer.Option("--fast", help="No artificial model delays.")] = False,
    cli_path: CliPathOpt = None,
    timeout: Annotated[float, typer.Option("--timeout", min=1,
                                           help="Seconds one demo run may take.")] = 180.0,
    version: VersionOpt = False,
) -> None:
    """Run the demo's agents, round after round, with the observer's live web view."""
    import time

    from gen_agent.cli._demo import DEMO_BACKENDS, DemoOptions, run_demo

    if backend not in DEMO_BACKENDS:
        raise CliError(f"the demo runs on {' or '.join(DEMO_BACKENDS)}, not {backend!r}")
    try:
        from gen_agent.observer import serve
    except ImportError as exc:
        raise CliError(f"{exc}; install it with: pip install 'gen-agent[observer]'") from None
    options = DemoOptions(backend=backend, fast=fast, cli_path=cli_path, timeout=timeout)
    console = _out()
    with gen_agent.AgentSystem() as system:
        try:
            watcher = serve(host, port, system, allow_remote=allow_remote, token=token,
                            show_text=show_text)
        except ValueError as exc:
            raise CliError(str(exc)) from None
        except ImportError as exc:  # the observer extra (Starlette, uvicorn) is missing
            raise CliError(str(exc)) from None
        except OSError as exc:
            raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        with watcher:
            console.print(f"[bold]gen-agent observe[/]: open {watcher.url}", soft_wrap=True)
            console.print("Ctrl-C stops.")
            done = 0
            try:
                while rounds == 0 or done < rounds:
                    report = run_demo(options, system=system)
                    done += 1
                    problems = report.problems()
                    console.print(f"round {done}: {len(report.outcomes)} tasks, "
                                  + ("as scripted" if not problems else "; ".join(problems)),
                                  markup=False)
                    if rounds == 0 or done < rounds:
                        time.sleep(pause)
            except KeyboardInterrupt:
                console.print("stopped")
    raise typer.Exit(EXIT_OK)


# -- serve ------------------------------------------------------------------------------------


@app.command()
@_guarded
def serve(
    target: Annotated[str, typer.Argument(
        help="module:attr naming the hosts (an AgentHost, a list or a dict of them) or an "
             "app from gen_agent.server.create_app.")],
    host: Annotated[str, typer.Option(
        "--host", help="Address to listen on; beyond loopback needs auth "
                       "(GEN_AGENT_SERVER_TOKENS or GEN_AGENT_SERVER_TOKEN_FILE).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535,
                                      help="Port to listen on.")] = 8000,
    head_timeout: Annotated[float, typer.Option(
        "--head-timeout", min=0.1, help="Seconds a connection may take to send a request "
                                        "head.")] = 10.0,
    protocol: Annotated[list[str] | None, typer.Option(
        "--protocol", help="A protocol to serve, repeatable: responses (/v1/responses), a2a "
                           "(/a2a/<host>), agui (/agui/<host>), chat (the page at /), vercel "
                           "(/vercel-ai/<host>). Default: responses.")] = None,
    version: VersionOpt = False,
) -> None:
    """Serve agent hosts over HTTP: the OpenAI Responses API at /v1/responses (and, with
    --protocol, A2A, AG-UI, the chat page, the Vercel AI stream)."""
    import sys

    try:
        from gen_agent.server._run import PROTOCOLS, check_bind, load, run
    except ImportError as exc:
        raise CliError(f"{exc}; install it with: pip install 'gen-agent[server]'") from None
    if "" not in sys.path:
        sys.path.insert(0, "")  # module:attr is looked up from the working directory
    try:
        served = load(target, protocol)
        check_bind(served, host)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in ("a2a", "ag_ui"):
            raise CliError(f"{exc}; install it with: pip install 'gen-agent[server]'") from None
        raise CliError(str(exc)) from None
    except (ValueError, ImportError, AttributeError) as exc:
        raise CliError(str(exc)) from None
    where = ", ".join(f"{name} at http://{host}:{port}{PROTOCOLS[name]}"
                      for name in dict.fromkeys(protocol or ["responses"]))
    _err().print(f"gen-agent serve: {where} "
                 f"(hosts: {', '.join(sorted(served.state.gen_agent_server.hosts))}); "
                 "Ctrl-C drains and stops.", markup=False, soft_wrap=True)
    try:
        run(served, host, port, head_timeout_s=head_timeout)
    except OSError as exc:
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    raise typer.Exit(EXIT_OK)


@app.command()
def version() -> None:
    """Print the gen_agent version."""
    typer.echo(gen_agent.__version__)


def main() -> None:
    """Entry point of the `gen-agent` console script."""
    app()
