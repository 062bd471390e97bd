"""The HTTP backends against the loopback `ScriptedModelServer`: answers and errors, offline.

Run it: `python docs/examples/guide/offline_backends.py` (needs the `anthropic` and `openai`
extras, both in the `test` extra).
"""

from __future__ import annotations

import gen_agent
from gen_agent import GenAgent, NoReply
from gen_agent.backends.anthropic import AnthropicAPI
from gen_agent.backends.openai import OpenAIResponses
from gen_agent.testing import Reply, ScriptedModelServer
from gen_agent.testing._openai_protocol import openai_base_url


class Helper(GenAgent):
    def init_agent(self, opts):
        return opts["backend_opts"], None

    def handle_response(self, ref, response, state):
        return NoReply(state)


def run() -> list[tuple]:
    seen = []
    # --8<-- [start:offline]
    script = [
        Reply.text("Hello from the scripted server."),
        Reply.http_error(429, "slow down", retry_after="2"),
    ]
    with ScriptedModelServer(script * 2) as server, gen_agent.AgentSystem():
        backends = {
            "anthropic": (AnthropicAPI, {"base_url": server.url}),
            "openai": (OpenAIResponses, {"base_url": openai_base_url(server)}),
        }
        for name, (backend, opts) in backends.items():
            agent = gen_agent.start_agent(
                Helper, name=name, backend=backend,
                backend_opts={**opts, "api_key": "offline", "model": "scripted-model"})
            response = agent.ask("Say hello.", timeout=30)
            try:
                agent.ask("Again!", timeout=30)
            except gen_agent.TurnError as exc:
                error = exc.reason                    # a BackendError, compared by fields
            print(name, response.text, response.provider,
                  (error.kind, error.status, error.retryable, error.retry_after))
            # anthropic Hello from the scripted server. anthropic ('rate_limited', 429, True, '2')
            # openai Hello from the scripted server. openai ('rate_limited', 429, True, '2')
            # --8<-- [end:offline]
            seen.append((name, response.text, response.provider, error.kind, error.status,
                         error.retryable, error.retry_after))
    return seen


if __name__ == "__main__":
    run()
