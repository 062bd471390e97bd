"""Writing your own backend: a small, complete one that echoes prompts word by word.

Run it: `python docs/examples/guide/echo_backend.py`.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, replace

import gen_agent
from gen_agent import Backend, DispatchError, Event, GenAgent, NoReply, SessionStartError


# --8<-- [start:backend]
@dataclass(frozen=True)
class EchoSession:
    """All state lives in the session; the backend class has none."""

    prefix: str
    word_delay_s: float
    session_id: str
    turns: int = 0


class EchoBackend(Backend):
    """Replies `prefix + prompt`, streamed one word per `"text"` event."""

    OPTIONS = frozenset({"prefix", "word_delay_s"})

    @classmethod
    def start_session(cls, opts):
        # Agent thread, at start: validate everything here, so a bad option fails start_agent.
        unknown = sorted(set(opts) - cls.OPTIONS)
        if unknown:
            raise SessionStartError(("unknown_option", unknown[0]),
                                    f"EchoBackend options are {sorted(cls.OPTIONS)}")
        return EchoSession(prefix=opts.get("prefix", "echo: "),
                           word_delay_s=opts.get("word_delay_s", 0.0),
                           session_id=f"echo-{secrets.token_hex(4)}")

    @classmethod
    def prompt(cls, session, prompt, context):
        # Turn task thread. A failure before anything is sent is a DispatchError; once the
        # stream runs, a failure is a terminal "error" event.
        if not prompt.strip():
            raise DispatchError("empty_prompt")
        return cls._stream(session, prompt, context), session

    @classmethod
    def _stream(cls, session, prompt, context):
        words = (session.prefix + prompt).split(" ")
        for index, word in enumerate(words):
            # Threads cannot be killed: a long stream checks its cancel signal (set on
            # interrupt, watchdog and stop) and ends itself.
            if context.wait_cancelled(session.word_delay_s):
                yield Event.new("error", {"reason": "cancelled"})
                return
            yield Event.new("text", {"text": word if index == 0 else " " + word})
        yield Event.new("usage", {"input_tokens": len(prompt.split()),
                                  "output_tokens": len(words)})
        yield Event.new("result", {"session_id": session.session_id})   # exactly one terminal

    @classmethod
    def update_session(cls, session, result_data):
        # Optional. Turn task thread, after each successful turn.
        return replace(session, turns=session.turns + 1)

    @classmethod
    def cancel(cls, session):
        # Optional. Agent thread, on interrupt / watchdog / stop: must be quick. The stream
        # above watches `context.cancel_event`, so nothing else to do here; a CLI backend
        # kills its process group, an HTTP backend closes its connection.
        return None

    @classmethod
    def terminate_session(cls, session):
        # Agent thread, when the agent stops; idempotent. Nothing to release here.
        return None
# --8<-- [end:backend]


class Repeater(GenAgent):
    def init_agent(self, opts):
        return opts["backend_opts"], None

    def handle_response(self, ref, response, state):
        return NoReply(state)


def main() -> None:
    # --8<-- [start:use]
    with gen_agent.AgentSystem():
        agent = gen_agent.start_agent(Repeater, name="echo", backend=EchoBackend,
                                      backend_opts={"prefix": "you said: "})
        response = agent.ask("hello there", timeout=30)
        print(response.text, response.usage, response.session_id.startswith("echo-"))
        # you said: hello there {'input_tokens': 2, 'output_tokens': 4} True
        try:
            agent.ask(" ", timeout=30)
        except gen_agent.TurnError as exc:
            print(exc.reason)                          # empty_prompt
    # --8<-- [end:use]
    started = time.monotonic()
    with gen_agent.AgentSystem():
        agent = gen_agent.start_agent(Repeater, name="slow", backend=EchoBackend,
                                      backend_opts={"word_delay_s": 60}, watchdog_ms=100)
        try:
            agent.ask("this would take minutes", timeout=30)
        except gen_agent.TurnError as exc:
            print(exc.reason, time.monotonic() - started < 30)   # timeout True


if __name__ == "__main__":
    main()
