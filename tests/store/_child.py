"""A child process for the durable-session tests: one agent on a `SQLiteStore`, some turns.

Run as `python _child.py CONFIG_JSON`. CONFIG keys: `db` (the SQLite file), `key` (the
session key), `backend` (`"anthropic"`, `"openai"`, `"claude"`, `"codex"` or `"mock"`),
`opts` (backend options), `prompts` (asked in order), `agents` (how many agents, keys
`key-0`..., default one agent on `key`), `synchronous`, `preamble` (the agent sets
`interrupted_preamble`). Prints one JSON line per event to stdout, flushed:
`{"started": ..., "resumed": ..., "interrupted": ...}` after the start, `{"turn": i, "text":
..., "response_id": ..., "session_id": ...}` after each answered turn, `{"info": ...}` for
what `handle_info` got, and `{"done": true}` at the end.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

import msgspec

import gen_agent
from gen_agent.store import InterruptedTurn, SQLiteStore

_out_lock = threading.Lock()


def emit(**fields: Any) -> None:
    with _out_lock:
        sys.stdout.write(json.dumps(fields, default=str) + "\n")
        sys.stdout.flush()


class Durable(gen_agent.GenAgent):
    persist_state = True

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return dict(opts["backend_opts"]), {"turns": 0, "infos": []}

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return gen_agent.NoReply({**state, "turns": state["turns"] + 1})

    def handle_info(self, message: Any, state: Any) -> Any:
        if isinstance(message, InterruptedTurn):
            emit(info=msgspec.to_builtins(message))
        return gen_agent.NoReply(state)


class Told(Durable):
    interrupted_preamble = True  # config "preamble": an interrupted turn prefixes the next


def _backend(name: str) -> Any:
    if name == "anthropic":
        from gen_agent.backends.anthropic import AnthropicAPI
        return AnthropicAPI
    if name == "openai":
        from gen_agent.backends.openai import OpenAIResponses
        return OpenAIResponses
    if name == "claude":
        from gen_agent.backends.claude import ClaudeCLI
        return ClaudeCLI
    if name == "codex":
        from gen_agent.backends.codex import CodexCLI
        return CodexCLI
    from gen_agent.backends.mock import MockBackend
    return MockBackend


def _mock_opts(turns: int) -> dict[str, Any]:
    from gen_agent.backends import mock
    return {"scripts": [mock.text_turn(f"answer {i}") for i in range(turns)]}


def main() -> int:
    config = json.loads(sys.argv[1])
    store = SQLiteStore(config["db"], synchronous=config.get("synchronous", "NORMAL"))
    backend = _backend(config["backend"])
    prompts = config["prompts"]
    agents = config.get("agents")
    keys = [config["key"]] if agents is None else [f"{config['key']}-{i}" for i in range(agents)]
    failures: list[str] = []
    with gen_agent.AgentSystem():
        for key in keys:
            opts = config.get("opts") or _mock_opts(len(prompts))
            agent = Told if config.get("preamble") else Durable
            gen_agent.start_agent(agent, name=key, backend=backend, store=store,
                                  session_key=key, backend_opts=opts, watchdog_ms=120_000)
            status = gen_agent.status(key)
            if agents is None:
                emit(started=key, resumed=status.store.resumed,
                     interrupted=msgspec.to_builtins(status.store.interrupted_turn),
                     turns=status.agent_state["turns"])
        if agents is None:
            for index, prompt in enumerate(prompts):
                response = gen_agent.ask(keys[0], prompt, timeout=120)
                emit(turn=index, text=response.text, session_id=response.session_id,
                     response_id=response.response_id)
        else:
            def run(key: str) -> None:
                for prompt in prompts:
                    try:
                        gen_agent.ask(key, prompt, timeout=120)
                    except Exception as exc:
                        failures.append(f"{key}: {exc!r} {getattr(exc, 'reason', None)!r}")
            threads = [threading.Thread(target=run, args=(key,)) for key in keys]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            states = {key: gen_agent.status(key).agent_state["turns"] for key in keys}
            errors = {key: gen_agent.status(key).store.last_error for key in keys}
            emit(failures=failures, states=states,
                 store_errors={k: v for k, v in errors.items() if v is not None})
    store.close()
    emit(done=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
