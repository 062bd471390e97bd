"""`AgentHost`: activation by key, deactivation when idle, one agent per key, rejoinable
streams, spend caps over the host, and the data lifecycle."""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from _agents import Scripted

import gen_agent
from gen_agent import AgentHost, AgentSystem, GenAgent, NoReply, Proceed
from gen_agent._accounting import BudgetExceeded
from gen_agent._errors import AgentNotFound, RequestError, TurnError
from gen_agent._event import Event
from gen_agent._status import Status
from gen_agent.backends.mock import MockBackend, gate, text_turn
from gen_agent.store import MemoryStore, SessionRecord, SQLiteStore

INCARNATIONS = itertools.count(1)


class Witness:
    """The fake model's own record of which incarnation of each key is in a turn: it must
    never see two at once, nor an older incarnation after a newer one (independent of the
    leases that enforce it)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight: dict[str, int] = {}
        self.newest: dict[str, int] = {}
        self.seen: dict[str, set[int]] = {}
        self.violations: list[str] = []
        self.turns = 0

    def enter(self, key: str, incarnation: int) -> None:
        with self.lock:
            self.turns += 1
            if key in self.in_flight:
                self.violations.append(f"{key}: {self.in_flight[key]} and {incarnation}")
            if incarnation < self.newest.get(key, 0):
                self.violations.append(f"{key}: {incarnation} after {self.newest[key]}")
            self.in_flight[key] = incarnation
            self.seen.setdefault(key, set()).add(incarnation)
            self.newest[key] = max(incarnation, self.newest.get(key, 0))

    def leave(self, key: str) -> None:
        with self.lock:
            self.in_flight.pop(key, None)


def model(witness: Witness) -> Any:
    """A fake model: the prompt is `key|pid|incarnation|history|question`; the reply names
    the key, the question and how many answers the agent's state held."""

    def answer(prompt: str) -> Iterator[Event]:
        key, _pid, incarnation, history, question = prompt.split("|")
        witness.enter(key, int(incarnation))
        try:
            yield from text_turn(f"{key}:{question}:{history}")
        finally:
            witness.leave(key)

    return answer


class Chat(GenAgent):
    """State: the answers so far (persisted, so it survives deactivation)."""

    persist_state = True

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        self.key = opts["key"]
        self.incarnation = next(INCARNATIONS)
        backend_opts = {"fallback": opts["model"]} if "model" in opts else {}
        return backend_opts, []

    def pre_turn(self, prompt: str, state: Any) -> Proceed:
        return Proceed(f"{self.key}|{os.getpid()}|{self.incarnation}|{len(state)}|{prompt}",
                       state)

    def handle_response(self, ref: Any, response: Any, state: Any) -> NoReply:
        return NoReply([*state, response.text])


@pytest.fixture
def system() -> Iterator[AgentSystem]:
    with AgentSystem() as system:
        yield system


