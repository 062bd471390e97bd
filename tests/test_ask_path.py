"""The path of one `ask`, as docs/pages/design.md lists it: traced, it stays short and downward.

One `gen_agent.ask` on `MockBackend` runs in a fresh interpreter with a profiler set on every
thread before the agent starts (`sys.setprofile` and `threading.setprofile`), gated on a flag
so that only the second ask is recorded (the first one warms the turn worker and the
watchdog timer, so the traced one takes the path every later ask takes). Every call into a
package file is recorded with the file it came from. Checked:

- the files it touches: at most `MAX_FILES`, and exactly those the design page lists, one
  line each (a newcomer reads the path there);
- no upward call, by the layers of `tests/test_layers.py`: no record, contract or runtime
  module calls an API module or a namespace (the runtime may drive a backend, through the
  contract), and a backend calls only the contract (`TurnContext`) and the records;
- the API calls into the runtime (or back) at most twice per thread hand-off: all of it in
  the caller's thread, none from the agent's or the turn task's.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_layers import layer_of

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "pages" / "design.md"

# Today's path. Twenty-two files before the runtime got its edge (issue 30); the refactor
# first made it 30, and deciding at start what the default path needs brought it to 23: the
# gates stay on it because the watchdog is on by default (600 s), `_size` because every turn
# has byte bounds, `_runtime/durable` because durability is a null object the actor calls
# without asking (no `if store` branches). Lower it when a file leaves the path; never merge
# collaborators to do so.
MAX_FILES = 23
HAND_OFFS = 4  # caller -> agent -> turn task -> agent -> caller

_TRACE = r"""
import json, os, sys, threading
import gen_agent
from gen_agent.backends import mock

PKG = os.path.dirname(gen_agent.__file__)


class Echo(gen_agent.GenAgent):
    def init_agent(self, opts):
        return dict(opts["backend_opts"]), 0

    def handle_response(self, ref, response, state):
        return gen_agent.NoReply(state)


def rel(path):
    return os.path.relpath(path, PKG) if path.startswith(PKG + os.sep) else None


records, threads, on = [], {}, False


def profile(frame, event, arg):
    if not on or event != "call":
        return
    callee = rel(frame.f_code.co_filename)
    if callee is None:
        return
    caller = frame.f_back
    thread = threads.setdefault(threading.get_ident(), len(threads))
    records.append((thread, callee, frame.f_code.co_name,
                    None if caller is None else rel(caller.f_code.co_filename)))


sys.setprofile(profile)
threading.setprofile(profile)
with gen_agent.AgentSystem():
    gen_agent.start_agent(Echo, name="echo", backend=mock.MockBackend,
                          backend_opts={"scripts": [mock.text_turn("ok")] * 2},
                          hibernate_after_ms="infinity")
    assert gen_agent.ask("echo", "warm").text == "ok"
    on = True
    response = gen_agent.ask("echo", "hello")
    on = False
sys.setprofile(None)
threading.setprofile(None)
assert response.text == "ok"
print(json.dumps(records))
"""


def _module(path: str) -> str:
    """`_runtime/turn.py` -> `gen_agent._runtime.turn` (a package's `__init__.py` -> it)."""
    parts = ["gen_agent", *Path(path).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@pytest.fixture(scope="module")
def trace() -> list[tuple[int, str, str, str | None]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("GEN_AGENT_HIBERNATE_AFTER_MS", None)
    done = subprocess.run([sys.executable, "-c", _TRACE], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return [tuple(r) for r in json.loads(done.stdout)]  # type: ignore[misc]


def _listed_files() -> list[str]:
    """The files docs/pages/design.md lists for the path: one list line each, file first."""
    text = DESIGN.read_text()
    section = text.split("## The path of one `ask`", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\s*(?:\d+\.|-)\s+`([\w/]+\.py)`", section, re.MULTILINE)


def _is_backend(module: str) -> bool:
    return module.startswith("gen_agent.backends")


def upward(caller: str, callee: str) -> bool:
    """True if a call from module `caller` into module `callee` goes up the layers."""
    if _is_backend(caller):
        return not (_is_backend(callee) or callee == "gen_agent.backend"
                    or layer_of(callee) == 0)
    if _is_backend(callee):
        return layer_of(caller) != 2  # only the runtime drives a backend (via the contract)
    return layer_of(callee) > layer_of(caller)


def test_the_upward_check_sees_a_violation() -> None:
    assert upward("gen_agent._runtime.agent_actor", "gen_agent._client")
    assert upward("gen_agent._response", "gen_agent._runtime.turn")
    assert upward("gen_agent.backends.mock", "gen_agent._runtime.turn")
    assert upward("gen_agent._client", "gen_agent.backends.mock")
    assert not upward("gen_agent._runtime.turn", "gen_agent.backends.mock")
    assert not upward("gen_agent.backends.mock", "gen_agent._event")
    assert not upward("gen_agent._client", "gen_agent._runtime.calls")


def test_one_ask_touches_few_files_and_the_design_page_lists_them(trace: list) -> None:
    files = {callee for _thread, callee, _fn, _caller in trace}
    assert len(files) <= MAX_FILES, sorted(files)
    listed = _listed_files()
    assert len(listed) == len(set(listed)), "a file is listed twice"
    assert set(listed) == files


def test_no_call_of_one_ask_goes_up_the_layers(trace: list) -> None:
    found = sorted({f"{caller} -> {callee} ({fn})" for _thread, callee, fn, caller in trace
                    if caller is not None and upward(_module(caller), _module(callee))})
    assert found == []


def test_the_api_crosses_into_the_runtime_only_in_the_callers_thread(trace: list) -> None:
    crossings: dict[int, int] = {}
    for thread, callee, _fn, caller in trace:
        if caller is not None and {layer_of(_module(caller)), layer_of(_module(callee))} == {2, 3}:
            crossings[thread] = crossings.get(thread, 0) + 1
    threads = {thread for thread, *_ in trace}
    assert len(threads) == 3  # the caller, the agent, one turn task: HAND_OFFS hand-offs
    assert set(crossings) == {0}  # thread 0 is the caller's (it records first)
    assert crossings[0] <= 2 * HAND_OFFS
    assert crossings[0] == 3  # the lookup, the call's definition, its run
