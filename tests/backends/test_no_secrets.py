"""No secret in any repr, str or command-line output.

Every bundled backend that takes credentials is started with a marker key (the HTTP backends'
`api_key` and an `Authorization` header, the CLI backends' key variables in `env`, the
`Fallback` over both HTTP backends); the test answers a turn and fails one, then renders every
object it can reach (backend, session, options, status, snapshot, response, error, reason,
diagnostics, child spec, supervisor snapshot, start errors) with `repr`, `str` and rich's
pretty printer, and runs `gen-agent run`, `chat` and `sessions` with the key in the
environment; the marker appears nowhere."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import rich.pretty
from typer.testing import CliRunner

import gen_agent
from gen_agent._errors import AgentStartError, TurnError
from gen_agent.backends._option_checks import masked
from gen_agent.backends.anthropic import AnthropicAPI, AnthropicOptions
from gen_agent.backends.claude import ClaudeCLI
from gen_agent.backends.codex import CodexCLI
from gen_agent.backends.fallback import Fallback
from gen_agent.backends.openai import OpenAIResponses
from gen_agent.cli._app import app
from gen_agent.store import SQLiteStore
from gen_agent.testing._model_server import Reply, ScriptedModelServer

from .conftest import Agent, FakeClaude, FakeCodex

pytest.importorskip("anthropic")
pytest.importorskip("openai")

MARKER = "MARKER7f3a9c1e"
ANTHROPIC_KEY = f"sk-ant-api03-{MARKER}"
OPENAI_KEY = f"sk-proj-{MARKER}"
WAIT_S = 15.0


def renders(obj: Any) -> list[str]:
    """Every way the test renders an object."""
    return [repr(obj), str(obj), rich.pretty.pretty_repr(obj)]


def assert_clean(objects: dict[str, Any]) -> None:
    leaks = [label for label, obj in objects.items()
             if any(MARKER in text for text in renders(obj))]
    assert leaks == [], f"the marker key shows in: {leaks}"


def http_opts(server: ScriptedModelServer) -> dict[str, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {MARKER}", "x-trace": "visible"}
    return {
        "anthropic": {"api_key": ANTHROPIC_KEY, "base_url": server.url, "model": "m",
                      "default_headers": headers},
        "openai": {"api_key": OPENAI_KEY, "base_url": server.url + "/v1", "model": "m",
                   "store": False, "default_headers": headers},
    }


def reached(name: str, response: Any, error: TurnError) -> dict[str, Any]:
    """What a caller can reach of a started agent, its answer and its failure."""
    session = gen_agent.backend_session(name, timeout=WAIT_S)
    reason = error.reason
    return {"session": session, "options": getattr(session, "options", None),
            "status": gen_agent.status(name, timeout=WAIT_S),
            "snapshot": gen_agent.runtime_snapshot(name, timeout=WAIT_S),
            "response": response, "error": error, "reason": reason,
            "diagnostics": getattr(reason, "diagnostics", None),
            "raw": getattr(reason, "raw", None), "ref": gen_agent.whereis(name)}


def test_the_http_backends_and_fallback_show_no_key(tmp_path: Path) -> None:
    with ScriptedModelServer() as server:
        opts = http_opts(server)
        cases = {"anthropic": (AnthropicAPI, opts["anthropic"]),
                 "openai": (OpenAIResponses, opts["openai"]),
                 "fallback": (Fallback, {"hops": [(AnthropicAPI, opts["anthropic"]),
                                                  (OpenAIResponses, opts["openai"])]})}
        for label, (backend, backend_opts) in cases.items():
            store = SQLiteStore(tmp_path / f"{label}.db")
            server.enqueue(Reply.text("fine"), Reply.http_error(401, "invalid x-api-key"),
                           Reply.text("third"))
            name = f"secret-{label}"
            gen_agent.start_agent(Agent, name=name, backend=backend, store=store,
                                  session_key=label, backend_opts=backend_opts)
            response = gen_agent.ask(name, "hi", timeout=WAIT_S)
            with pytest.raises(TurnError) as info:
                gen_agent.ask(name, "again", timeout=WAIT_S)
            assert_clean({f"{label} {k}": v for k, v in reached(name, response,
                                                                info.value).items()})
            assert gen_agent.ask(name, "third", timeout=WAIT_S).text == "third"
            gen_agent.stop(name)
            store.close()
        server.default = Reply.text("ok")
        spec = gen_agent.child_spec(Agent, name="secret-child", backend=AnthropicAPI,
                                    backend_opts=opts["anthropic"])
        with gen_agent.Supervisor([spec], name="secret-sup") as supervisor:
            assert_clean({"child spec": spec, "supervisor": supervisor,
                          "children": supervisor.which_children(),
                          "supervisor snapshot": supervisor.snapshot(),
                          "backend": AnthropicAPI,
                          "options": AnthropicOptions(**opts["anthropic"])})


@pytest.mark.usefixtures("no_child_left")
def test_the_cli_backends_show_no_key(fake_claude: FakeClaude, tmp_path: Path) -> None:
    (tmp_path / "codex").mkdir()
    fake_codex = FakeCodex(tmp_path / "codex")
    cases = {"claude": (ClaudeCLI, fake_claude, "ANTHROPIC_API_KEY", ANTHROPIC_KEY,
                        "api_error_401"),
             "codex": (CodexCLI, fake_codex, "OPENAI_API_KEY", OPENAI_KEY, "http_401")}
    for label, (backend, fake, variable, key, failing) in cases.items():
        fake.script("echo", failing, "echo")
        name = f"secret-{label}"
        gen_agent.start_agent(Agent, name=name, backend=backend,
                              backend_opts=fake.options(env={variable: key, "GH_TOKEN": key}))
        response = gen_agent.ask(name, "hi", timeout=WAIT_S)
        with pytest.raises(TurnError) as info:
            gen_agent.ask(name, "again", timeout=WAIT_S)
        assert_clean({f"{label} {k}": v for k, v in reached(name, response, info.value).items()})
        assert gen_agent.ask(name, "third", timeout=WAIT_S).text
        gen_agent.stop(name)


@pytest.mark.parametrize(("backend", "opts"), [
    (ClaudeCLI, {"env": {"ANTHROPIC_API_KEY": ANTHROPIC_KEY, "BAD": 1}}),
    (CodexCLI, {"env": {"OPENAI_API_KEY": OPENAI_KEY, "BAD=": "x"}}),
    (AnthropicAPI, {"api_key": ANTHROPIC_KEY, "default_headers": {"x-api-key": 5}}),
    (OpenAIResponses, {"api_key": ["sk", MARKER]}),
    (Fallback, {"hops": [(AnthropicAPI, {"api_key": ANTHROPIC_KEY})]}),
], ids=["claude-env", "codex-env", "anthropic-headers", "openai-key", "fallback-hops"])
def test_a_refused_option_never_echoes_a_secret(backend: Any, opts: dict[str, Any]) -> None:
    with pytest.raises(AgentStartError) as info:
        gen_agent.start_agent(Agent, name="secret-bad", backend=backend, backend_opts=opts)
    assert_clean({"error": info.value, "reason": info.value.reason,
                  "cause": info.value.__cause__})


def test_masked_keeps_what_is_not_a_secret() -> None:
    assert masked("env", {"PATH": "/bin", "ANTHROPIC_API_KEY": "k", "My_Token": "t"}) == {
        "PATH": "/bin", "ANTHROPIC_API_KEY": "<redacted>", "My_Token": "<redacted>"}
    assert masked("default_headers", {"Authorization": "Bearer k", "anthropic-beta": "b"}) == {
        "Authorization": "<redacted>", "anthropic-beta": "b"}
    assert masked("base_url", "https://user:pw@host:1/v1") == "https://<redacted>@host:1/v1"
    assert masked("api_key", "k") == "<redacted>"
    assert masked("model", "claude") == "claude"


# -- the gen-agent command ----------------------------------------------------------------------

runner = CliRunner()


def cli(*args: str, **extra: Any) -> Any:
    env = {"ANTHROPIC_API_KEY": ANTHROPIC_KEY, "OPENAI_API_KEY": OPENAI_KEY, "COLUMNS": "200"}
    return runner.invoke(app, list(args), env=env, **extra)


@pytest.mark.parametrize("backend", ["anthropic", "openai"])
def test_gen_agent_commands_print_no_key(backend: str, tmp_path: Path) -> None:
    with ScriptedModelServer() as server:
        server.enqueue(Reply.text("one"), Reply.http_error(401, "invalid x-api-key"),
                       Reply.text("two"), Reply.http_error(401, "invalid x-api-key"),
                       Reply.text("three"))
        base = ["--backend", backend, "--base-url", server.url]
        outputs = [cli("run", *base, "hi", "again"),
                   cli("run", *base, "--json", "hi", "again"),
                   cli("chat", *base, input="hello\n/status\n/reset\n/quit\n")]
        opts = http_opts(server)[backend]
        store = SQLiteStore(tmp_path / "s.db")
        gen_agent.start_agent(Agent, name="secret-stored", store=store, session_key="k",
                              backend=AnthropicAPI if backend == "anthropic" else OpenAIResponses,
                              backend_opts=opts)
        server.enqueue(Reply.http_error(401, "invalid x-api-key"))
        with pytest.raises(TurnError):
            gen_agent.ask("secret-stored", "hi", timeout=WAIT_S)
        gen_agent.stop("secret-stored")
        store.close()
        db = str(tmp_path / "s.db")
        outputs += [cli("sessions", "list", "--db", db), cli("sessions", "list", "--db", db,
                                                             "--json"),
                    cli("sessions", "show", "--db", db, "k"),
                    cli("sessions", "show", "--db", db, "k", "--payload")]
    assert [r.exit_code for r in outputs[:3]] == [1, 1, 0]
    assert "one" in outputs[0].output and "invalid x-api-key" in outputs[0].output
    for result in outputs:
        assert MARKER not in result.output
        assert MARKER not in (result.stderr if result.stderr_bytes is not None else "")