def wait_until(predicate: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return predicate()


# ---------------------------------------------------------------------- activation
def test_first_message_activates_and_init_agent_sees_the_key(system: AgentSystem) -> None:
    witness = Witness()
    with AgentHost(Chat, backend=MockBackend, agent_system=system, model=model(witness)) as host:
        assert host.ask("alice", "q1").text == "alice:q1:0"
        assert host.ask("alice", "q2").text == "alice:q2:1"
        assert host.ask("bob", "q1").text == "bob:q1:0"
        assert sorted(host.live_keys()) == ["alice", "bob"]
        assert host.host_status().activations == 2
        assert gen_agent.whereis((host.name, "alice"), agent_system=system) is not None


def test_a_deactivated_key_resumes_its_state_from_the_store(system: AgentSystem) -> None:
    witness = Witness()
    with AgentHost(Chat, backend=MockBackend, agent_system=system, model=model(witness),
                   deactivate_after_ms=0) as host:
        assert host.ask("k", "q1").text == "k:q1:0"
        assert wait_until(lambda: host.live_keys() == [])
        record = host.status("k")
        assert isinstance(record, SessionRecord) and record.totals.turns == 1
        assert host.ask("k", "q2").text == "k:q2:1"  # a new incarnation, same conversation
        assert host.host_status().activations == 2
        assert len(witness.seen["k"]) == 2 and witness.violations == []


def test_pending_work_keeps_an_agent_live(system: AgentSystem) -> None:
    started, release = threading.Event(), threading.Event()

    def slow_first(prompt: str) -> list[Event]:
        if prompt == "first":
            started.set()
            assert release.wait(5)
        return text_turn("t")

    class Plain(Chat):
        pre_turn = GenAgent.pre_turn

    with AgentHost(Plain, backend=MockBackend.with_options(fallback=slow_first),
                   agent_system=system, deactivate_after_ms=0) as host:
        ref = host.tell("k", "first")
        assert started.wait(5)
        assert host.deactivate("k") is False  # a turn runs
        release.set()
        assert wait_until(lambda: host.poll("k", ref).status == "completed")
        assert wait_until(lambda: host.live_keys() == [])  # the result was read: idle
        ref2 = host.tell("k", "second")
        assert wait_until(lambda: host.status("k").__class__ is Status
                          and host.status("k").current_request is None)  # type: ignore[union-attr]
        swept = host.host_status().sweeps
        assert wait_until(lambda: host.host_status().sweeps >= swept + 2)
        assert host.live_keys() == ["k"]  # idle checks passed it over: its result is unread
        assert host.poll("k", ref2).status == "completed"
        assert wait_until(lambda: host.live_keys() == [])


def test_a_send_after_timer_keeps_the_agent_live_until_it_fired(system: AgentSystem) -> None:
    seen: queue.Queue[Any] = queue.Queue()

    class Timed(Chat):
        def handle_info(self, message: Any, state: Any) -> NoReply:
            seen.put(message)
            return NoReply(state)

    with AgentHost(Timed, backend=MockBackend, agent_system=system,
                   deactivate_after_ms=0) as host:
        timer = host.send_after("k", "tick", 60_000)
        swept = host.host_status().sweeps
        assert wait_until(lambda: host.host_status().sweeps >= swept + 2)
        assert host.live_keys() == ["k"]  # idle checks passed it over: a timer is pending
        timer.cancel()
        assert wait_until(lambda: host.live_keys() == [])
        host.send_after("k", "tick", 50)
        assert seen.get(timeout=5) == "tick"
        assert wait_until(lambda: host.live_keys() == [])


def test_casts_and_status_never_activate(system: AgentSystem) -> None:
    with AgentHost(Chat, backend=MockBackend, agent_system=system) as host:
        host.interrupt("nobody")
        host.halt("nobody")
        host.resume("nobody")
        host.send("nobody", "hi")
        assert host.status("nobody") is None
        assert host.poll("nobody", gen_agent.RequestRef.new()).reason == "not_found"
        assert host.live_keys() == [] and host.host_status().activations == 0


def test_a_halted_agent_stays_halted_across_deactivation(system: AgentSystem) -> None:
    witness = Witness()
    with AgentHost(Chat, backend=MockBackend, agent_system=system, model=model(witness)) as host:
        assert host.ask("k", "q1").text == "k:q1:0"
        host.halt("k")
        assert wait_until(lambda: host.status("k").halted)  # type: ignore[union-attr]
        assert host.deactivate("k") is True
        assert host.live_keys() == []
        ref = host.tell("k", "q2")  # activates halted: the tell waits for resume
        status = host.status("k")
        assert isinstance(status, Status) and status.halted
        assert host.poll("k", ref).status == "pending"
        host.resume("k")
        assert wait_until(lambda: host.poll("k", ref).status == "completed")
        assert host.poll("k", ref).response.text == "k:q2:1"  # type: ignore[union-attr]


def test_max_live_deactivates_the_least_recently_used(system: AgentSystem) -> None:
    witness = Witness()
    with AgentHost(Chat, backend=MockBackend, agent_system=system, model=model(witness),
                   max_live=2) as host:
        host.ask("a", "q")
        host.ask("b", "q")
        host.ask("a", "q")  # b is now the least recently used
        host.ask("c", "q")
        assert sorted(host.live_keys()) == ["a", "c"]
        assert host.ask("b", "q").text == "b:q:1"  # resumed


def test_max_live_with_every_agent_busy_fails_overloaded(system: AgentSystem) -> None:
    g = gate(text_turn("slow"))
    with AgentHost(Chat, backend=MockBackend.with_options(scripts=[g]),
                   agent_system=system, max_live=1) as host:
        host.tell("a", "busy")
        assert g.wait_blocked(5)
        with pytest.raises(TurnError) as caught:
            host.ask("b", "q")
        kind, info = caught.value.reason
        assert kind == "overloaded" and (info.live, info.max_live) == (1, 1)
        g.release()


def test_racing_callers_on_a_new_key_get_one_agent(system: AgentSystem) -> None:
    witness = Witness()
    with AgentHost(Chat, backend=MockBackend, agent_system=system, model=model(witness)) as host:
        start = threading.Barrier(8)

        def one(_i: int) -> str:
            start.wait(5)
            return host.ask("shared", "q").text

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(one, range(8)))
        assert host.host_status().activations == 1
        assert sorted(int(a.rsplit(":", 1)[1]) for a in answers) == list(range(8))
        assert witness.violations == []


