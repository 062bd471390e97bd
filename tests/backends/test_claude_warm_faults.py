"""Warm `ClaudeCLI` faults (gen_agent/backends/_subprocess/claude_warm.py), on sessions of the
real CLI (claude 2.1.197 against the loopback model server, recorded by
tests/fixtures/recorder/record.py) replayed by the fake (tests/fakes/fake_claude_warm.py),
and on the fake's own scenarios where a timing must be forced.

Every test checks that the agent answers the next ask, that each caller gets exactly one
answer, that the error is classified (a `BackendError` kind, never `task_crashed`) and, through
the module's `no_child_left` fixture, that no child process is left.
"""

from __future__ import annotations

import json
import queue
import threading
from pathlib import Path
from typing import Any

import pytest

import gen_agent
import gen_agent.backends.claude
from gen_agent import NoReply, Prompt, TurnError
from gen_agent._permission import Allow
from gen_agent.backend import BackendError
from gen_agent.backends.warm import UnrequestedTurn, WarmOutput
from gen_agent.store import MemoryStore

from .conftest import wait_until
from .test_claude_warm import (
    RECORDED,
    WAIT_S,
    Agent,
    FakeWarm,
    Permitting,
    ask,
    in_background,
    session,
    start,
    wait_text,
)

pytestmark = pytest.mark.usefixtures("no_child_left")

DEAD = "0badbadb-0000-4000-8000-000000000000"  # the id session_not_found.jsonl resumes


@pytest.fixture
def fake(tmp_path: Path) -> FakeWarm:
    return FakeWarm(tmp_path)


def replaying(name: str, **backend: Any) -> dict[str, Any]:
    """Backend options that make the fake replay `tests/fixtures/claude-cli/warm/NAME`."""
    return {"env": {"FAKE_CLAUDE_REPLAY": str(RECORDED / name)}, **backend}


def failure(prompt: str, name: str = "w") -> BackendError:
    """The `BackendError` an ask of `prompt` fails with (exactly one outcome: raised)."""
    with pytest.raises(TurnError) as info:
        ask(prompt, name)
    reason = info.value.reason
    assert isinstance(reason, BackendError), reason  # classified: never task_crashed
    return reason


def recorded_session_ids(name: str) -> list[str]:
    lines = [json.loads(x) for x in (RECORDED / name).read_text().splitlines()]
    return [r["line"]["session_id"] for r in lines
            if r["dir"] == "stdout" and isinstance(r["line"], dict)
            and r["line"].get("subtype") == "init"]


def infos_of(infos: queue.Queue[Any], kind: type) -> list[Any]:
    out = []
    while not infos.empty():
        item = infos.get_nowait()
        if isinstance(item, kind):
            out.append(item)
    return out


# -- a stale session --------------------------------------------------------------------------


def test_a_dead_resume_is_session_not_found_and_everyone_forgets_the_id(fake: FakeWarm):
    store = MemoryStore()
    start(fake, backend=replaying("session_not_found.jsonl", session_id=DEAD), store=store,
          session_key="k")

    reason = failure("hello")

    assert (reason.kind, reason.retryable) == ("session_not_found", False)
    assert reason.diagnostics.session_id is None  # the id is dead
    assert reason.diagnostics.exit_code == 1
    assert DEAD in (reason.diagnostics.stderr_tail or "")
    assert fake.calls()[0]["argv"][fake.calls()[0]["argv"].index("--resume") + 1] == DEAD
    # Forgotten by the backend session, the agent's resume record and the store.
    assert session().session_id is None
    assert gen_agent.whereis("w")._handle.session_id is None
    record = store.load("k")
    assert record is not None and record.conversation == {"session_id": None}

    answer = ask("hello again")  # a new conversation: nothing retried, nothing stuck

    assert answer.text == "Fresh start."
    assert "--resume" not in fake.calls()[1]["argv"]
    assert len(fake.calls()) == 2  # one process per attempt: no retry inside the turn
    assert [x["expected"] == x["got"] for x in fake.replayed()] == [True] * 4
    gen_agent.stop("w")


