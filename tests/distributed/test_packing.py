"""How a node packs pool outcomes: responses as one MessagePack array when that is exact,
pickled when it is not (no Ray process is needed)."""

from __future__ import annotations

import msgspec

import gen_agent
from gen_agent._portable import PortableError
from gen_agent.backends.mock import MockBackend

from . import agents
from .conftest import ray  # noqa: F401 - Ray's environment is set first

from gen_agent.ray._node import pack, pack_outcomes, unpack, unpack_outcomes, unpack_reply  # isort: skip


class _Point(msgspec.Struct):
    x: int


def _response() -> gen_agent.Response:
    with gen_agent.AgentSystem():
        gen_agent.start_agent(agents.Echo, name="p", backend=MockBackend, prefix="re: ")
        return gen_agent.ask("p", "hello", timeout=10)


def test_responses_cross_exactly_whichever_way_they_are_packed() -> None:
    plain = _response()
    assert plain.text == "re: hello"
    tupled = msgspec.structs.replace(plain, metadata={"pair": (1, 2), "tags": {"a"}})
    parsed = msgspec.structs.replace(plain, parsed=_Point(3))
    packed = pack_outcomes("ok", [(1, ("ok", plain)), (2, ("ok", plain)),
                                  (3, ("error", ("task_crashed", KeyError("k"))))])
    kind, outcomes = unpack_outcomes(packed)
    assert kind == "ok"
    assert dict(outcomes)[1] == ("ok", plain) and dict(outcomes)[2] == ("ok", plain)
    error = dict(outcomes)[3]
    assert error[0] == "error" and error[1][0] == "task_crashed"
    assert isinstance(error[1][1], PortableError) and error[1][1].is_a(KeyError)
    assert unpack(packed)[1] == [1, 2]  # both went in the MessagePack array
    # A tuple, a set or a parsed struct would not survive MessagePack: pickled instead.
    kind, outcomes = unpack_outcomes(pack_outcomes("gone", [(4, ("ok", tupled)),
                                                            (5, ("ok", parsed))]))
    assert kind == "gone"
    assert dict(outcomes) == {4: ("ok", tupled), 5: ("ok", parsed)}
    assert type(dict(outcomes)[4][1].metadata["pair"]) is tuple
    assert type(dict(outcomes)[5][1].parsed) is _Point
    assert unpack_reply(pack(("ok", plain))) == ("ok", plain)