def test_a_crashed_agent_restarts_on_its_next_message(system: AgentSystem) -> None:
    class Fragile(Chat):
        def handle_response(self, ref: Any, response: Any, state: Any) -> NoReply:
            if response.text.split(":")[1] == "crash":
                raise RuntimeError("boom")
            return super().handle_response(ref, response, state)

    witness = Witness()
    with AgentHost(Fragile, backend=MockBackend, agent_system=system,
                   model=model(witness)) as host:
        assert host.ask("k", "q1").text == "k:q1:0"
        with pytest.raises(gen_agent.AgentDown):
            host.ask("k", "crash")
        assert host.ask("k", "q2").text == "k:q2:1"  # the stored state of the last good turn
        assert host.host_status().activations == 2


def test_bad_input_is_refused_before_activation(system: AgentSystem) -> None:
    with AgentHost(Chat, backend=MockBackend, agent_system=system) as host:
        with pytest.raises(TypeError):
            host.ask("k", 42)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            host.ask(7, "q")  # type: ignore[arg-type]
        assert host.live_keys() == []
    with pytest.raises(ValueError, match="session_key"):
        AgentHost(Chat, backend=MockBackend, agent_system=system, session_key="x")
    with pytest.raises(ValueError, match="max_live"):
        AgentHost(Chat, backend=MockBackend, agent_system=system, max_live=0)


# ---------------------------------------------------------------------- rejoinable streams
def test_a_reader_rejoins_mid_turn_and_sees_every_event_once(system: AgentSystem) -> None:
    steps = [threading.Event() for _ in range(3)]

    def slow(_prompt: str) -> Iterator[Event]:
        for i, step in enumerate(steps):
            yield Event.new("text", {"text": f"{i}a "})
            yield Event.new("text", {"text": f"{i}b "})
            assert step.wait(5)
        yield Event.new("result", {"text": "done"})

    class Slow(Chat):
        def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
            return {"fallback": slow}, []

        pre_turn = GenAgent.pre_turn

    with AgentHost(Slow, backend=MockBackend, agent_system=system) as host:
        seen: list[tuple[int, str]] = []
        with host.stream("k", "go", interrupt_on_exit=False) as turn:
            for event in turn:
                seen.append((turn.seq, event.data["text"]))
                if turn.seq == 2:
                    break  # the connection drops after two events
            ref, last = turn.ref, turn.seq
        assert ref is not None
        steps[0].set()
        readers = [host.attach("k", ref, after=last), host.attach("k", ref, after=0)]
        with readers[0] as rejoined, readers[1] as second:
            it = iter(rejoined)
            event = next(it)
            seen.append((rejoined.seq, event.data["text"]))
            steps[1].set()
            steps[2].set()
            for event in it:
                seen.append((rejoined.seq, event.data["text"]))
            everything = [(second.seq, e.data["text"]) for e in second]
            assert rejoined.response.text == "done" and second.response.text == "done"
            assert rejoined.missed == 0
    texts = [f"{i}{c} " for i in range(3) for c in "ab"] + ["done"]  # the result event too
    assert seen == [(n + 1, t) for n, t in enumerate(texts)]  # each once, in order
    assert [t for _, t in everything] == texts and [n for n, _ in everything] == list(range(1, 8))


