"""The `gen-agent` command through its real entry point: `python -m gen_agent` in a subprocess,
in a pseudo-terminal where the output differs for terminals, and `gen_agent.cli.main` (the
console script's function) for the list of every usage error.

Covers: one `error:` line for every usage error; model text without escape sequences on a
terminal and raw in `--json`; strict UTF-8 on stdin; prompts from stdin and files (`run -`,
`run @FILE`) beyond the 128 KiB argument limit; errors on stderr; readable store errors.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import json
import os
import re
import select
import sqlite3
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer

import gen_agent.cli
from gen_agent.cli._app import app
from gen_agent.testing._model_server import Reply, ScriptedModelServer

WAIT_S = 60.0
OSC52 = "\x1b]52;c;cm0gLXJmIH4=\x07"  # writes "rm -rf ~" to the operator's clipboard
TITLE = "\x1b]0;pwned\x1b\\"  # retitles the terminal window (ended by ST)
SGR = re.compile(r"\x1b\[[0-9;]*m")  # rich's own colours on a terminal
# Anything a terminal acts on: ESC, C1 controls, other C0 controls than tab, newline and CR.
ACTIVE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("GEN_AGENT_BACKEND", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "COLUMNS",
                        "NO_COLOR", "FORCE_COLOR", "GEN_AGENT_STORE")}
    return {**env, **extra}


def gen_agent_cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    """`python -m gen_agent ARGS` with `stdin`, its output as bytes."""
    return subprocess.run([sys.executable, "-m", "gen_agent", *args], input=stdin,
                          capture_output=True, timeout=WAIT_S, env=_env(), check=False)


class PtyRun:
    """The outcome of `in_pty`: exit code, what the terminal showed (CR LF made LF), stderr
    when it went to a pipe."""

    def __init__(self, code: int, shown: bytes, stderr: bytes) -> None:
        self.code, self.stderr = code, stderr.decode()
        self.shown = shown.replace(b"\r\n", b"\n").decode()

    @property
    def plain(self) -> str:
        """What was shown without rich's own colours."""
        return SGR.sub("", self.shown)


