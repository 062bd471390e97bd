"""Done-when of issue #22: an agent in a child process dies mid-turn (SIGKILL) and a new
process on the same key resumes with exactly the completed turns, without replaying the one
that was running. Asserted on `ScriptedModelServer`'s request log."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gen_agent.store import INTERRUPTED_NOTE, SQLiteStore
from gen_agent.testing._model_server import Reply, ScriptedModelServer
from gen_agent.testing._openai_protocol import openai_base_url

CHILD = Path(__file__).with_name("_child.py")
PROMPTS = ["first question", "second question", "third question", "fourth question"]
ANSWERS = ["first answer", "second answer", "third answer"]


class Child:
    """One child process running `_child.py`; reads its JSON lines with bounded waits."""

    def __init__(self, config: dict[str, Any]) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), json.dumps(config)], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env=env)

    def line(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        text = self.proc.stdout.readline()  # the child prints or exits: never hangs forever
        if not text:
            self.proc.wait(timeout=30)
            assert self.proc.stderr is not None
            raise AssertionError(f"child exited {self.proc.returncode}: "
                                 f"{self.proc.stderr.read()[-2000:]}")
        return json.loads(text)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.close()

    def finish(self) -> list[dict[str, Any]]:
        lines = []
        while True:
            item = self.line()
            lines.append(item)
            if item.get("done"):
                break
        assert self.proc.wait(timeout=30) == 0
        self.close()
        return lines

    def close(self) -> None:
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def crash_and_resume(db: Path, backend: str, opts: dict[str, Any],
                     server: ScriptedModelServer, synchronous: str = "NORMAL",
                     ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Three turns, SIGKILL during the fourth, a new child asks a fifth question."""
    server.enqueue(*(Reply.text(a) for a in ANSWERS), Reply.text("never seen", delay=60.0),
                   Reply.text("fifth answer"))
    config = {"db": str(db), "key": "crash", "backend": backend, "opts": opts,
              "synchronous": synchronous}
    first = Child({**config, "prompts": PROMPTS})
    started = first.line()
    assert (started["resumed"], started["interrupted"]) == (False, None)
    turns = [first.line() for _ in ANSWERS]
    assert [t["text"] for t in turns] == ANSWERS
    server.wait_model_requests(4, timeout=30)  # the fourth turn is on the wire
    first.kill()
    second = Child({**config, "prompts": ["fifth question"]})
    lines = second.finish()
    return turns, lines


def check_resumed(lines: list[dict[str, Any]]) -> None:
    # handle_info runs right after pre_run, before start_agent returns: it prints first.
    info, started, answer = lines[0], lines[1], lines[2]
    assert started["resumed"] is True
    assert started["turns"] == 3  # the agent state came back too (persist_state)
    assert started["interrupted"]["origin"] == "ask"
    assert info["info"]["ref"] == started["interrupted"]["ref"]  # handle_info heard of it
    assert answer["text"] == "fifth answer"


# What the resumed history adds for the turn the kill interrupted: its question, then a note.
CUT = [{"role": "user", "content": "fourth question"},
       {"role": "assistant", "content": INTERRUPTED_NOTE}]


def history(prompts: list[str], answers: list[str]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for prompt, answer in zip(prompts, answers, strict=True):
        messages += [{"role": "user", "content": prompt},
                     {"role": "assistant", "content": answer}]
    return messages


def stateless_opts(server: ScriptedModelServer, provider: str) -> dict[str, Any]:
    """Backend options of `provider` on `server` that resend the whole history each turn."""
    if provider == "anthropic":
        return {"api_key": "test-key", "base_url": server.url, "model": "claude-test"}
    return {"api_key": "test-key", "base_url": openai_base_url(server), "model": "gpt-test",
            "store": False}


# The body key holding the resent history, per provider.
HISTORY_KEY = {"anthropic": "messages", "openai": "input"}


@pytest.mark.parametrize(("provider", "synchronous"), [
    ("anthropic", "NORMAL"), ("anthropic", "FULL"), ("openai", "NORMAL")])
def test_a_stateless_history_resumes_three_completed_turns(
        tmp_path: Path, provider: str, synchronous: str) -> None:
    pytest.importorskip(provider, reason=f"the {provider} extra is not installed")
    with ScriptedModelServer() as server:
        opts = stateless_opts(server, provider)
        _, lines = crash_and_resume(tmp_path / "s.db", provider, opts, server, synchronous)
        check_resumed(lines)
        requests = server.model_requests()
        assert len(requests) == 5
        body = requests[4].body
        expected = [*history(PROMPTS[:3], ANSWERS), *CUT,
                    {"role": "user", "content": "fifth question"}]
        assert body[HISTORY_KEY[provider]] == expected
        assert "previous_response_id" not in body
    record = SQLiteStore(tmp_path / "s.db").load("crash")
    assert record is not None and record.in_flight is None and record.totals.turns == 4


def test_openai_server_state_continues_from_the_third_response(tmp_path: Path) -> None:
    pytest.importorskip("openai", reason="the openai extra is not installed")
    with ScriptedModelServer() as server:
        opts = {"api_key": "test-key", "base_url": openai_base_url(server), "model": "gpt-test",
                "store": True}
        turns, lines = crash_and_resume(tmp_path / "s.db", "openai", opts, server)
        check_resumed(lines)
        body = server.model_requests()[4].body
        third_id = turns[2]["response_id"]
        assert third_id and third_id != turns[1]["response_id"]
        # the interrupted turn goes with it as input items, then the new question
        assert (body["previous_response_id"], body["input"]) == (
            third_id, [*CUT, {"role": "user", "content": "fifth question"}])