def test_attach_to_a_finished_turn_replays_it_and_unknown_refs_fail(system: AgentSystem) -> None:
    witness = Witness()
    with AgentHost(Chat, backend=MockBackend, agent_system=system, model=model(witness)) as host:
        with host.stream("k", "q1") as turn:
            first = [e.data["text"] for e in turn]
        with host.attach("k", turn.ref, after=0) as again:  # type: ignore[arg-type]
            assert [e.data["text"] for e in again] == first
            assert again.response.text == "k:q1:0"
        with pytest.raises(RequestError) as caught, host.attach("k", gen_agent.RequestRef.new()):
            pass
        assert caught.value.reason == "not_found"
        with pytest.raises(AgentNotFound), host.attach("nobody", turn.ref):  # type: ignore[arg-type]
            pass
        with pytest.raises(ValueError):
            gen_agent.attach("x", turn.ref, after=-1)  # type: ignore[arg-type]


def test_the_replay_buffer_is_dropped_at_hibernation(system: AgentSystem) -> None:
    witness = Witness()
    with AgentHost(Chat, backend=MockBackend, agent_system=system, model=model(witness),
                   hibernate_after_ms=0) as host:
        ref = host.tell("k", "q1")
        assert wait_until(lambda: host.poll("k", ref).status == "completed")
        handle = gen_agent.whereis((host.name, "k"), agent_system=system)._handle  # type: ignore[union-attr]
        assert wait_until(lambda: handle.hibernated)
        with pytest.raises(RequestError), host.attach("k", ref):
            pass


# ---------------------------------------------------------------------- spend caps
def test_a_host_wide_token_cap_refuses_new_turns_of_every_key(system: AgentSystem) -> None:
    turn = text_turn("x", usage={"input_tokens": 6, "output_tokens": 4})
    with AgentHost(Chat, backend=MockBackend.with_options(fallback=turn), agent_system=system,
                   max_total_tokens=25) as host:
        for key in ("a", "b", "c"):
            host.ask(key, "q")  # 30 tokens in all: the third turn ran past the cap
        for key in ("a", "d"):
            with pytest.raises(TurnError) as caught:
                host.ask(key, "q")
            kind, info = caught.value.reason
            assert kind == "budget_exceeded" and isinstance(info, BudgetExceeded)
            assert (info.limit, info.spent) == ("tokens", 30)


# ---------------------------------------------------------------------- data lifecycle
def test_forget_deletes_a_key_and_expire_applies_retention(system: AgentSystem) -> None:
    witness = Witness()
    store = MemoryStore()
    with AgentHost(Chat, backend=MockBackend, agent_system=system, model=model(witness),
                   store=store) as host:
        host.ask("a", "q1")
        host.ask("b", "q1")
        assert host.forget("a") is True
        assert host.live_keys() == ["b"] and store.load("a") is None
        assert host.ask("a", "q2").text == "a:q2:0"  # a new conversation
        host.deactivate("a")
        host.deactivate("b")
        assert host.expire(1.0) == []  # written just now
        with pytest.raises(ValueError):
            host.expire(0)
        real = time.time
        try:
            time.time = lambda: real() + 2 * 86_400  # type: ignore[assignment]
            assert sorted(host.expire(1.0)) == ["a", "b"]
        finally:
            time.time = real  # type: ignore[assignment]
        assert store.list_keys() == []


