"""CodexCLI in app-server mode (`mode="app_server"`): the real `codex app-server` (from npm)
against `ScriptedModelServer` on 127.0.0.1, one process per agent session, driven over
JSON-RPC. Skipped, with what to install, where the CLI is absent (see
test_codex_real_cli.py, whose helpers these tests share)."""

from __future__ import annotations

import os
import queue
import signal
from pathlib import Path
from typing import Any

import _agents as agents

import gen_agent
from gen_agent.backends.codex import CodexCLI
from gen_agent.backends.warm import WarmExited
from gen_agent.testing._model_server import Reply, ScriptedModelServer

from .conftest import process_group_alive, wait_until
from .test_codex_real_cli import (
    REAL_CODEX,
    THREAD_ID,
    WAIT_S,
    assistant_texts,
    loopback_options,
    user_texts,
)

pytestmark = REAL_CODEX


class AppAgent(gen_agent.GenAgent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        self.infos = opts["infos"]
        return opts["backend_opts"], None

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return gen_agent.NoReply(state)

    def handle_info(self, message: Any, state: Any) -> Any:
        self.infos.put(message)
        return gen_agent.NoReply(state)


def start(name: str, server: ScriptedModelServer, tmp_path: Path, **extra: Any) -> queue.Queue:
    options = loopback_options(server, tmp_path, mode="app_server", **extra)
    infos: queue.Queue[Any] = queue.Queue()
    agents.start(AppAgent, name, backend=CodexCLI, backend_opts=options, infos=infos)
    return infos


def pid_of(name: str) -> int | None:
    return gen_agent.backend_session(name, timeout=WAIT_S).pid


def test_three_turns_on_one_process_and_one_thread(server: ScriptedModelServer, tmp_path: Path):
    server.enqueue(*(Reply.text(f"Answer {i}.", input_tokens=20 + i, output_tokens=4)
                     for i in range(3)))
    start("app", server, tmp_path)
    responses, pids = [], []
    for i in range(3):
        responses.append(gen_agent.ask("app", f"Question {i}.", timeout=WAIT_S))
        pids.append(pid_of("app"))
    assert [r.text for r in responses] == ["Answer 0.", "Answer 1.", "Answer 2."]
    assert len(set(pids)) == 1 and pids[0] is not None
    thread = responses[0].session_id
    assert thread is not None and THREAD_ID.match(thread)
    assert {r.session_id for r in responses} == {thread}
    assert (responses[0].provider, responses[0].model) == ("codex", "gpt-test")
    assert responses[1].usage is not None and responses[1].usage["input_tokens"] == 21  # per turn
    last = server.model_requests()[2].body
    assert user_texts(last)[-3:] == ["Question 0.", "Question 1.", "Question 2."]
    assert assistant_texts(last) == ["Answer 0.", "Answer 1."]
    gen_agent.stop("app")
    assert wait_until(lambda: not process_group_alive(pids[0]), WAIT_S)


def test_interrupt_then_a_clean_turn_on_the_same_process(
    server: ScriptedModelServer, tmp_path: Path
):
    server.enqueue(Reply.text("warm up"), Reply.text("too late", delay=60.0),
                   Reply.text("After the interrupt."))
    start("app-int", server, tmp_path)
    gen_agent.ask("app-int", "warm up", timeout=WAIT_S)
    pid = pid_of("app-int")
    request = gen_agent.tell("app-int", "take your time")
    server.wait_model_requests(2, timeout=WAIT_S)
    gen_agent.interrupt("app-int")
    assert wait_until(lambda: gen_agent.poll("app-int", request).status == "failed", WAIT_S)
    assert gen_agent.poll("app-int", request).reason == "interrupted"
    after = gen_agent.ask("app-int", "again", timeout=WAIT_S)
    assert after.text == "After the interrupt."
    assert pid_of("app-int") == pid  # the process survived the interrupt
    gen_agent.stop("app-int")


def test_a_process_killed_between_turns_resumes_the_thread(
    server: ScriptedModelServer, tmp_path: Path
):
    server.enqueue(Reply.text("The word is plum."), Reply.text("You asked about plum."))
    infos = start("app-kill", server, tmp_path)
    first = gen_agent.ask("app-kill", "Remember a word.", timeout=WAIT_S)
    pid = pid_of("app-kill")
    assert pid is not None
    os.killpg(pid, signal.SIGKILL)
    exited = infos.get(timeout=WAIT_S)
    while not isinstance(exited, WarmExited):  # e.g. a late notification (WarmOutput)
        exited = infos.get(timeout=WAIT_S)
    assert (exited.backend, exited.pid, exited.exit_code) == ("codex", pid, -signal.SIGKILL)
    second = gen_agent.ask("app-kill", "Which word?", timeout=WAIT_S)
    assert second.text == "You asked about plum."
    assert second.session_id == first.session_id  # thread/resume
    assert pid_of("app-kill") != pid
    assert assistant_texts(server.model_requests()[1].body) == ["The word is plum."]
    gen_agent.stop("app-kill")


class Approving(AppAgent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        self.answers = opts["answers"]
        self.seen = opts["seen"]
        return super().init_agent(opts)

    def handle_tool_permission(self, request: Any, state: Any) -> Any:
        self.seen.append(request)
        return self.answers.pop(0)


def test_approvals_go_to_handle_tool_permission(server: ScriptedModelServer, tmp_path: Path):
    from gen_agent._permission import Allow, Deny

    work = tmp_path / "work"
    server.enqueue(
        Reply.tool_use("exec_command", {"cmd": "touch marker-one"}, id="call_1"),
        Reply.text("Made it."),
        Reply.tool_use("exec_command", {"cmd": "touch marker-two"}, id="call_2"),
        Reply.text("Was not allowed."),
    )
    seen: list[Any] = []
    options = loopback_options(server, tmp_path, mode="app_server", approval_policy="untrusted")
    gen_agent.start_agent(Approving, name="app-perm", backend=CodexCLI, backend_opts=options,
                          infos=queue.Queue(), answers=[Allow(), Deny("no")], seen=seen)
    first = gen_agent.ask("app-perm", "make one", timeout=WAIT_S)
    assert (work / "marker-one").exists()  # allowed: the command really ran
    assert [e.data["decision"] for e in first.events if e.kind == "permission"] == ["allow"]
    second = gen_agent.ask("app-perm", "make two", timeout=WAIT_S)
    assert not (work / "marker-two").exists()  # declined: it did not run
    assert [e.data["decision"] for e in second.events if e.kind == "permission"] == ["deny"]
    assert [(r.backend, r.tool_name) for r in seen] == [("codex", "commandExecution")] * 2
    assert "marker-one" in str(seen[0].input.get("command"))
    gen_agent.stop("app-perm")