def in_pty(*args: str, columns: int = 80, stderr_too: bool = True) -> PtyRun:
    """`python -m gen_agent ARGS` with stdout (and stderr unless `stderr_too` is False) on a
    pseudo-terminal `columns` wide; stdin is empty."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    with subprocess.Popen([sys.executable, "-m", "gen_agent", *args], stdin=subprocess.DEVNULL,
                          stdout=slave, stderr=slave if stderr_too else subprocess.PIPE,
                          env=_env(TERM="xterm-256color")) as child:
        os.close(slave)
        shown = _read_until_closed(master)
        _, stderr = child.communicate(timeout=WAIT_S)
    return PtyRun(child.returncode, shown, stderr or b"")


def _read_until_closed(master: int) -> bytes:
    chunks: list[bytes] = []
    deadline = time.monotonic() + WAIT_S
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError as exc:  # EIO: every end of the terminal's other side is closed
                if exc.errno != errno.EIO:
                    raise
                break
            if not chunk:
                break
            chunks.append(chunk)
        else:
            pytest.fail(f"the command did not finish within {WAIT_S} s")
    finally:
        os.close(master)
    return b"".join(chunks)


# -- one `error:` line for every usage error ------------------------------------------------


def _commands(command: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
    subcommands = getattr(command, "commands", None)
    if subcommands is not None:
        yield path, command
        for name, sub in subcommands.items():
            yield from _commands(sub, [*path, name])
    else:
        yield path, command


def _number_bounds(param: Any) -> tuple[type | None, Any, Any]:
    """(int or float or None, min, max) of an option, in typer's own terms or click's."""
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    kind = annotation if annotation in (int, float) else None
    click_type = getattr(param, "type", None)  # a typer running on click itself
    if kind is None and click_type is not None:
        name = getattr(click_type, "name", "")
        kind = int if name.startswith("integer") else float if name.startswith("float") else None
    low = getattr(param, "min", None) or getattr(click_type, "min", None)
    high = getattr(param, "max", None) or getattr(click_type, "max", None)
    return kind, low, high


def bad_usages() -> list[list[str]]:
    """Every kind of usage error click can find, for every command, option and argument of
    the real command tree (so a new option is covered without editing this list)."""
    usages: list[list[str]] = []
    for path, command in _commands(typer.main.get_command(app), []):
        if getattr(command, "commands", None) is not None:
            usages.append([*path, "no-such-command"])
            continue
        usages.append([*path, "--no-such-option"])
        arguments = [p for p in command.params if p.param_type_name == "argument"]
        if any(p.required for p in arguments):
            usages.append(path)  # a missing argument
        if all(p.nargs != -1 for p in arguments):
            usages.append([*path, *(["x"] * len(arguments)), "extra", "arguments"])
        for option in (p for p in command.params if p.param_type_name == "option"):
            names = [*option.opts, *option.secondary_opts]
            if option.is_flag:
                usages += [[*path, f"{name}=yes"] for name in names if name.startswith("--")]
                continue
            usages += [[*path, name] for name in names]  # a missing value
            kind, low, high = _number_bounds(option)
            if kind is not None:
                usages.append([*path, names[0], "not-a-number"])
            if low is not None:
                usages.append([*path, names[0], str(low - 1)])
            if high is not None:
                usages.append([*path, names[0], str(high + 1)])
    # The commands' own bad input (checked once the arguments parsed).
    usages += [["run", "--backend", "gpt", "hi"], ["run", "hi"], ["chat"],
               ["pool", "--backend", "mock", "/no/such/file"],
               ["run", "--backend", "mock", "--cwd", "/no/such/dir", "hi"],
               ["run", "--backend", "mock", "@/no/such/file"], ["demo", "--backend", "mock"],
               ["observe", "--backend", "mock"], ["sessions", "list"],
               ["sessions", "show", "--db", "/no/such.db", "k"]]
    return usages


BAD_USAGES = bad_usages()


def test_the_list_covers_every_command_and_every_kind_of_error():
    commands = {" ".join(usage[:2]) if usage[:1] == ["sessions"] else usage[0]
                for usage in BAD_USAGES if usage}
    assert commands >= {"run", "chat", "pool", "demo", "observe", "version", "sessions list",
                        "sessions show", "sessions delete", "no-such-command"}
    assert len(BAD_USAGES) > 100
    assert ["pool", "--workers", "65"] in BAD_USAGES and ["run", "--json=yes"] in BAD_USAGES


@pytest.mark.parametrize("argv", BAD_USAGES, ids=" ".join)
def test_every_usage_error_is_one_error_line_with_exit_code_2(
        argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    for variable in ("GEN_AGENT_BACKEND", "GEN_AGENT_STORE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(sys, "argv", ["gen-agent", *argv])
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    with pytest.raises(SystemExit) as done:
        gen_agent.cli.main()
    out, err = capsys.readouterr()
    assert (done.value.code, out) == (2, "")
    assert err.startswith("error: ") and err.count("\n") == 1, err


@pytest.mark.parametrize(("argv", "line"), [
    (["run"], "error: missing argument 'prompts' (see 'python -m gen_agent run --help')"),
    (["pool", "--workers", "0", "f.txt"], "error: invalid value for '--workers' / '-w': "),
    (["frob"], "error: no such command 'frob' (see 'python -m gen_agent --help')"),
    (["sessions", "show"], "error: missing argument 'key' (see 'python -m gen_agent sessions "
                           "show --help')"),
    (["run", "--json=yes", "hi"], "error: option '--json' does not take a value"),
    (["run", "--backend", "nope", "hi"], "error: unknown backend 'nope'; choose one of: "),
])
def test_usage_errors_through_python_m_gen_agent(argv: list[str], line: str):
    done = gen_agent_cli(*argv)
    assert (done.returncode, done.stdout) == (2, b"")
    assert done.stderr.decode().startswith(line)
    assert done.stderr.count(b"\n") == 1


def test_a_usage_error_on_a_narrow_terminal_is_one_line_not_a_box():
    shown = in_pty("pool", "--workers", "99", "prompts.txt", columns=40)
    assert shown.code == 2
    # Coloured, but one line of text: no box, no usage block, no wrapping.
    assert shown.plain == ("error: invalid value for '--workers' / '-w': Input should be less "
                           "than or equal to 64 (see 'python -m gen_agent pool --help')\n")
    assert "\x1b[" in shown.shown  # a terminal gets the colour


def test_help_still_shows_the_help():
    done = gen_agent_cli("run", "--help")
    assert done.returncode == 0
    assert b"Usage:" in done.stdout and b"@FILE" in done.stdout


# -- model text on a terminal ------------------------------------------------------------------

HOSTILE_DELTAS = ["copy ", "\x1b]52;c;cm0g", "LXJmIH4=\x07", " and \x1b]0;pw", "ned\x1b\\",
                  "\x1b[2J\x1bPq#0\x1b\\\x9b1mdone\x07"]
HOSTILE_TEXT = "".join(HOSTILE_DELTAS)


def test_model_text_on_a_terminal_has_no_escape_sequences(
        scripted_model_server: ScriptedModelServer):
    # Streamed by the official SDK, with the sequences split between deltas.
    scripted_model_server.enqueue(Reply.text(HOSTILE_DELTAS, input_tokens=3, output_tokens=6))
    shown = in_pty("run", "--backend", "anthropic", "--base-url", scripted_model_server.url,
                   "--model", "claude-test", "Say it")
    assert shown.code == 0, shown.shown
    lines = shown.plain.splitlines()
    assert lines[:2] == ["> Say it", "copy  and done"]
    assert ACTIVE.search(shown.plain) is None
    assert "52;" not in shown.plain and "pwned" not in shown.plain


def test_a_prompt_and_its_echo_on_a_terminal_have_no_escape_sequences():
    shown = in_pty("run", "--backend", "mock", f"copy {OSC52}then {TITLE}title")
    assert shown.code == 0, shown.shown
    lines = shown.plain.splitlines()
    assert lines[:2] == ["> copy then title", "(mock) You said: copy then title"]
    assert ACTIVE.search(shown.plain) is None


def test_json_keeps_the_model_text_as_it_came(scripted_model_server: ScriptedModelServer):
    scripted_model_server.enqueue(Reply.text(HOSTILE_DELTAS))
    shown = in_pty("run", "--backend", "anthropic", "--base-url", scripted_model_server.url,
                   "--model", "claude-test", "--json", "Say it")
    assert shown.code == 0, shown.shown
    (record,) = [json.loads(line) for line in shown.plain.splitlines() if line.startswith("{")]
    assert record["text"] == HOSTILE_TEXT
    assert "\x1b" not in shown.shown  # JSON escapes it: \u001b


# -- errors on stderr --------------------------------------------------------------------------


def test_a_failed_turn_is_reported_on_stderr_with_the_answers_on_stdout(
        scripted_model_server: ScriptedModelServer):
    scripted_model_server.enqueue(Reply.text("first answer"),
                                  Reply.http_error(400, f"refused {OSC52}"))
    shown = in_pty("run", "--backend", "anthropic", "--base-url", scripted_model_server.url,
                   "--model", "claude-test", "one", "two", "three", stderr_too=False)
    assert shown.code == 1
    assert [line for line in shown.plain.splitlines() if not line.startswith("tokens")] == [
        "> one", "first answer", "> two"]
    assert shown.stderr == "turn failed: anthropic invalid_request (HTTP 400): refused \n"


# -- stdin and files: strict UTF-8, long prompts -----------------------------------------------

BINARY = b"fine line\n\xff\xfe\x00\x1b]0;x\x07bad\n"


@pytest.mark.parametrize("argv", [["pool", "--backend", "mock", "-"],
                                  ["run", "--backend", "mock", "-"]])
def test_binary_stdin_is_refused_like_a_binary_file(argv: list[str], tmp_path: Path):
    done = gen_agent_cli(*argv, stdin=BINARY)
    assert (done.returncode, done.stdout) == (2, b"")
    assert done.stderr == b"error: cannot read stdin: it is not UTF-8 text\n"
    binary = tmp_path / "prompts.txt"
    binary.write_bytes(BINARY)
    from_file = gen_agent_cli("pool", "--backend", "mock", str(binary))
    assert from_file.returncode == 2
    assert from_file.stderr.decode() == (f"error: cannot read prompt file '{binary}': it is not "
                                         "UTF-8 text\n")


def test_chat_refuses_input_that_is_not_utf8_and_sends_none_of_it():
    # Piped at once, the input is decoded as one piece (a terminal gives it line by line).
    done = gen_agent_cli("chat", "--backend", "mock", stdin=b"Hello\n" + BINARY)
    assert done.returncode == 2
    out = done.stdout.decode()
    assert out.startswith("gen-agent chat (mock backend).")
    assert "You said" not in out and "bad" not in out and "\x1b" not in out
    assert done.stderr == b"error: cannot read stdin: it is not UTF-8 text\n"


LONG = "word " * 40_000  # 200,000 bytes: over the 128 KiB limit of one argument


def test_run_takes_a_long_prompt_from_stdin():
    done = gen_agent_cli("run", "--backend", "mock", "--json", "-", "and a short one",
                         stdin=LONG.encode())
    assert done.returncode == 0, done.stderr
    first, second = (json.loads(line) for line in done.stdout.splitlines())
    assert first["prompt"] == LONG.strip()
    assert first["text"] == f"(mock) You said: {LONG.strip()}"
    assert second["prompt"] == "and a short one"


def test_run_takes_prompts_from_files_and_a_literal_at(tmp_path: Path):
    long_file = tmp_path / "long.txt"
    long_file.write_text(LONG + "\n")
    short = tmp_path / "short.txt"
    short.write_text("  from a file\n")
    done = gen_agent_cli("run", "--backend", "mock", "--json", f"@{long_file}", f"@{short}",
                         "@@alice hello")
    assert done.returncode == 0, done.stderr
    prompts = [json.loads(line)["prompt"] for line in done.stdout.splitlines()]
    assert prompts == [LONG.strip(), "from a file", "@alice hello"]


@pytest.mark.parametrize(("argv", "stdin", "message"), [
    (["-", "-"], b"x", "error: '-' (a prompt read from stdin) can be given once\n"),
    (["-"], b"  \n", "error: stdin has no prompt (it is empty)\n"),
    (["@/no/such/file"], b"", "error: cannot read prompt file '/no/such/file': No such file "
                              "or directory\n"),
])
def test_bad_prompt_sources_are_usage_errors(argv: list[str], stdin: bytes, message: str):
    done = gen_agent_cli("run", "--backend", "mock", *argv, stdin=stdin)
    assert (done.returncode, done.stdout, done.stderr.decode()) == (2, b"", message)


# -- readable store errors ---------------------------------------------------------------------


def test_sessions_on_a_file_that_is_no_store_say_what_it_is(tmp_path: Path):
    text = tmp_path / "notes.txt"
    text.write_text("not a database")
    empty = tmp_path / "empty.db"
    empty.touch()
    other = tmp_path / "other.db"
    with contextlib.closing(sqlite3.connect(other)) as conn:
        conn.execute("CREATE TABLE invoices (id)")
        conn.commit()
    expected = {
        text: f"'{text}' is not a session store: it is not a SQLite database file",
        empty: f"'{empty}' is an empty file, not a session store",
        other: f"'{other}' is a SQLite database of something else (tables ['invoices'])",
        tmp_path: f"no session store at '{tmp_path}' (it is a directory)",
    }
    for path, message in expected.items():
        done = gen_agent_cli("sessions", "list", "--db", str(path))
        assert (done.returncode, done.stdout) == (2, b""), path
        assert done.stderr.startswith(b"error: ") and message in done.stderr.decode()
        assert b"DatabaseError" not in done.stderr
    assert empty.stat().st_size == 0  # a look writes nothing