# ---------------------------------------------------------------------- proof at scale
def test_a_thousand_keys_over_fifty_live_agents(system: AgentSystem) -> None:
    witness = Witness()
    keys = [f"user-{i}" for i in range(1_000)]
    order = keys * 3
    random.Random(36).shuffle(order)
    done: dict[str, int] = dict.fromkeys(keys, 0)
    locks = {key: threading.Lock() for key in keys}
    wrong: list[str] = []
    most_live = [0]
    with AgentHost(Chat, backend=MockBackend, agent_system=system, model=model(witness),
                   max_live=50, deactivate_after_ms=20, hibernate_after_ms=0) as host:

        def one(key: str) -> None:
            with locks[key]:
                n = done[key]
                text = host.ask(key, f"q{n + 1}", timeout=30).text
                if text != f"{key}:q{n + 1}:{n}":
                    wrong.append(text)
                done[key] = n + 1
            most_live[0] = max(most_live[0], host.host_status().live)

        def attempt(key: str) -> None:
            for _ in range(200):  # all 50 busy: the host says so; wait and try again
                try:
                    return one(key)
                except TurnError as exc:
                    if exc.reason[0] != "overloaded":
                        raise
                    time.sleep(0.001)
            raise AssertionError("overloaded for too long")

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(attempt, order))
        status = host.host_status()
    assert wrong == [] and witness.violations == []
    assert set(done.values()) == {3} and witness.turns == 3_000
    assert most_live[0] <= 50
    assert status.activations >= 2_000  # most asks found their key deactivated


_RACER = r"""
import os, sys, time, itertools
from typing import Any
sys.path.insert(0, sys.argv[1])
from gen_agent import AgentHost, AgentSystem, GenAgent, NoReply, Proceed
from gen_agent.backends.mock import MockBackend, text_turn
from gen_agent._errors import AgentStartError
from gen_agent.store import SQLiteStore
log = open(sys.argv[3], "a", buffering=1)
inc = itertools.count(1)

def answer(prompt):
    key, inc_ = prompt.split("|")[:2]
    log.write(f"enter {key} {os.getpid()}.{inc_} {time.monotonic_ns()}\n")
    time.sleep(0.005)
    log.write(f"leave {key} {os.getpid()}.{inc_} {time.monotonic_ns()}\n")
    return text_turn("ok")

class Racer(GenAgent):
    persist_state = True
    def init_agent(self, opts):
        self.key, self.inc = opts["key"], next(inc)
        return {"fallback": answer}, 0
    def pre_turn(self, prompt, state):
        return Proceed(f"{self.key}|{self.inc}|{state}", state)
    def handle_response(self, ref, response, state):
        return NoReply(state + 1)

ready = sys.argv[3] + f".ready.{os.getpid()}"
open(ready, "w").close()
import glob
deadline = time.monotonic() + 30
while len(glob.glob(sys.argv[3] + ".ready.*")) < 2 and time.monotonic() < deadline:
    time.sleep(0.001)  # both processes start on the keys together
with AgentSystem() as system:
    host = AgentHost(Racer, backend=MockBackend, store=SQLiteStore(sys.argv[2]),
                     agent_system=system, deactivate_after_ms=0)
    leased = 0
    for key in [f"k{i}" for i in range(40)]:
        for _ in range(2000):
            try:
                host.ask(key, "q", timeout=10)
                break
            except AgentStartError as exc:
                assert exc.reason[0] == "session_leased", exc.reason
                leased += 1
                time.sleep(0.001)
        else:
            raise SystemExit("never got " + key)
    host.close()
print(leased)
"""