def test_a_supervisor_restart_after_a_dead_session_starts_afresh(fake: FakeWarm):
    from gen_agent._supervisor import Supervisor, child_spec

    spec = child_spec(Agent, name="w", backend=gen_agent.backends.claude.ClaudeCLI,
                      restart="permanent", resume_session=True,
                      backend_opts=fake.options(**replaying("session_not_found.jsonl")),
                      infos=queue.Queue(), texts=queue.Queue(), resume_session_id=DEAD)
    supervisor = Supervisor([spec])
    try:
        first = gen_agent.whereis("w")
        assert first is not None and first._handle.session_id == DEAD
        assert failure("hello").kind == "session_not_found"
        assert first._handle.session_id is None  # the record a restart resumes
        gen_agent.stop("w")  # the supervisor restarts it (permanent)

        def restarted() -> bool:  # a new incarnation, done starting
            ref = gen_agent.whereis("w")
            if ref is None or ref._handle is first._handle:
                return False
            try:
                ref.status(timeout=WAIT_S)
            except gen_agent.AgentDown:
                return False  # registered, still starting
            return True

        assert wait_until(restarted, WAIT_S)
        assert session().session_id is None  # not resuming the dead id
        assert ask("hello again").text == "Fresh start."
        assert "--resume" not in fake.calls()[1]["argv"]
    finally:
        supervisor.stop()


# -- death mid-turn ---------------------------------------------------------------------------


def test_a_cli_killed_mid_turn_fails_it_with_diagnostics_and_the_next_turn_resumes(
        fake: FakeWarm):
    first_session = recorded_session_ids("death_mid_turn.jsonl")[0]
    start(fake, backend=replaying("death_mid_turn.jsonl"))
    assert ask("first").text == "First answer."

    reason = failure("second")

    assert (reason.kind, reason.retryable) == ("no_result", False)
    diagnostics = reason.diagnostics
    assert diagnostics.exit_code == -9  # SIGKILL
    assert diagnostics.session_id == first_session  # known from the turn's init line
    assert (diagnostics.partial_text, diagnostics.stderr_tail) == ("", "")
    assert diagnostics.stdout_tail is None
    third = ask("third")
    assert third.text == "Third answer."
    argv = fake.calls()[1]["argv"]
    assert argv[argv.index("--resume") + 1] == first_session
    gen_agent.stop("w")


def test_plain_text_a_cli_prints_before_it_exits_is_on_the_error(fake: FakeWarm):
    start(fake)
    reason = failure("garbled start")
    assert reason.kind == "no_result"
    assert reason.diagnostics.stdout_tail == "Error: something is misconfigured\nsee the docs"
    assert reason.diagnostics.exit_code == 1
    assert "misconfigured" not in str(reason) and "misconfigured" not in repr(reason)
    assert ask("hello after").text == "echo: hello after"
    gen_agent.stop("w")


# -- a turn the CLI runs by itself ------------------------------------------------------------


def test_a_background_tasks_own_turn_never_answers_the_next_prompt(fake: FakeWarm):
    """The recorded race: the next prompt is written just as the background task's own turn
    starts; that turn's answer goes to handle_info, the prompt gets its own."""
    infos = start(fake, backend=replaying("background_turn.jsonl"))
    first = ask("start the background job")
    assert first.text == "Started it."
    notice = infos.get(timeout=WAIT_S)
    while not (isinstance(notice, WarmOutput) and notice.line.get("subtype")
               == "task_notification"):
        notice = infos.get(timeout=WAIT_S)

    second = ask("second")

    assert second.text == "Second answer."
    assert "background" not in second.text
    record = infos.get(timeout=WAIT_S)
    assert isinstance(record, UnrequestedTurn)
    assert (record.backend, record.text, record.complete) == (
        "claude", "The background job finished.", True)
    assert record.session_id == second.session_id == first.session_id
    assert record.cost_usd == pytest.approx(0.000315 - 0.00021)
    assert record.usage is not None and record.usage["input_tokens"] == 10
    # Each turn is charged its own cost; the session's total has all three.
    assert second.cost_usd == pytest.approx(0.00042 - 0.000315)
    assert second.extra["session_cost_usd"] == pytest.approx(0.00042)
    assert [x["expected"] == x["got"] for x in fake.replayed()] == [True] * 3
    gen_agent.stop("w")


