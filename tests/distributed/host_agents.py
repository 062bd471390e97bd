"""The agent the `RayHost` tests activate by key on Ray nodes (pickled by value: the node
processes cannot import the test folder)."""

from __future__ import annotations

import itertools
import os
from typing import Any

import gen_agent
from gen_agent.store import InterruptedTurn

_INCARNATIONS = itertools.count(1)


class Chat(gen_agent.GenAgent):
    """AnthropicAPI against the driver's loopback model server. Each prompt is sent as
    `key|node pid|incarnation|answers so far|question`, so the server sees which incarnation
    of which key, in which process, is in a turn. State (persisted): the answers, and the
    refs of the interrupted turns `handle_info` was told of."""

    persist_state = True

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        self.key = opts["key"]
        self.incarnation = f"{os.getpid()}.{next(_INCARNATIONS)}"
        backend_opts = {"api_key": "test-key", "base_url": opts["url"], "model": "claude-test"}
        return backend_opts, {"answers": [], "interrupted": []}

    def pre_turn(self, prompt: str, state: Any) -> Any:
        line = f"{self.key}|{os.getpid()}|{self.incarnation}|{len(state['answers'])}|{prompt}"
        return gen_agent.Proceed(line, state)

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return gen_agent.NoReply({**state, "answers": [*state["answers"], response.text]})

    def handle_info(self, message: Any, state: Any) -> Any:
        if isinstance(message, InterruptedTurn):
            return gen_agent.NoReply({**state, "interrupted": [*state["interrupted"],
                                                               message.prompt]})
        return gen_agent.NoReply(state)
