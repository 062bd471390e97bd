"""The `gen-agent` command line: run, chat, pool and the bad-input paths (exit code + message).

Commands run in-process through typer's CliRunner (stdin fed as text). Real clients talk to a
ScriptedModelServer on 127.0.0.1 only; the mock backend needs nothing.
"""

from __future__ import annotations

import _thread
import json
import os
import re
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import gen_agent
import gen_agent.cli._support as cli_support
from gen_agent.backends import mock
from gen_agent.cli._app import app
from gen_agent.testing._model_server import RecordedRequest, Reply, ScriptedModelServer

WAIT_S = 30.0
runner = CliRunner()


def invoke(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> Any:
    return runner.invoke(app, list(args), input=input, env={"COLUMNS": "200", **(env or {})})


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


@pytest.fixture
def server():
    with ScriptedModelServer() as running:
        yield running


@pytest.fixture
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEN_AGENT_BACKEND"):
        monkeypatch.delenv(var, raising=False)


def fake_executable(directory: Path, name: str) -> Path:
    path = directory / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


# -- run ---------------------------------------------------------------------------------------


def test_run_on_the_mock_backend_works_offline_with_a_canned_reply():
    result = invoke("run", "--backend", "mock", "Hello there", "And again")

    assert result.exit_code == 0, result.output
    # The duration is measured: the only figure that varies.
    lines = [re.sub(r"· \d+ ms ·", "· N ms ·", line) for line in result.stdout.splitlines()]
    assert lines == [
        "> Hello there",
        "(mock) You said: Hello there",
        "tokens 2 in / 5 out · N ms · session mock-session · stop end_turn · model mock",
        "> And again",
        "(mock) You said: And again",
        "tokens 2 in / 5 out · N ms · session mock-session · stop end_turn · model mock",
    ]


def test_run_json_prints_one_object_per_turn():
    result = invoke("run", "--backend", "mock", "--json", "One", "Two words")

    assert result.exit_code == 0, result.output
    first, second = json_lines(result.stdout)
    assert isinstance(first.pop("duration_ms"), int)
    assert first == {
        "prompt": "One", "ok": True, "text": "(mock) You said: One",
        "usage": {"input_tokens": 1, "output_tokens": 4}, "cost_usd": None,
        "session_id": "mock-session", "model": "mock", "stop_reason": "end_turn",
        "tool_calls": [],
    }
    assert (second["prompt"], second["text"]) == ("Two words", "(mock) You said: Two words")


def test_run_reads_the_backend_from_the_environment():
    result = invoke("run", "--json", "Hi", env={"GEN_AGENT_BACKEND": "mock"})
    assert result.exit_code == 0, result.output
    assert json_lines(result.stdout)[0]["text"] == "(mock) You said: Hi"


def test_run_on_the_anthropic_sdk_streams_text_and_tool_calls(server: ScriptedModelServer,
                                                              no_keys: None):
    server.enqueue(
        Reply.tool_use("read_file", {"path": "a.txt"}, id="toolu_1", text="Let me look.",
                       input_tokens=30, output_tokens=9),
        Reply.text("The second answer.", input_tokens=44, output_tokens=4),
    )
    result = invoke("run", "--backend", "anthropic", "--base-url", server.url,
                    "--model", "claude-test", "Look at a.txt", "Then answer")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[:3] == ["> Look at a.txt", "Let me look.", '→ tool read_file {"path": "a.txt"}']
    assert lines[3].startswith("tokens 30 in / 9 out · ")
    assert "stop tool_use · model claude-test" in lines[3]
    assert lines[4:6] == ["> Then answer", "The second answer."]
    assert lines[6].startswith("tokens 44 in / 4 out · ")
    # No key in the environment: a --base-url server gets the placeholder key.
    requests = server.model_requests()
    for request in requests:
        credential = request.headers.get("x-api-key") or request.headers.get("authorization")
        assert credential.endswith(cli_support.LOCAL_API_KEY)
    assert requests[1].body["messages"][-1] == {"role": "user", "content": "Then answer"}


def test_run_stops_at_a_failed_turn_with_exit_code_1(server: ScriptedModelServer, no_keys: None):
    server.enqueue(Reply.http_error(400, "prompt is too long"))
    result = invoke("run", "--backend", "anthropic", "--base-url", server.url, "--model",
                    "claude-test", "First", "Never sent")

    assert result.exit_code == 1
    # The answers on stdout, the failure on stderr.
    assert result.stdout == "> First\n"
    assert result.stderr == ("turn failed: anthropic invalid_request (HTTP 400): prompt is too "
                             "long\n")
    assert len(server.model_requests()) == 1


def test_run_json_reports_a_failed_turn(server: ScriptedModelServer, no_keys: None):
    server.enqueue(Reply.http_error(529, "Overloaded"))
    result = invoke("run", "--backend", "anthropic", "--base-url", server.url, "--model",
                    "claude-test", "--json", "Hi")

    assert result.exit_code == 1
    (record,) = json_lines(result.stdout)
    assert record["ok"] is False
    assert record["error"] == "anthropic server_error (HTTP 529): Overloaded"
    assert record["reason"]["kind"] == "server_error"
    assert record["reason"]["retryable"] is True


def blocking_first_turn(monkeypatch: pytest.MonkeyPatch) -> mock.Gate:
    """Make the mock backend's first turn block in a gate (released only by a cancel)."""
    gate = mock.gate(mock.text_turn("too late"), timeout=WAIT_S * 2)
    canned = cli_support.mock_scripts
    monkeypatch.setattr(cli_support, "mock_scripts", lambda turns: [gate, *canned(turns)])
    return gate


@pytest.fixture(autouse=True)
def _sigint_raises_keyboard_interrupt() -> Any:
    """The Ctrl-C tests press Ctrl-C with `_thread.interrupt_main()`, which does nothing while
    SIGINT is ignored (as it is for a non-interactive shell's background job, e.g. a CI
    runner): let Python handle SIGINT, as in a terminal, for the duration of each test."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def press_ctrl_c_when_blocked(gate: mock.Gate) -> threading.Thread:
    """Once the turn waits in the gate, raise KeyboardInterrupt in the main thread."""

    def press() -> None:
        gate.wait_blocked(WAIT_S)
        _thread.interrupt_main()

    presser = threading.Thread(target=press, name="ctrl-c")
    presser.start()
    return presser


def test_ctrl_c_during_run_interrupts_the_turn_and_exits_130(monkeypatch: pytest.MonkeyPatch):
    gate = blocking_first_turn(monkeypatch)
    presser = press_ctrl_c_when_blocked(gate)
    result = invoke("run", "--backend", "mock", "Slow prompt", "Next prompt")
    presser.join(WAIT_S)

    assert result.exit_code == 130
    assert result.stdout.splitlines() == ["> Slow prompt", "interrupted"]
    assert gate.cancelled


def test_ctrl_c_during_pool_writes_the_finished_results_and_exits_130(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    gate = mock.gate(mock.text_turn("too late"), timeout=WAIT_S * 2)
    canned = cli_support.mock_scripts
    monkeypatch.setattr(cli_support, "mock_scripts",
                        lambda turns: [canned(1)[0], gate, *canned(turns)])
    file = tmp_path / "prompts.txt"
    file.write_text("first\nsecond\nthird\n")
    presser = press_ctrl_c_when_blocked(gate)
    result = invoke("pool", "--backend", "mock", "--workers", "1", "--json", str(file))
    presser.join(WAIT_S)

    assert result.exit_code == 130, result.output
    records = json_lines(result.stdout)
    assert [(r["index"], r["prompt"]) for r in records] == [(1, "first")]
    assert ("interrupted: 1 of 3 prompts finished (1 ok, 0 failed); 2 not finished"
            in " ".join(result.stderr.split()))
    assert gate.cancelled


# -- chat --------------------------------------------------------------------------------------


def test_chat_turns_and_commands():
    script = "Hello\n/status\n/reset\n/status\n\n/help\n/bogus\nBye now\n/quit\nnot read\n"
    result = invoke("chat", "--backend", "mock", input=script)

    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "(mock) You said: Hello" in out
    assert "agent gen-agent-chat · idle · 1 turn · session mock-session · backend mock" in out
    assert ("conversation reset: session mock-session ended; new session: a new one, its id "
            "assigned by the next turn") in out
    assert "agent gen-agent-chat · idle · 1 turn · session - · backend mock" in out
    assert "unknown command /bogus" in out
    assert out.count("Commands: /status") == 3  # banner, /help, unknown command
    assert "(mock) You said: Bye now" in out
    assert "not read" not in out


def test_chat_ends_at_end_of_input():
    result = invoke("chat", "--backend", "mock", input="Hi\n")
    assert result.exit_code == 0, result.output
    assert "(mock) You said: Hi" in result.stdout


def test_ctrl_c_in_chat_interrupts_the_turn_not_the_program(monkeypatch: pytest.MonkeyPatch):
    gate = blocking_first_turn(monkeypatch)
    presser = press_ctrl_c_when_blocked(gate)
    result = invoke("chat", "--backend", "mock", input="Slow prompt\nStill here?\n/status\n")
    presser.join(WAIT_S)

    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "interrupted" in out
    assert out.index("interrupted") < out.index("(mock) You said: Still here?")
    # The interrupted turn is not counted; the next one is.
    assert "agent gen-agent-chat · idle · 1 turn" in out
    assert gate.cancelled


# -- pool --------------------------------------------------------------------------------------


def test_pool_gives_every_line_a_result(tmp_path: Path):
    prompts = [f"Prompt number {i}" for i in range(1, 8)]
    file = tmp_path / "prompts.txt"
    file.write_text("\n".join(prompts[:3]) + "\n\n   \n" + "\n".join(prompts[3:]) + "\n")
    result = invoke("pool", "--backend", "mock", "--workers", "3", str(file))

    assert result.exit_code == 0, result.output
    for index, prompt in enumerate(prompts, 1):
        row = next(line for line in result.stdout.splitlines() if f" {prompt} " in line)
        cells = [cell.strip() for cell in row.split("│")[1:-1]]
        assert cells[:5] == [str(index), prompt, f"(mock) You said: {prompt}", "3", "6"]
    assert "7 of 7 prompts succeeded" in result.stderr


def test_pool_json_gives_every_line_a_record_in_order(tmp_path: Path):
    prompts = [f"line {i}" for i in range(1, 11)]
    file = tmp_path / "prompts.txt"
    file.write_text("\n".join(prompts))
    result = invoke("pool", "--backend", "mock", "-w", "4", "--json", str(file))

    assert result.exit_code == 0, result.output
    records = json_lines(result.stdout)
    assert [(r["index"], r["prompt"], r["ok"]) for r in records] == [
        (i, p, True) for i, p in enumerate(prompts, 1)]
    assert [r["text"] for r in records] == [f"(mock) You said: {p}" for p in prompts]


def test_pool_reads_prompts_from_stdin():
    result = invoke("pool", "--backend", "mock", "--json", "-", input="a\nb\n")
    assert result.exit_code == 0, result.output
    assert [r["text"] for r in json_lines(result.stdout)] == [
        "(mock) You said: a", "(mock) You said: b"]


def test_pool_reports_a_failed_prompt_and_exits_1(tmp_path: Path, server: ScriptedModelServer,
                                                  no_keys: None):
    def answer(request: RecordedRequest) -> Reply:
        prompt = request.body["messages"][-1]["content"]
        if prompt == "bad one":
            return Reply.http_error(400, "this prompt is refused")
        return Reply.text(f"answer to {prompt}", input_tokens=7, output_tokens=3)

    server.enqueue(*[answer] * 3)
    file = tmp_path / "prompts.txt"
    file.write_text("good one\nbad one\ngood two\n")
    result = invoke("pool", "--backend", "anthropic", "--base-url", server.url, "--model",
                    "claude-test", "--workers", "2", "--json", str(file))

    assert result.exit_code == 1
    records = json_lines(result.stdout)
    assert [(r["index"], r["prompt"], r["ok"]) for r in records] == [
        (1, "good one", True), (2, "bad one", False), (3, "good two", True)]
    assert records[0]["text"] == "answer to good one"
    assert records[0]["usage"]["input_tokens"] == 7
    assert records[1]["error"] == "anthropic invalid_request (HTTP 400): this prompt is refused"


def test_pool_table_marks_the_failed_prompt(tmp_path: Path, server: ScriptedModelServer,
                                            no_keys: None):
    server.enqueue(Reply.http_error(400, "refused"))
    file = tmp_path / "prompts.txt"
    file.write_text("only one\n")
    result = invoke("pool", "--backend", "anthropic", "--base-url", server.url, "--model",
                    "claude-test", str(file))

    assert result.exit_code == 1
    assert "error: anthropic invalid_request (HTTP 400): refused" in result.stdout
    assert "0 of 1 prompts succeeded; 1 failed" in result.stderr


# -- bad input: message and exit code ----------------------------------------------------------


def assert_usage_error(result: Any, message: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith("error: ")
    assert message in " ".join(result.stderr.split())
    assert "Traceback" not in result.output


@pytest.mark.parametrize("command", [["run", "hi"], ["chat"], ["pool", "file.txt"]])
def test_unknown_backend(command: list[str], tmp_path: Path):
    result = invoke(*command, "--backend", "gpt")
    assert_usage_error(result, "unknown backend 'gpt'; choose one of: claude, codex, anthropic, "
                               "openai, mock")


def test_a_timeout_beyond_what_the_platform_can_wait_is_one_error_line():
    result = invoke("run", "--backend", "mock", "--timeout", "1e12", "hi")
    assert_usage_error(result, "--timeout must be at most 9223372036 seconds, or inf for no "
                               "bound; got 1e+12")


def test_an_infinite_timeout_runs_without_a_watchdog():
    result = invoke("run", "--backend", "mock", "--timeout", "inf", "hi")
    assert result.exit_code == 0, result.output
    assert "(mock) You said: hi" in result.stdout


# -- issue #15: help, version, backend names, --base-url, --cli-path ---------------------------
@pytest.mark.parametrize("command", [[], ["run"], ["chat"], ["pool"], ["demo"], ["observe"]])
def test_every_command_takes_h_help_and_version(command: list[str]):
    for flag in ("-h", "--help"):
        result = invoke(*command, flag)
        assert result.exit_code == 0, result.output
        assert "Usage:" in result.stdout
    result = invoke(*command, "--version")
    assert result.exit_code == 0, result.output
    assert result.stdout == f"gen-agent {gen_agent.__version__}\n"


def test_backend_names_are_case_insensitive():
    result = invoke("run", "--backend", "MOCK", "hi")
    assert result.exit_code == 0, result.output
    assert "(mock) You said: hi" in result.stdout


@pytest.mark.parametrize(("given", "expected"), [
    ("127.0.0.1:8080", "http://127.0.0.1:8080/v1"),
    ("http://127.0.0.1:8080", "http://127.0.0.1:8080/v1"),
    ("http://127.0.0.1:8080/", "http://127.0.0.1:8080/v1"),
    ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1"),
    ("http://127.0.0.1:8080/custom/", "http://127.0.0.1:8080/custom"),
])
def test_openai_base_url_accepts_a_bare_host(given: str, expected: str):
    from gen_agent.cli._support import normalize_base_url

    assert normalize_base_url("openai", given) == expected
    assert normalize_base_url("anthropic", "127.0.0.1:8080") == "http://127.0.0.1:8080"


def test_openai_against_a_bare_host_base_url_works(scripted_model_server: Any):
    from gen_agent.testing._model_server import Reply

    scripted_model_server.enqueue(Reply.text("hello from the root"))
    result = invoke("run", "--backend", "openai", "--base-url",
                    f"127.0.0.1:{scripted_model_server.port}", "hi")
    assert result.exit_code == 0, result.output
    assert "hello from the root" in result.stdout


def test_a_directory_or_non_executable_cli_path_says_so(tmp_path: Path):
    result = invoke("run", "--backend", "claude", "--cli-path", str(tmp_path), "hi")
    assert_usage_error(result, f"--cli-path '{tmp_path}' is a directory")
    plain = tmp_path / "claude"
    plain.write_text("#!/bin/sh\n")
    plain.chmod(0o644)
    result = invoke("run", "--backend", "claude", "--cli-path", str(plain), "hi")
    assert_usage_error(result, f"--cli-path '{plain}' exists but is not executable")


def test_no_backend_chosen(no_keys: None):
    assert_usage_error(invoke("run", "hi"), "choose a backend with --backend")


def test_missing_claude_cli_names_what_to_install(tmp_path: Path):
    result = invoke("run", "--backend", "claude", "--cli-path", str(tmp_path / "claude"), "hi")
    assert_usage_error(result, "the claude backend needs the Claude Code CLI")
    assert_usage_error(result, "npm install -g @anthropic-ai/claude-code")


def test_missing_codex_cli_on_path_names_what_to_install(tmp_path: Path):
    result = invoke("chat", "--backend", "codex", env={"PATH": str(tmp_path)})
    assert_usage_error(result, "'codex' was not found on PATH")
    assert_usage_error(result, "npm install -g @openai/codex")


@pytest.mark.parametrize("backend", ["anthropic", "openai"])
def test_missing_sdk_names_the_extra(backend: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, backend, None)  # makes `import <backend>` fail
    result = invoke("run", "--backend", backend, "--base-url", "http://127.0.0.1:9", "hi")
    assert_usage_error(result, f"pip install 'gen-agent[{backend}]'")


@pytest.mark.parametrize(("backend", "variable"),
                         [("anthropic", "ANTHROPIC_API_KEY"), ("openai", "OPENAI_API_KEY")])
def test_no_api_key_for_a_real_provider(backend: str, variable: str, no_keys: None,
                                        tmp_path: Path):
    file = tmp_path / "p.txt"
    file.write_text("hi\n")
    for command in (["run", "hi"], ["chat"], ["pool", str(file)]):
        result = invoke(*command, "--backend", backend)
        assert_usage_error(result, f"no API key for the {backend} backend: set {variable}")


def test_unreadable_prompt_file(tmp_path: Path):
    missing = tmp_path / "missing.txt"
    assert_usage_error(invoke("pool", "--backend", "mock", str(missing)),
                       f"cannot read prompt file '{missing}': No such file or directory")
    assert_usage_error(invoke("pool", "--backend", "mock", str(tmp_path)),
                       f"cannot read prompt file '{tmp_path}': Is a directory")
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"\xff\xfe\x00bad")
    assert_usage_error(invoke("pool", "--backend", "mock", str(binary)),
                       f"cannot read prompt file '{binary}': it is not UTF-8 text")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    assert_usage_error(invoke("pool", "--backend", "mock", str(empty)),
                       f"prompt file '{empty}' has no prompts (one prompt per line)")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_prompt_file_without_read_permission(tmp_path: Path):
    secret = tmp_path / "secret.txt"
    secret.write_text("hi\n")
    secret.chmod(0)
    assert_usage_error(invoke("pool", "--backend", "mock", str(secret)),
                       f"cannot read prompt file '{secret}': Permission denied")


def test_cwd_must_be_a_directory(tmp_path: Path):
    result = invoke("run", "--backend", "mock", "--cwd", str(tmp_path / "nowhere"), "hi")
    assert_usage_error(result, f"--cwd '{tmp_path / 'nowhere'}' is not a directory")


def test_codex_does_not_take_a_base_url(tmp_path: Path):
    codex = fake_executable(tmp_path, "codex")
    result = invoke("run", "--backend", "codex", "--cli-path", str(codex), "--base-url",
                    "http://127.0.0.1:9", "hi")
    assert_usage_error(result, "--base-url is not supported with the codex backend")


def test_a_backend_start_failure_is_one_line(tmp_path: Path, no_keys: None):
    # The CLI exists for the pre-check, but the backend refuses the model name.
    claude = fake_executable(tmp_path, "claude")
    result = invoke("run", "--backend", "claude", "--cli-path", str(claude), "--model", "",
                    "hi")
    assert_usage_error(result, "the backend refused its options (invalid option 'model')")


def test_the_console_script_reports_bad_input_without_a_traceback():
    done = subprocess.run([sys.executable, "-m", "gen_agent", "run", "--backend", "nope", "hi"],
                          capture_output=True, text=True, timeout=WAIT_S, check=False)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip() == ("error: unknown backend 'nope'; choose one of: claude, "
                                   "codex, anthropic, openai, mock")


def test_version():
    result = invoke("version")
    assert result.exit_code == 0
    assert result.stdout.strip() == "0.1.0"