def test_a_turn_of_its_own_between_asks_is_one_record(fake: FakeWarm):
    infos = start(fake)
    assert ask("background please").text == "echo: background please"
    records = []
    while len(records) < 2:
        records.append(infos.get(timeout=WAIT_S))
    notice, record = records
    assert isinstance(notice, WarmOutput) and notice.line["subtype"] == "task_notification"
    assert isinstance(record, UnrequestedTurn)
    assert (record.text, record.lines, record.is_error) == ("background done", 3, False)
    assert record.cost_usd == pytest.approx(0.5)
    assert ask("hello next").text == "echo: hello next"
    gen_agent.stop("w")


def test_a_prompt_written_as_a_turn_of_its_own_starts_gets_its_own_answer(fake: FakeWarm):
    infos = start(fake)
    assert ask("race one").text == "echo: race one"
    assert isinstance(infos.get(timeout=WAIT_S), WarmOutput)  # the task's notification
    reply = ask("hello two")  # the fake plays its own turn first, then this one
    assert reply.text == "echo: hello two"
    assert [e.data.get("text") for e in reply.events if e.kind == "text"] == ["echo: hello two"]
    record = infos.get(timeout=WAIT_S)
    assert isinstance(record, UnrequestedTurn) and record.text == "background done"
    assert reply.cost_usd == pytest.approx(0.25)  # not the other turn's 0.5
    gen_agent.stop("w")


def test_streaming_a_turn_that_proves_to_be_another_fails_retryably(fake: FakeWarm):
    """With partial messages, lines before the echo stream at once unless a turn of the
    CLI's own is expected; a result without the echo then fails the turn (retryable) and
    what streamed is reported; the orphaned prompt's answer is reported too."""
    infos = start(fake, backend={"include_partial_messages": True})
    assert ask("sneak one").text == "echo: sneak one"

    reason = failure("hello two")  # its own turn, unannounced, streams first

    assert (reason.kind, reason.retryable) == ("unmatched_turn", True)
    record = infos.get(timeout=WAIT_S)
    assert isinstance(record, UnrequestedTurn) and record.text == "background done"
    orphan = infos.get(timeout=WAIT_S)  # the failed ask's own answer, when it came
    assert isinstance(orphan, UnrequestedTurn) and orphan.text == "echo: hello two"
    assert ask("hello three").text == "echo: hello three"
    gen_agent.stop("w")


def test_a_local_command_is_answered_without_an_echo(fake: FakeWarm):
    start(fake)
    assert ask("/cost").text == "Total cost: $0.0000"
    assert ask("hello after").text == "echo: hello after"
    gen_agent.stop("w")


# -- lone surrogates and NUL ------------------------------------------------------------------


def test_escaped_lone_surrogates_in_the_clis_output_decode_and_are_recorded(fake: FakeWarm):
    start(fake, backend=replaying("escaped_surrogates.jsonl"))

    first = ask("half \ud800 of a pair")  # sent escaped: JSON carries any str

    assert first.text == "it said \ufffd back"
    replaced = [e.data for e in first.events if e.kind == "claude.surrogates_replaced"]
    assert replaced and all(data["count"] == 1 for data in replaced)
    assert '"half \\ud800 of a pair"' in fake.replayed()[1]["got"]
    assert ask("plain").text == "Fine."
    assert [x["expected"] == x["got"] for x in fake.replayed()] == [True] * 3
    gen_agent.stop("w")


@pytest.mark.parametrize("prompt", ["hello \ud800 lone", "hello \x00 nul", "hello \udcff"])
def test_any_str_prompt_is_sent_escaped_on_stdin(fake: FakeWarm, prompt: str):
    start(fake)
    assert ask(prompt).text.startswith("echo: hello")
    assert ask("hello next").text == "echo: hello next"
    gen_agent.stop("w")