def test_two_processes_racing_on_new_keys_never_share_one(tmp_path: Any) -> None:
    import subprocess
    import sys

    script = tmp_path / "racer.py"
    script.write_text(_RACER)
    db, log = tmp_path / "keys.db", tmp_path / "turns.log"
    root = os.path.dirname(os.path.dirname(os.path.abspath(gen_agent.__file__)))
    procs = [subprocess.Popen([sys.executable, str(script), root, str(db), str(log)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    in_flight: dict[str, str] = {}
    events = [line.split() for line in log.read_text().splitlines()]
    events.sort(key=lambda e: int(e[3]))
    turns: dict[str, int] = {}
    spans: dict[str, list[int]] = {}
    for _kind, _key, who, at in events:
        spans.setdefault(who.split(".")[0], []).append(int(at))
    first, second = sorted(spans.values(), key=min)
    assert min(second) < max(first)  # the two processes ran their turns at the same time
    for kind, key, who, _at in events:
        if kind == "enter":
            assert key not in in_flight, (key, in_flight[key], who)
            in_flight[key] = who
            turns[key] = turns.get(key, 0) + 1
        else:
            assert in_flight.pop(key) == who
    assert turns == {f"k{i}": 2 for i in range(40)}
    with SQLiteStore(db) as store:
        states = {key: store.load(key).state for key in store.list_keys()}  # type: ignore[union-attr]
    import msgspec
    assert {key: msgspec.msgpack.decode(blob) for key, blob in states.items()} == {
        f"k{i}": 2 for i in range(40)}  # each key's two turns, one per process, continuous


def test_a_supervisor_wide_cap_covers_nested_children_and_pool_workers(
        system: AgentSystem) -> None:
    from gen_agent._accounting import SharedBudget
    from gen_agent._supervisor import child_spec, supervisor_spec

    turn = text_turn("x", usage={"input_tokens": 5, "output_tokens": 5})
    backend = MockBackend.with_options(fallback=turn)
    tree = gen_agent.Supervisor(
        [child_spec(Scripted, name="top", backend=backend),
         supervisor_spec([child_spec(Scripted, name="deep", backend=backend)], name="inner")],
        max_total_tokens=20, system=system)
    try:
        gen_agent.ask("top", "q", agent_system=system)
        gen_agent.ask("deep", "q", agent_system=system)  # 20 tokens: reached
        for name in ("top", "deep"):
            with pytest.raises(TurnError) as caught:
                gen_agent.ask(name, "q", agent_system=system)
            assert caught.value.reason[0] == "budget_exceeded"
        assert tree.budget is not None and tree.budget.spend.turns == 2
    finally:
        tree.stop()
    shared = SharedBudget(max_total_tokens=10)
    pool = gen_agent.Pool(Scripted, size=2, backend=backend, budgets=shared, system=system)
    try:
        pool.result(pool.submit("q"), timeout=5)
        with pytest.raises(TurnError) as caught:
            pool.result(pool.submit("q"), timeout=5)
        assert caught.value.reason[0] == "budget_exceeded"
    finally:
        pool.stop()
    # Pool(max_total_tokens=...) is the pool's cap, over every worker: 10 tokens spent by one
    # worker refuse the next task on any worker.
    pool = gen_agent.Pool(Scripted, size=2, backend=backend, max_total_tokens=10, system=system)
    try:
        first = pool.submit("q")
        pool.result(first, timeout=5)
        refused = [pool.submit("q") for _ in range(2)]
        for ref in refused:
            with pytest.raises(TurnError) as caught:
                pool.result(ref, timeout=5)
            assert caught.value.reason[0] == "budget_exceeded"
        assert pool.supervisor.budget is not None and pool.supervisor.budget.spend.turns == 1
    finally:
        pool.stop()


def test_a_host_runs_under_a_supervisor_and_restarts_with_its_records(
        system: AgentSystem) -> None:
    from gen_agent._host import host_spec

    witness = Witness()
    store = MemoryStore()
    tree = gen_agent.Supervisor([host_spec(Chat, name="chats", backend=MockBackend,
                                           store=store, model=model(witness))], system=system)
    try:
        host = AgentHost.lookup("chats", agent_system=system)
        assert host.ask("k", "q1").text == "k:q1:0"
        before = gen_agent.whereis("chats", agent_system=system)
        gen_agent.stop("chats", agent_system=system)  # the host's agents stop with it
        assert host.live_keys() == []
        found: list[AgentHost] = []

        def restarted() -> bool:
            ref = gen_agent.whereis("chats", agent_system=system)
            if ref is None or ref == before:
                return False
            with contextlib.suppress(AgentNotFound):  # still starting
                found.append(AgentHost.lookup("chats", agent_system=system))
            return bool(found)

        assert wait_until(restarted)
        again = found[0]
        assert again is not host
        assert again.ask("k", "q2").text == "k:q2:1"  # resumed from the shared store
        with pytest.raises(AgentNotFound):
            AgentHost.lookup(("chats", "k"), agent_system=system)  # an agent, not a host
    finally:
        tree.stop()
    assert witness.violations == []


def test_max_live_passes_over_an_agent_whose_own_work_is_pending(system: AgentSystem) -> None:
    started, release = threading.Event(), threading.Event()

    more = threading.Event()

    def answer(prompt: str) -> list[Event]:
        if prompt in ("slow", "more"):
            (started if prompt == "slow" else more).set()
            assert release.wait(5)
        return text_turn("ok")

    class Plain(Chat):
        pre_turn = GenAgent.pre_turn

    with AgentHost(Plain, backend=MockBackend.with_options(fallback=answer),
                   agent_system=system, max_live=2) as host, ThreadPoolExecutor(1) as pool:
        # "a" is busy with an ask (the host counts it); "b" looks idle to the host, but
        # its agent runs a turn told around the host: it refuses to deactivate
        slow = pool.submit(host.ask, "a", "slow")
        assert started.wait(5)
        host.ask("b", "fast")
        gen_agent.tell((host.name, "b"), "more", agent_system=system)
        assert more.wait(5)
        with pytest.raises(TurnError) as caught:  # b refuses (its turn), a is busy
            host.ask("c", "q")
        assert caught.value.reason[0] == "overloaded"
        release.set()
        assert slow.result(5).text == "ok"


def test_the_aio_twins_activate_and_answer_as_the_threaded_calls(system: AgentSystem) -> None:
    import asyncio

    witness = Witness()

    async def scenario(host: AgentHost) -> None:
        assert (await host.aio.ask("k", "q1")).text == "k:q1:0"
        ref = await host.aio.tell("k", "q2")
        for _ in range(500):
            result = await host.aio.poll("k", ref)
            if result.status != "pending":
                break
            await asyncio.sleep(0.005)
        assert result.response.text == "k:q2:1"  # type: ignore[union-attr]
        async with host.aio.stream("other", "q1") as turn:
            texts = [event.data["text"] async for event in turn]
        async with host.aio.attach("other", turn.ref, after=1) as again:  # type: ignore[arg-type]
            assert [event.data["text"] async for event in again] == texts[1:]
        assert isinstance(await host.aio.status("k"), Status)
        assert await host.aio.status("nobody") is None
        await host.aio.interrupt("nobody")

    with AgentHost(Chat, backend=MockBackend, agent_system=system, model=model(witness)) as host:
        asyncio.run(scenario(host))
        assert host.host_status().activations == 2


def _texts(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content if isinstance(block, dict))


def test_conversations_stay_whole_through_a_real_provider_protocol(tmp_path: Any) -> None:
    """20 keys, three asks each in random order, over max_live=4 agents on the Anthropic
    Messages API against a loopback model server and a SQLite store: the server checks
    that every request carries exactly the key's earlier exchanges (the conversation was
    restored across deactivation), and that no two incarnations of a key are in flight."""
    pytest.importorskip("anthropic")
    from gen_agent.backends.anthropic import AnthropicAPI
    from gen_agent.testing import Reply, ScriptedModelServer

    witness = Witness()
    broken: list[str] = []

    def answer(request: Any) -> Any:
        messages = request.body["messages"]
        key, _pid, incarnation, history, question = _texts(messages[-1]["content"]).split("|")
        witness.enter(key, int(incarnation))
        try:
            earlier = [_texts(m["content"]) for m in messages[:-1] if m["role"] == "assistant"]
            if earlier != [f"{key}:q{j + 1}:{j}" for j in range(int(history))]:
                broken.append(f"{key}: {earlier} at {history}")
            return Reply.text(f"{key}:{question}:{history}")
        finally:
            witness.leave(key)

    class Api(Chat):
        def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
            _, state = super().init_agent({k: v for k, v in opts.items() if k != "model"})
            return {"api_key": "k", "base_url": opts["url"], "model": "claude-test"}, state

    keys = [f"u{i}" for i in range(20)]  # an SDK client per activation: ~50 ms each
    order = keys * 3
    random.Random(7).shuffle(order)
    done = dict.fromkeys(keys, 0)
    locks = {key: threading.Lock() for key in keys}
    wrong: list[str] = []
    with ScriptedModelServer([answer] * len(order)) as server, AgentSystem() as system, \
            SQLiteStore(tmp_path / "chats.db") as store, \
            AgentHost(Api, backend=AnthropicAPI, store=store, agent_system=system,
                      max_live=4, deactivate_after_ms=10, hibernate_after_ms=0,
                      url=server.url) as host:

        def one(key: str) -> None:
            for _ in range(500):
                try:
                    with locks[key]:
                        n = done[key]
                        text = host.ask(key, f"q{n + 1}", timeout=30).text
                        if text != f"{key}:q{n + 1}:{n}":
                            wrong.append(text)
                        done[key] = n + 1
                    return
                except TurnError as exc:  # all 4 busy: the host says so; try again
                    if exc.reason[0] != "overloaded":
                        raise
                    time.sleep(0.001)
            raise AssertionError("overloaded for too long")

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(one, order))
        activations = host.host_status().activations
    assert wrong == [] and broken == [] and witness.violations == []
    assert set(done.values()) == {3} and witness.turns == 60
    assert activations > 40  # most asks found their key deactivated and restored it


def test_a_slow_reader_is_detached_and_rejoins_without_losing_an_event(
        system: AgentSystem) -> None:
    produced = threading.Event()

    def many(_prompt: str) -> Iterator[Event]:
        for i in range(40):
            yield Event.new("text", {"text": str(i)})
        produced.wait(5)
        yield Event.new("result", {"text": "end"})

    class Many(Chat):
        def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
            return {"fallback": many}, []

        pre_turn = GenAgent.pre_turn

    with AgentHost(Many, backend=MockBackend, agent_system=system) as host:
        ref = host.tell("k", "go")
        with host.attach("k", ref, max_buffered_events=4) as reader:
            # the 40 events went out while the reader read nothing: it was detached
            assert wait_until(lambda: gen_agent.runtime_snapshot(
                (host.name, "k"), agent_system=system).current_request is not None)
            assert len(reader._buffer._items) <= 9  # type: ignore[union-attr]
            produced.set()
            texts = [event.data["text"] for event in reader]
            assert reader.response.text == "end" and reader.missed == 0
        assert texts == [str(i) for i in range(40)] + ["end"]  # each once, in order


def test_aio_attach_outside_a_host_needs_replay_turns(system: AgentSystem) -> None:
    import asyncio

    from gen_agent import aio

    class Plain(GenAgent):
        def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
            return {"fallback": text_turn(["a", "b"])}, None

        def handle_response(self, ref: Any, response: Any, state: Any) -> NoReply:
            return NoReply(state)

    gen_agent.start_agent(Plain, name="kept", backend=MockBackend, replay_turns=1,
                          agent_system=system)
    gen_agent.start_agent(Plain, name="plain", backend=MockBackend, agent_system=system)

    async def scenario() -> None:
        ref = await aio.tell("kept", "go", agent_system=system)
        async with aio.attach("kept", ref, after=1, agent_system=system) as turn:
            assert [e.data["text"] async for e in turn] == ["b", "ab"]  # texts, then result
            assert turn.seq == 3
        other = await aio.tell("plain", "go", agent_system=system)
        with pytest.raises(RequestError) as caught:
            async with aio.attach("plain", other, agent_system=system):
                pass
        assert caught.value.reason == "replay_off"

    asyncio.run(scenario())


def test_the_systems_shutdown_closes_the_host() -> None:
    with AgentSystem() as system:
        host = AgentHost(Chat, backend=MockBackend, agent_system=system,
                         deactivate_after_ms=60_000, model=model(Witness()))
        host.ask("k", "q1")
        reaper = host._reaper
    assert reaper is not None and not reaper.is_alive()  # no thread outlives the system
    assert host.live_keys() == []
    with pytest.raises(AgentNotFound):
        host.ask("k", "q2")
