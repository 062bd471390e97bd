"""Getting started: a first agent, a first ask, and the same agent on a real client.

Run it: `python docs/examples/guide/first_agent.py` (the second half needs the `anthropic`
extra: `pip install 'gen-agent[anthropic]'`).
"""

from __future__ import annotations

import queue

import gen_agent
from gen_agent import GenAgent, NoReply
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend


# --8<-- [start:agent]
class NoteTaker(GenAgent):
    """Answers prompts and remembers every answer."""

    def init_agent(self, opts):
        # (backend options, initial state): the options go to the backend's start_session.
        return opts["backend_opts"], []

    def handle_response(self, ref, response, notes):
        # After each successful turn: keep the answer and go idle.
        return NoReply([*notes, response.text])
# --8<-- [end:agent]


def first_ask() -> tuple[str, list[str]]:
    # --8<-- [start:first-ask]
    scripts = [mock.text_turn("Paris."), mock.text_turn("About 2.1 million.")]
    with gen_agent.AgentSystem():                  # stops its agents when the block ends
        gen_agent.start_agent(NoteTaker, name="notes", backend=MockBackend,
                              backend_opts={"scripts": scripts})
        response = gen_agent.ask("notes", "What is the capital of France?", timeout=30)
        print(response.text)                       # Paris.

        ref = gen_agent.tell("notes", "How many people live there?")  # returns at once
        done: queue.Queue = queue.Queue()
        gen_agent.tell_with_completion("notes", "Anything else?", done)
        print(gen_agent.poll("notes", ref).status)  # "pending" or "completed"
        print(done.get(timeout=30)[4])              # ('error', 'no_script'): scripts ran out

        notes = gen_agent.status("notes").agent_state
    # --8<-- [end:first-ask]
    return response.text, notes


def first_ask_on_a_real_client() -> str:
    # --8<-- [start:scripted]
    from gen_agent.backends.anthropic import AnthropicAPI
    from gen_agent.testing import Reply, ScriptedModelServer

    with ScriptedModelServer([Reply.text("Bonjour !")]) as server, gen_agent.AgentSystem():
        gen_agent.start_agent(NoteTaker, name="notes", backend=AnthropicAPI,
                              backend_opts={"base_url": server.url, "api_key": "offline",
                                            "model": "scripted-model"})
        response = gen_agent.ask("notes", "Say hello in French.", timeout=30)
        request = server.model_requests()[0]
    print(response.text, response.usage)           # Bonjour ! {'input_tokens': 10, ...}
    print(request.body["messages"])                # [{'role': 'user', 'content': 'Say...'}]
    # --8<-- [end:scripted]
    return response.text


def main() -> None:
    first_ask()
    first_ask_on_a_real_client()


if __name__ == "__main__":
    main()