class Rewriter(Agent):
    """Answers each reply with a follow-up prompt holding a lone surrogate (made by a
    callback, so never checked at the client)."""

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        if response.text.startswith("echo: hello"):
            return Prompt("followup \ud800 x", state)
        return NoReply(state)


def test_a_callback_made_prompt_with_a_lone_surrogate_runs_escaped(fake: FakeWarm):
    start(fake, module=Rewriter)
    assert ask("hello one").text == "echo: hello one"
    wait_text("echo: followup \ufffd x")  # the follow-up's turn ran and answered
    assert ask("plain next").text == "echo: plain next"
    assert len(fake.calls()) == 1  # one process throughout: none left claimed
    gen_agent.stop("w")


def test_the_client_refuses_nothing_in_warm_mode(fake: FakeWarm):
    start(fake)
    # No ValueError: the warm wire carries NUL and lone surrogates.
    thread, outcome = in_background("hello \x00 and \ud800")
    assert outcome.get(timeout=WAIT_S).text.startswith("echo: hello")
    thread.join(WAIT_S)
    gen_agent.stop("w")


# -- an interrupt wins over a pending permission decision ------------------------------------


def answers(fake: FakeWarm) -> list[dict[str, Any]]:
    """How the fake's permission requests were answered, in order."""
    path = fake.dir / "answers.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def slow_permit(entered: threading.Event, gate: threading.Event) -> Any:
    def permit(request: Any, state: Any) -> Any:
        entered.set()
        gate.wait(WAIT_S)  # a slow decision, blocking the agent thread
        return Allow()

    return permit


def test_an_interrupt_answers_the_clis_pending_request_deny_at_once(fake: FakeWarm):
    entered, gate = threading.Event(), threading.Event()
    start(fake, module=Permitting, permit=slow_permit(entered, gate))
    caller, outcome = in_background("tool please")
    assert entered.wait(WAIT_S)

    gen_agent.interrupt("w")

    # The CLI has its answer while the callback still blocks the agent thread.
    assert wait_until(lambda: answers(fake) != [], WAIT_S)
    assert answers(fake) == [
        {"behavior": "deny", "message": "the turn was interrupted", "interrupt": True}]
    assert not gate.is_set() and outcome.empty()
    gate.set()  # its late Allow goes nowhere
    assert outcome.get(timeout=WAIT_S).reason == "interrupted"
    caller.join(WAIT_S)
    assert len(answers(fake)) == 1  # the tool never ran: no allow was ever sent
    assert ask("hello next").text == "echo: hello next"
    assert len(fake.calls()) == 1  # the same process answers the next ask
    gen_agent.stop("w")


def test_the_recorded_cli_stops_at_the_deny_with_interrupt(fake: FakeWarm):
    """permission_interrupted.jsonl: claude 2.1.197 answered deny-with-interrupt while the
    agent's callback was deciding: the tool never ran, and the process takes the next turn."""
    entered, gate = threading.Event(), threading.Event()
    start(fake, module=Permitting, permit=slow_permit(entered, gate),
          backend=replaying("permission_interrupted.jsonl"))
    caller, outcome = in_background("run it")
    assert entered.wait(WAIT_S)
    gen_agent.interrupt("w")
    assert wait_until(lambda: len(fake.replayed()) == 3, WAIT_S)  # our answer, at once
    # The CLI ends the turn on its own (as recorded, before the agent thread is free to
    # interrupt it too): its terminal event reached handle_stream_event (the turn's thread).
    wait_text("error")
    assert not gate.is_set()
    gate.set()
    assert outcome.get(timeout=WAIT_S).reason == "interrupted"
    caller.join(WAIT_S)
    assert ask("next").text == "Fresh answer."
    replayed = fake.replayed()
    assert [x["expected"] == x["got"] for x in replayed] == [True] * len(replayed)
    assert json.loads(replayed[2]["got"])["response"]["response"] == {
        "behavior": "deny", "message": "the turn was interrupted", "interrupt": True}
    gen_agent.stop("w")
