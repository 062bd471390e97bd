"""Agents and backends the distributed tests start on Ray nodes (pickled by value: the
node processes cannot import the test folder)."""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any

import gen_agent
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend


def answer(prefix: str = "", session_id: str | None = None, delay_s: float = 0.0) -> Any:
    """A reusable mock script: every prompt is answered `prefix + prompt`."""

    def script(prompt: str) -> Any:
        if delay_s:
            time.sleep(delay_s)  # a turn that takes real time (the pool kill test)
        return mock.text_turn(prefix + prompt, session_id=session_id)

    return script


class ResumableMock(MockBackend):
    """MockBackend that can resume: the resumed session answers `"resumed <id>: " + prompt`."""

    @classmethod
    def resume_session(cls, session_id: str, opts: Any) -> Any:
        return cls.start_session({"scripts": [answer(f"resumed {session_id}: ", session_id)] * 100,
                                  "session_id": session_id})


class Echo(gen_agent.GenAgent):
    """Answers with its script; the prompt "crash" makes handle_response raise (the agent
    dies: a callback crash). Option `child`: spawn a `sleep` in its own process group (a
    stand-in for a CLI child) and keep its pid in the state."""

    def init_agent(self, opts: dict[str, Any]) -> Any:
        state: dict[str, Any] = {"turns": 0, "node_pid": os.getpid()}
        if opts.get("child"):
            child = subprocess.Popen(["sleep", "120"], start_new_session=True)
            state["child_pid"] = child.pid
        script = answer(opts.get("prefix", ""), opts.get("session_id"), opts.get("delay_s", 0.0))
        scripts = opts.get("scripts") or [script] * 10_000  # a mock pops one per turn
        return {"scripts": scripts}, state

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        if response.prompt == "crash":
            raise ValueError("crash requested")
        return gen_agent.NoReply({**state, "turns": state["turns"] + 1})


class Counter(gen_agent.GenAgent):
    """Counts its turns in a state the session store keeps (`persist_state`)."""

    persist_state = True

    def init_agent(self, opts: dict[str, Any]) -> Any:
        return {"scripts": [answer()] * 100}, {"turns": 0}

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return gen_agent.NoReply({"turns": state["turns"] + 1})


class PassThrough(gen_agent.GenAgent):
    """Takes `opts["backend_opts"]` as its backend options (a CLI backend's, say)."""

    def init_agent(self, opts: dict[str, Any]) -> Any:
        return opts["backend_opts"], None

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return gen_agent.NoReply(state)
