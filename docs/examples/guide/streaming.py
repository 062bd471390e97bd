"""Streaming a turn, from a thread and from an event loop.

Run it: `python docs/examples/guide/streaming.py`.
"""

from __future__ import annotations

import asyncio

import gen_agent
from gen_agent import GenAgent, NoReply, aio
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend


class Writer(GenAgent):
    def init_agent(self, opts):
        return {"scripts": opts["scripts"]}, {"turns": 0}

    def handle_response(self, ref, response, state):
        return NoReply({"turns": state["turns"] + 1})


def main() -> None:
    scripts = [mock.text_turn(["Once ", "upon ", "a ", "time."]),
               mock.text_turn(["The ", "end."], usage={"output_tokens": 2})]
    gen_agent.start_agent(Writer, name="writer", backend=MockBackend, scripts=scripts)

    # --8<-- [start:threaded]
    with gen_agent.stream("writer", "Tell a story.") as turn:
        for event in turn:                     # Event records, as the backend streams them
            if event.kind == "text":
                print(event.data["text"], end="", flush=True)
    print()
    print("turns:", gen_agent.status("writer").agent_state["turns"])
    # --8<-- [end:threaded]

    # --8<-- [start:async]
    async def tell_the_end() -> None:
        async with aio.stream("writer", "And then?") as turn:
            async for event in turn:
                if event.kind == "text":
                    print(event.data["text"], end="", flush=True)
            response = await turn.response()
        print()
        print("usage:", response.usage)
        print("turns:", (await aio.status("writer")).agent_state["turns"])

    asyncio.run(tell_the_end())
    # --8<-- [end:async]
    gen_agent.stop("writer")


if __name__ == "__main__":
    main()
