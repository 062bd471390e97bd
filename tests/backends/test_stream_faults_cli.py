"""Stream faults of the two CLI backends, against the fake CLIs in tests/fakes (byte-exact
lines, stderr and exit statuses taken from public reports): diagnostics of a failed turn, a
resume of a session that no longer exists, usage and rate limits, older Codex item shapes,
usage summed per message id, and when the child is reaped (after the reply, before stop
returns). Every fault is a classified `BackendError`, never a task crash, and the agent
answers the next ask."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import _agents as agents
import pytest

import gen_agent
from gen_agent._errors import TurnError
from gen_agent.backend import BackendError
from gen_agent.backends.claude import ClaudeCLI
from gen_agent.backends.codex import CodexCLI

from .conftest import Agent, FakeClaude, FakeCodex, wait_until

WAIT_S = 15.0
CLAUDE_SESSION = "fake-session-0001"
CODEX_THREAD = "0199a000-0000-7000-8000-00000000fake"


def start(name: str, backend: Any, fake: Any, **opts: Any) -> gen_agent.AgentRef:
    agent_opts = {k: opts.pop(k) for k in ("resume_session_id",) if k in opts}
    return agents.start(Agent, name, backend=backend, backend_opts=fake.options(**opts),
                        **agent_opts)


def failed(agent: gen_agent.AgentRef) -> BackendError:
    with pytest.raises(TurnError) as info:
        agent.ask("x", timeout=WAIT_S)
    reason = info.value.reason
    assert isinstance(reason, BackendError), reason  # never ("task_crashed", ...)
    return reason


# -- diagnostics ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "fake_name", "session_id"),
    [(ClaudeCLI, "fake_claude", CLAUDE_SESSION), (CodexCLI, "fake_codex", CODEX_THREAD)],
)
def test_a_cli_that_dies_before_its_result_keeps_text_exit_code_stderr_and_session(
    request: pytest.FixtureRequest, backend: Any, fake_name: str, session_id: str
) -> None:
    fake = request.getfixturevalue(fake_name)
    fake.script("eof_no_result", "echo")
    agent = start(f"dies-{fake_name}", backend, fake)

    reason = failed(agent)

    assert (reason.kind, reason.retryable) == ("no_result", False)
    diagnostics = reason.diagnostics
    assert diagnostics.partial_text == "partial answer"
    assert diagnostics.exit_code == 2
    assert diagnostics.stderr_tail == "fatal: the model connection broke\n"
    assert diagnostics.session_id == session_id  # known from the init line / thread id
    assert "partial" not in str(reason) and "fatal" not in repr(reason)
    # The next turn resumes the session the failed one had reported.
    assert agent.ask("again", timeout=WAIT_S).text == "you said: again"
    assert session_id in fake.calls()[1]["argv"]
    gen_agent.stop(f"dies-{fake_name}")


def test_an_in_band_claude_failure_keeps_its_text_and_stderr(fake_claude: FakeClaude) -> None:
    fake_claude.script("is_error_success", "echo")
    agent = start("inband", ClaudeCLI, fake_claude)

    reason = failed(agent)

    assert reason.diagnostics.partial_text == "Something went wrong"
    assert reason.diagnostics.session_id == CLAUDE_SESSION
    assert reason.diagnostics.stderr_tail == ""
    assert agent.ask("again", timeout=WAIT_S).text == "you said: again"
    gen_agent.stop("inband")


# -- a resume of a session that no longer exists ---------------------------------------------


@pytest.mark.parametrize(
    ("backend", "fake_name", "field", "fresh"),
    [(ClaudeCLI, "fake_claude", "session_id", CLAUDE_SESSION),
     (CodexCLI, "fake_codex", "thread_id", CODEX_THREAD)],
)
def test_a_dead_resume_is_session_not_found_and_the_id_is_forgotten(
    request: pytest.FixtureRequest, backend: Any, fake_name: str, field: str, fresh: str
) -> None:
    fake = request.getfixturevalue(fake_name)
    fake.script("dead_resume", "echo")
    name = f"dead-{fake_name}"
    agent = start(name, backend, fake, resume_session_id="gone-0000")
    assert agent._handle.session_id == "gone-0000"  # the record a restart would resume

    reason = failed(agent)

    assert (reason.provider, reason.kind, reason.retryable) == (backend._PROVIDER,
                                                                "session_not_found", False)
    assert reason.diagnostics.session_id is None
    assert reason.diagnostics.exit_code == 1
    assert "gone-0000" in (reason.diagnostics.stderr_tail or "")
    assert "gone-0000" in fake.calls()[0]["argv"]
    # Forgotten by the agent's record and by the backend session.
    assert agent._handle.session_id is None
    assert getattr(gen_agent.backend_session(name), field) is None

    answer = agent.ask("again", timeout=WAIT_S)  # a fresh conversation, not a failure forever

    assert answer.text == "you said: again"
    assert "gone-0000" not in fake.calls()[1]["argv"]
    assert agent._handle.session_id == fresh
    gen_agent.stop(name)


def test_a_failure_that_is_not_a_dead_resume_keeps_the_session(fake_claude: FakeClaude) -> None:
    fake_claude.script("eof_no_result", "echo")
    agent = start("keeps", ClaudeCLI, fake_claude, session_id="alive-1")

    assert failed(agent).kind == "no_result"

    assert agent.ask("again", timeout=WAIT_S).text == "you said: again"
    assert "alive-1" in fake_claude.calls()[1]["argv"]
    gen_agent.stop("keeps")


# -- codex: in-band outcome, limits, item shapes ------------------------------------------------


@pytest.mark.parametrize(
    ("scenario", "kind", "retryable", "partial"),
    [
        ("usage_limit", "quota", False, ""),
        ("quota_exceeded", "quota", False, ""),
        ("rate_limited", "rate_limited", True, ""),  # "last status: 429" in the notification
        ("rate_limit_text", "rate_limited", True, "half "),
        ("failed_exit_zero", "turn_failed", False, "so far "),
    ],
)
def test_codex_turn_failed_decides_and_limits_are_classified(
    fake_codex: FakeCodex, scenario: str, kind: str, retryable: bool, partial: str
) -> None:
    fake_codex.script(scenario, "echo")
    agent = start("codex-limits", CodexCLI, fake_codex)

    reason = failed(agent)

    assert (reason.kind, reason.retryable) == (kind, retryable)
    assert reason.diagnostics.partial_text == partial
    assert reason.diagnostics.session_id == CODEX_THREAD
    assert agent.ask("again", timeout=WAIT_S).text == "you said: again"
    gen_agent.stop("codex-limits")


def test_codex_older_item_shapes_are_read_and_unreadable_items_visible(
    fake_codex: FakeCodex,
) -> None:
    fake_codex.script("older_items", "echo")
    agent = start("codex-old", CodexCLI, fake_codex)

    response = agent.ask("x", timeout=WAIT_S)

    assert response.text == "Found 2."
    assert [e.kind for e in response.events] == [
        "codex.item",  # reasoning (item_type)
        "codex.tool_started",  # the mcp_tool_call, started (for the tool journal)
        "tool_use", "tool_result",  # the same call, once completed
        "codex.item", "codex.item",  # the to-do list, started and updated
        "codex.item",  # an item without a type: visible, not dropped
        "text", "usage", "result",
    ]
    items = [e.data for e in response.events if e.kind == "codex.item"]
    assert items[0]["item_type"] == "reasoning"
    assert items[1]["items"][0] == {"text": "look", "completed": True}
    assert items[3] == {"id": "item_3", "payload": [1]}
    assert response.events[2].data["tool"] == "search_issues"
    assert agent.ask("again", timeout=WAIT_S).text == "you said: again"
    gen_agent.stop("codex-old")


# -- claude: usage per message id ---------------------------------------------------------------


def test_claude_usage_is_summed_once_per_message_id_when_the_result_has_none(
    fake_claude: FakeClaude,
) -> None:
    fake_claude.script("usage_split", "echo")
    agent = start("usage", ClaudeCLI, fake_claude)

    response = agent.ask("x", timeout=WAIT_S)

    assert response.text == "Two parts."
    # msg_a counted once, from its last line (output 7, not 1 + 7; input 10 not 20).
    assert response.usage == {"input_tokens": 13, "output_tokens": 9,
                              "cache_read_input_tokens": 100}
    assert agent.ask("again", timeout=WAIT_S).usage == {"input_tokens": 3, "output_tokens": 4}
    gen_agent.stop("usage")


# -- when the child is reaped ---------------------------------------------------------------------


def test_an_ask_returns_at_the_result_line_and_the_child_is_reaped_after(
    fake_claude: FakeClaude,
) -> None:
    fake_claude.script("linger_until_released", "echo")
    agent = start("early", ClaudeCLI, fake_claude, exit_grace_ms=120_000)

    answer = agent.ask("x", timeout=WAIT_S)

    # The reply came while the CLI is still running (it waits for the release file, and its
    # exit grace is two minutes): reaping happens after the reply.
    child = gen_agent.backend_session("early").last_child
    assert answer.text == "answered early"
    assert child.returncode is None and not child.reaped
    (fake_claude.dir / "release").touch()
    assert child.wait_reaped(WAIT_S) and child.returncode == 0
    assert agent.ask("again", timeout=WAIT_S).text == "you said: again"
    gen_agent.stop("early")


def test_stop_returns_after_the_running_child_is_reaped(fake_claude: FakeClaude) -> None:
    fake_claude.script("slow")
    start("stopped", ClaudeCLI, fake_claude)
    gen_agent.tell("stopped", "x")
    assert wait_until(lambda: (fake_claude.dir / "helper.pid").exists(), WAIT_S)
    child = gen_agent.backend_session("stopped").last_child

    gen_agent.stop("stopped")

    assert child.reaped  # not "soon": stop returned after the reap


def test_stop_waits_for_a_child_that_answered_and_still_runs(fake_claude: FakeClaude) -> None:
    fake_claude.script("linger")
    agent = start("answered", ClaudeCLI, fake_claude, exit_grace_ms=200, term_grace_ms=200)
    assert agent.ask("x", timeout=WAIT_S).text == "done but lingering"
    child = gen_agent.backend_session("answered").last_child

    gen_agent.stop("answered")

    assert child.reaped and child.returncode is not None



# -- the CLI analogues of the wire faults ----------------------------------------------------

BOTH = [
    pytest.param(ClaudeCLI, "fake_claude", CLAUDE_SESSION, id="claude"),
    pytest.param(CodexCLI, "fake_codex", CODEX_THREAD, id="codex"),
]


@pytest.mark.parametrize(("backend", "fake_name", "session_id"), BOTH)
@pytest.mark.parametrize(
    ("scenario", "exit_code"),
    [("cut_mid_line", 1), ("cut_mid_utf8", 1), ("killed_mid_stream", -9)],
)
def test_a_cli_cut_off_inside_a_line_fails_with_what_it_said(
    request: pytest.FixtureRequest, backend: Any, fake_name: str, session_id: str,
    scenario: str, exit_code: int,
) -> None:
    fake = request.getfixturevalue(fake_name)
    fake.script(scenario, "echo")
    name = f"cut-{fake_name}"
    agent = start(name, backend, fake)

    with pytest.raises(TurnError) as info:
        agent.ask("x", timeout=WAIT_S)

    reason = info.value.reason
    assert isinstance(reason, BackendError)
    assert (reason.kind, reason.retryable) == ("no_result", False)
    # The unterminated last line is visible as unparsed, never half-decoded text.
    diagnostics = reason.diagnostics
    assert diagnostics.partial_text == "before the cut"
    assert (diagnostics.exit_code, diagnostics.session_id) == (exit_code, session_id)
    assert agent.ask("again", timeout=WAIT_S).text == "you said: again"
    gen_agent.stop(name)


@pytest.mark.parametrize(("backend", "fake_name", "session_id"), BOTH)
@pytest.mark.parametrize("scenario", ["hang_with_output", "hang_silent"])
def test_the_watchdog_ends_a_hung_cli_with_or_without_output(
    request: pytest.FixtureRequest, backend: Any, fake_name: str, session_id: str,
    scenario: str,
) -> None:
    fake = request.getfixturevalue(fake_name)
    fake.script(scenario, "echo")
    name = f"hung-{fake_name}"
    agent = gen_agent.start_agent(Agent, name=name, backend=backend,
                                  backend_opts=fake.options(), watchdog_ms=500)

    with pytest.raises(TurnError) as info:
        agent.ask("x", timeout=WAIT_S)

    assert info.value.reason == "timeout"
    hung = gen_agent.backend_session(name).last_child
    assert hung.wait_reaped(WAIT_S) and hung.returncode == -9  # its group was killed
    assert agent._handle.session_id == session_id  # checkpointed before the hang
    assert agent.ask("again", timeout=WAIT_S).text == "you said: again"
    gen_agent.stop(name)


@pytest.mark.parametrize(("backend", "fake_name", "session_id"), BOTH)
def test_malformed_and_blank_lines_are_visible_and_the_turn_goes_on(
    request: pytest.FixtureRequest, backend: Any, fake_name: str, session_id: str,
) -> None:
    fake = request.getfixturevalue(fake_name)
    fake.script("malformed_lines", "echo")
    name = f"malformed-{fake_name}"
    agent = start(name, backend, fake)

    response = agent.ask("x", timeout=WAIT_S)

    assert response.text == "still fine"
    # The cut-off JSON line and the line that is not UTF-8, byte for byte; the blank lines
    # ("" and a lone CR) produce nothing.
    unparsed = [e.data for e in response.events if e.kind.endswith(".unparsed")]
    first = ('{"type": "assistant", "message": {"id": ' if backend is ClaudeCLI
             else '{"type": "item.completed", "item": ')
    assert unparsed == [{"size_bytes": len(first), "line": first},
                        {"size_bytes": 12, "line": "\ufffd\ufffd not utf-8"}]
    assert agent.ask("again", timeout=WAIT_S).text == "you said: again"
    gen_agent.stop(name)


# -- what a CLI prints that is not JSON ------------------------------------------------------


@pytest.mark.parametrize(("backend", "fake_name"),
                         [(ClaudeCLI, "fake_claude"), (CodexCLI, "fake_codex")])
def test_plain_text_before_an_exit_without_result_is_kept_bounded_on_the_error(
    request: pytest.FixtureRequest, backend: Any, fake_name: str
) -> None:
    fake = request.getfixturevalue(fake_name)
    fake.script("plain_then_exit", "plain_then_exit", "echo")
    name = f"plain-{fake_name}"
    agent = start(name, backend, fake)

    reason = failed(agent)

    assert reason.kind == "no_result"
    assert reason.diagnostics.stdout_tail == (
        "Invalid API key · Please run /login\n(no result follows)")
    assert reason.diagnostics.exit_code == 1
    assert "Invalid" not in str(reason) and "Invalid" not in repr(reason)
    gen_agent.stop(name)
    # Bounded like stderr_tail: the most recent bytes only.
    agent = start(name, backend, fake, stderr_tail_bytes=12)
    assert failed(agent).diagnostics.stdout_tail == "ult follows)"
    assert agent.ask("again", timeout=WAIT_S).text == "you said: again"
    gen_agent.stop(name)


# -- the real CLI's answer to a dead --resume, per turn ---------------------------------------

RECORDED_PER_TURN = (Path(__file__).resolve().parent.parent / "fixtures" / "claude-cli"
                     / "per_turn" / "dead_resume.jsonl")


def test_the_real_clis_dead_resume_result_line_is_session_not_found(
        fake_claude: FakeClaude) -> None:
    """claude 2.1.197 answers a dead `--resume` with a `result` line naming the error
    (`errors`), then the same on stderr and exit 1 (recorded)."""
    fake_claude.script("recorded")
    dead = "0badbadb-0000-4000-8000-000000000000"
    agent = start("dead-real", ClaudeCLI, fake_claude, session_id=dead,
                  env={"FAKE_CLAUDE_RECORDING": str(RECORDED_PER_TURN)})

    reason = failed(agent)

    assert (reason.kind, reason.retryable) == ("session_not_found", False)
    assert reason.diagnostics.session_id is None
    assert dead in (reason.diagnostics.stderr_tail or "")
    assert gen_agent.backend_session("dead-real").session_id is None
    assert agent._handle.session_id is None
    answer = agent.ask("hello again", timeout=WAIT_S)
    assert answer.text == "Fresh start."
    assert "--resume" not in fake_claude.calls()[1]["argv"]
    gen_agent.stop("dead-real")


# -- prompts a command line cannot carry -------------------------------------------------------


@pytest.mark.parametrize(("backend", "fake_name"),
                         [(ClaudeCLI, "fake_claude"), (CodexCLI, "fake_codex")])
@pytest.mark.parametrize(("prompt", "what", "index"), [
    ("ab\x00cd", "a NUL character", 2), ("x\ud800y", "a lone surrogate U+D800", 1),
    ("\udcff", "a lone surrogate U+DCFF", 0)])
def test_the_client_refuses_an_argv_prompt_naming_the_position_before_queuing(
    request: pytest.FixtureRequest, backend: Any, fake_name: str, prompt: str, what: str,
    index: int,
) -> None:
    fake = request.getfixturevalue(fake_name)
    name = f"argv-{fake_name}"
    agent = start(name, backend, fake)
    with pytest.raises(ValueError) as ask_error:
        agent.ask(prompt, timeout=WAIT_S)
    message = str(ask_error.value)
    assert message.startswith("ask: ") and f"{what} at index {index}" in message
    with pytest.raises(ValueError, match=r"^tell: "):
        gen_agent.tell(name, prompt)
    assert fake.calls() == []  # nothing was queued, nothing ran
    assert gen_agent.status(name).queued == 0
    assert agent.ask("fine", timeout=WAIT_S).text == "you said: fine"
    gen_agent.stop(name)


class Rewriting(Agent):
    """Follows every reply once with a prompt holding a NUL (made by a callback)."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        self.errors = opts["errors"]
        return opts["backend_opts"], {"done": False}

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        if state["done"]:
            return gen_agent.NoReply(state)
        return gen_agent.Prompt("follow \x00 up", {"done": True})

    def handle_error(self, ref: Any, reason: Any, state: Any) -> Any:
        self.errors.put(reason)
        return gen_agent.NoReply(state)


@pytest.mark.parametrize(("backend", "fake_name"),
                         [(ClaudeCLI, "fake_claude"), (CodexCLI, "fake_codex")])
def test_a_callback_made_argv_prompt_fails_its_turn_through_handle_error(
    request: pytest.FixtureRequest, backend: Any, fake_name: str
) -> None:
    import queue

    fake = request.getfixturevalue(fake_name)
    errors: queue.Queue[Any] = queue.Queue()
    name = f"cb-{fake_name}"
    agent = gen_agent.start_agent(Rewriting, name=name, backend=backend,
                                  backend_opts=fake.options(), errors=errors)
    assert agent.ask("first", timeout=WAIT_S).text == "you said: first"

    reason = errors.get(timeout=WAIT_S)

    assert isinstance(reason, BackendError)  # never ("task_crashed", ...)
    assert (reason.kind, reason.provider) == ("invalid_request", backend._PROVIDER)
    assert "a NUL character at index 7" in (reason.message or "")
    assert len(fake.calls()) == 1  # the follow-up never started a process
    assert agent.ask("second", timeout=WAIT_S).text == "you said: second"
    gen_agent.stop(name)
