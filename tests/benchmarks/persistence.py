"""7. Persistence cost (issue #22): a turn with a `SQLiteStore` against the same turn without,
at both durability levels (`synchronous=NORMAL`, the default, and `FULL`), interleaved.

Six agents run in one process: {no store, NORMAL, FULL} x {a `MockBackend` turn answering at
once, a loopback `AnthropicAPI` turn against `ScriptedModelServer` on 127.0.0.1}. The durable
agents store their state too (`persist_state = True`, a counter that changes every turn), so a
turn makes all three writes (in-flight marker, conversation record, state). Each round times
`calls` `ask`s of every variant in turn (the harness's interleaved rounds), so machine load
hits them alike; the ratio durable / none is taken per round (value: the round's p50). The
HTTP agents keep a history bounded to `history_messages` messages, so the conversation record
stays the same size over the run.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gen_agent
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.store import SQLiteStore

from ._common import BenchAgent
from ._harness import Measured, figure, latency_us, time_calls_us

NAME = "persistence"
TITLE = "Persistence cost per turn (SQLiteStore vs none, issue #22)"
ORDER = 70
FULL: dict[str, Any] = {"calls": 200, "http_calls": 50, "rounds": 7, "warmup_rounds": 1,
                        "history_messages": 20}
SMOKE: dict[str, Any] = {"calls": 10, "http_calls": 3, "rounds": 2, "warmup_rounds": 1,
                         "history_messages": 4}
LEVELS = ("none", "NORMAL", "FULL")


class DurableBenchAgent(BenchAgent):
    """A `BenchAgent` whose state (a turn counter) is stored after every turn."""

    persist_state = True

    def handle_response(self, ref: Any, response: Any, state: Any) -> gen_agent.NoReply:
        """Count the turn."""
        return gen_agent.NoReply(state + 1)


def _http_backend() -> Any:
    try:
        import anthropic  # noqa: F401 - the SDK the backend needs

        from gen_agent.backends.anthropic import AnthropicAPI
    except ImportError:
        return None
    return AnthropicAPI


@contextlib.contextmanager
def setup(params: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Start the six agents (two stores, one model server) shared by every round."""
    rounds = params["rounds"] + params["warmup_rounds"]
    with tempfile.TemporaryDirectory(prefix="gen_agent-bench-store-") as tmp, \
            contextlib.ExitStack() as stack:
        stores = {level: SQLiteStore(Path(tmp) / f"{level}.db", synchronous=level)
                  for level in LEVELS[1:]}
        for store in stores.values():
            stack.callback(store.close)
        env: dict[str, Any] = {"notes": {}}
        with gen_agent.AgentSystem():
            turn = mock.text_turn("ok")
            for level in LEVELS:
                extra = {} if level == "none" else {"store": stores[level],
                                                    "session_key": f"mock-{level}"}
                env["mock", level] = gen_agent.start_agent(
                    DurableBenchAgent, name=f"mock-{level}", backend=MockBackend,
                    backend_opts={"scripts": [turn] * (rounds * params["calls"])}, **extra)
            http = _http_backend()
            if http is not None:
                from gen_agent.testing._model_server import Reply, ScriptedModelServer

                server = stack.enter_context(ScriptedModelServer(default=Reply.text("ok, noted")))
                opts = {"api_key": "bench", "base_url": server.url, "model": "claude-bench",
                        "max_history_messages": params["history_messages"]}
                for level in LEVELS:
                    extra = {} if level == "none" else {"store": stores[level],
                                                        "session_key": f"http-{level}"}
                    env["http", level] = gen_agent.start_agent(
                        DurableBenchAgent, name=f"http-{level}", backend=http,
                        backend_opts=opts, **extra)
            yield env
            for key, agent in env.items():
                if isinstance(key, tuple) and key[1] != "none":
                    status = agent.status()
                    assert status.store is not None and status.store.last_error is None


def _round(kind: str, level: str) -> Any:
    def one_round(env: dict[str, Any], params: dict[str, Any]) -> Measured | None:
        agent = env.get((kind, level))
        if agent is None:
            env["notes"][f"{kind}_{level.lower()}"] = "the anthropic extra is not installed"
            return None
        calls = params["calls"] if kind == "mock" else params["http_calls"]
        return latency_us(time_calls_us(lambda: agent.ask("x", timeout=60), calls))
    return one_round


_LABELS = {"mock": "mock turn", "http": "loopback AnthropicAPI turn"}
for _kind in ("mock", "http"):
    for _level in LEVELS:
        _peer = None if _level == "none" else f"{_kind}_none"
        _target = "<= 1.2" if (_kind, _level) == ("http", "NORMAL") else None
        _store = "no store" if _level == "none" else f"SQLiteStore {_level}"
        figure(unit="us", label=f"{_LABELS[_kind]}, {_store}", peer=_peer, target=_target,
               key=f"{_kind}_{_level.lower()}",
               note="" if _level != "none" else
               "three writes per turn (marker, conversation, state); FULL fsyncs once")(
            _round(_kind, _level))
