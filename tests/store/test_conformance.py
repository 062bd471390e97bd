"""The store conformance suite: every `SessionStore` / `ToolJournal` of the package passes the
same protocol tests (records, leases and their fencing, the tool journal, the reaping
record of a taken-over lease, encoding rules, corrupt records). `store` runs each test on
`MemoryStore`, `SQLiteStore` and `PostgresStore` (a real PostgreSQL the tests start, see
`tests/pgcluster.py`); `shared` on the two stores several processes can share."""

from __future__ import annotations

import os
import pickle
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

import gen_agent
from gen_agent import GenAgent, NoReply
from gen_agent.backends.mock import MockBackend, text_turn
from gen_agent.store import (
    CorruptRecord,
    InFlightTurn,
    InterruptedTurn,
    Lease,
    LeaseHeld,
    MemoryStore,
    PostgresStore,
    SessionStore,
    SQLiteStore,
    StoreError,
    ToolCallEntry,
    ToolJournal,
    Totals,
    TurnOutcome,
)
from gen_agent.store._lease import taken_from


class Raw:
    """Direct access to a store's rows, to plant what another host or a bad writer left."""

    def __init__(self, kind: str, store: Any, cluster: Any = None) -> None:
        self.kind, self.store, self.cluster = kind, store, cluster

    def execute(self, sqlite_sql: str, params: tuple[Any, ...]) -> None:
        if self.kind == "sqlite":
            with sqlite3.connect(self.store.path) as conn:
                conn.execute(sqlite_sql, params)
            return
        table = {"leases": "gen_agent_leases", "sessions": "gen_agent_sessions"}
        sql = sqlite_sql.replace("?", "%s")
        for name, real in table.items():
            sql = sql.replace(f" {name} ", f" {real} ")
        self.cluster.execute(sql, params)

    def plant_lease(self, lease: Lease) -> None:
        self.execute("DELETE FROM leases WHERE key = ?", (lease.key,))
        self.execute("INSERT INTO leases (key, token, lease, heartbeat_at) VALUES (?, ?, ?, ?)",
                     (lease.key, lease.token, msgspec.msgpack.encode(lease), lease.heartbeat_at))


def _make(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Any, Raw]:
    if kind == "memory":
        made: Any = MemoryStore()
        return made, Raw(kind, made)
    if kind == "sqlite":
        made = SQLiteStore(tmp_path / "s.db")
        return made, Raw(kind, made)
    cluster = request.getfixturevalue("postgres")
    from pgcluster import wipe

    wipe(cluster)
    made = PostgresStore(cluster.conninfo())
    return made, Raw(kind, made, cluster)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    made, _ = _make(request.param, request, tmp_path)
    yield made
    made.close()


@pytest.fixture(params=["sqlite", "postgres"])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, Raw]]:
    made, raw = _make(request.param, request, tmp_path)
    yield made, raw
    made.close()


# ---------------------------------------------------------------------- records
def test_a_record_round_trips(store: SessionStore) -> None:
    assert isinstance(store, SessionStore)
    assert store.load("k") is None
    lease = store.acquire("k")
    flight = InFlightTurn(ref="r-1", origin="ask", attempt=1, started_at=1.5, pid=os.getpid())
    store.update(lease, conversation={"history": [{"role": "user", "content": "hi"}]},
                 state=b"\x01", totals=Totals(turns=2, usage={"input_tokens": 5}),
                 in_flight=flight)
    record = store.load("k")
    assert record is not None
    assert record.conversation == {"history": [{"role": "user", "content": "hi"}]}
    assert (record.state, record.totals.turns, record.totals.usage) == (b"\x01", 2,
                                                                       {"input_tokens": 5})
    assert record.in_flight == flight
    assert record.lease is not None and record.lease.token == lease.token
    assert 0 < record.created_at <= record.updated_at
    store.update(lease, in_flight=None)
    record = store.load("k")
    assert record is not None and record.in_flight is None and record.state == b"\x01"
    assert store.list_keys() == ["k"]
    store.release(lease)
    record = store.load("k")
    assert record is not None and record.lease is None
    assert store.delete("k") is True and store.delete("k") is False
    assert store.load("k") is None and store.list_keys() == []


def test_keys_list_in_code_point_order(store: SessionStore) -> None:
    keys = ["b", "a", "B", "é", "a-1", "a_1", "z"]
    for key in keys:
        store.update(store.acquire(key), state=b"x")
    assert store.list_keys() == sorted(keys)


def test_values_msgspec_cannot_encode_are_refused(store: SessionStore) -> None:
    lease = store.acquire("k")
    with pytest.raises(StoreError) as caught:
        store.update(lease, conversation={"client": object()})
    assert caught.value.reason == "encode_error"
    with pytest.raises(TypeError):
        store.update(lease, nonsense=1)
    assert store.load("k") is None  # nothing was written


def test_a_lone_surrogate_is_stored_as_a_replacement_character(store: SessionStore) -> None:
    from gen_agent._portable import to_portable

    lease = store.acquire("k")
    reason = to_portable(("task_crashed", UnicodeEncodeError("utf-8", "a\ud800", 1, 2, "x")))
    store.update(lease, conversation={"history": [{"role": "user", "content": "hi \ud800",
                                                   "\udfff": ["\ud83d\ude00 ok"]}]},
                 last_outcome=TurnOutcome(ref="r", ok=False, reason=reason, ended_at=1.0),
                 state=b"\xed\xa0\x80")
    record = store.load("k")
    assert record is not None
    assert record.conversation == {"history": [{"role": "user", "content": "hi \ufffd",
                                                "\ufffd": ["\U0001f600 ok"]}]}
    assert record.last_outcome is not None and record.last_outcome.ok is False
    assert record.last_outcome.reason[1]["args"][1] == "a\ufffd"
    assert record.state == b"\xed\xa0\x80"  # bytes are never touched


def test_a_key_with_a_lone_surrogate_is_refused(store: SessionStore) -> None:
    with pytest.raises(ValueError, match="lone surrogate at index 2"):
        store.acquire("ab\udc80")
    with pytest.raises(ValueError, match="session key"):
        store.acquire("")
    assert store.list_keys() == []


def test_a_corrupt_field_names_the_key(shared: tuple[Any, Raw]) -> None:
    store, raw = shared
    store.update(store.acquire("good"), totals=Totals(turns=1))
    store.update(store.acquire("bad"), totals=Totals(turns=1))
    raw.execute("UPDATE sessions SET totals = ? WHERE key = ?", (b"\xc1garbage", "bad"))
    with pytest.raises(CorruptRecord) as caught:
        store.load("bad")
    assert (caught.value.key, caught.value.detail) == ("bad", "field 'totals' does not decode")
    good = store.load("good")
    assert good is not None and good.totals.turns == 1


# ---------------------------------------------------------------------- leases
def test_one_live_owner_per_key(store: SessionStore) -> None:
    lease = store.acquire("k")
    with pytest.raises(LeaseHeld) as caught:
        store.acquire("k")
    assert (caught.value.key, caught.value.holder.pid) == ("k", os.getpid())
    with pytest.raises(LeaseHeld):
        store.delete("k")
    store.release(lease)
    again = store.acquire("k")
    assert again.token != lease.token
    assert taken_from(again) is None  # a released lease: nobody to reap
    with pytest.raises(StoreError) as lost:
        store.update(lease, state=b"old owner")  # fenced: the released lease writes nothing
    assert lost.value.reason == "lease_lost"
    store.update(again, state=b"new owner")
    record = store.load("k")
    assert record is not None and record.state == b"new owner"


def test_a_takeover_keeps_the_dead_owners_lease_for_reaping(shared: tuple[Any, Raw]) -> None:
    # An owner on this host whose process is gone (pid 2**22 + 1 is above Linux's pid_max
    # default range, i.e. not running): its lease is taken over at once, and the new owner
    # learns who it replaced (pid, start time), so it can end what that owner left running.
    store, raw = shared
    dead = msgspec.structs.replace(store.acquire("k"), token="dead", pid=2**22 + 1,
                                   started_ticks=12345)
    raw.plant_lease(dead)
    lease = store.acquire("k")
    previous = taken_from(lease)
    assert previous is not None
    assert (previous.token, previous.pid, previous.started_ticks) == ("dead", 2**22 + 1, 12345)
    assert taken_from(lease) is None  # asked once


def test_a_lease_of_another_host_expires_after_its_ttl(shared: tuple[Any, Raw]) -> None:
    store, raw = shared
    other = Lease(key="k", token="t", pid=1, host="elsewhere", heartbeat_at=0.0)
    raw.plant_lease(msgspec.structs.replace(other, heartbeat_at=time.time() + 60))
    with pytest.raises(LeaseHeld) as caught:
        store.acquire("k")
    assert caught.value.holder.host == "elsewhere"
    raw.plant_lease(other)  # its heartbeat is older than the TTL now
    assert store.acquire("k").host != "elsewhere"


def test_writes_refresh_the_heartbeat_at_most_every_quarter_ttl(shared: tuple[Any, Raw]) -> None:
    store, _ = shared
    store.lease_ttl_s, store._beat_every_s = 0.4, 0.1  # as if made with lease_ttl_s=0.4
    lease = store.acquire("k")
    first = lease.heartbeat_at
    store.update(lease, state=b"1")  # within a quarter TTL: the heartbeat is not rewritten
    assert store.load("k").lease.heartbeat_at == first  # type: ignore[union-attr]
    while time.time() <= first + 0.1:  # the clock must pass a quarter TTL (bounded)
        time.sleep(0.01)
    store.update(lease, state=b"2")
    record = store.load("k")
    assert record.lease.heartbeat_at > first and record.state == b"2"  # type: ignore[union-attr]
    store.heartbeat(lease)
    store.release(lease)
    with pytest.raises(StoreError) as caught:
        store.heartbeat(lease)
    assert caught.value.reason == "lease_lost"


_CHILD = ("import pickle, sys; store = pickle.loads(bytes.fromhex(sys.argv[1])); "
          "lease = store.acquire('k'); print(lease.pid, flush=True); {tail}")


def _child(store: Any, tail: str, **kwargs: Any) -> Any:
    code = _CHILD.format(tail=tail)
    return subprocess.Popen([sys.executable, "-c", code, pickle.dumps(store).hex()],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, **kwargs)


def test_a_dead_processs_lease_is_taken_over_at_once(shared: tuple[Any, Raw]) -> None:
    store, _ = shared
    child = _child(store, "")
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 0
    lease = store.acquire("k")  # the child exited holding the lease: no wait, no error
    assert lease.pid == os.getpid() != int(out.split()[0])
    assert taken_from(lease) is not None


def test_a_live_processs_lease_is_refused(shared: tuple[Any, Raw]) -> None:
    store, _ = shared
    child = _child(store, "sys.stdin.readline()")
    try:
        assert child.stdout is not None and int(child.stdout.readline()) == child.pid
        with pytest.raises(LeaseHeld) as caught:
            store.acquire("k")
        assert caught.value.holder.pid == child.pid
    finally:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.close()
        child.wait(timeout=30)
        child.stdout.close()


# ---------------------------------------------------------------------- tool journal
def test_journal_entries_are_fenced_ordered_and_cleared(store: Any) -> None:
    assert isinstance(store, ToolJournal)
    lease = store.acquire("k")
    store.update(lease, in_flight=InFlightTurn(ref="r", origin="ask", attempt=1,
                                               started_at=1.0, pid=1))
    first = ToolCallEntry(ref="r", call_id="a", tool="pay", input={"n": 1}, started_at=2.0,
                          side_effects=True)
    store.journal_write(lease, first)
    store.journal_write(lease, ToolCallEntry(ref="r", call_id="b", tool="look", input={}))
    marker = InFlightTurn(ref="r", origin="ask", attempt=1, started_at=1.0, pid=1,
                          usage={"input_tokens": 12})
    store.journal_write(lease, msgspec.structs.replace(first, finished_at=3.0, result="ok"),
                        in_flight=marker)
    entries = store.journal("k")
    assert [(e.call_id, e.finished_at, e.result) for e in entries] == [
        ("a", 3.0, "ok"), ("b", None, None)]
    record = store.load("k")
    assert record is not None and record.in_flight == marker
    store.release(lease)
    with pytest.raises(StoreError) as caught:
        store.journal_write(lease, first)
    assert caught.value.reason == "lease_lost"
    lease = store.acquire("k")
    store.journal_clear(lease)
    assert store.journal("k") == []
    store.journal_write(lease, first)
    store.release(lease)
    assert store.delete("k") is True and store.journal("k") == []


def test_a_closed_store_says_so(store: Any) -> None:
    store.update(store.acquire("k"), state=b"x")
    store.close()
    store.close()  # idempotent
    if isinstance(store, MemoryStore):
        return  # nothing to close in memory
    with pytest.raises(StoreError) as caught:
        store.list_keys()
    assert caught.value.reason == "closed"


# ---------------------------------------------------------------------- an agent on it
class Counter(GenAgent):
    """Counts its answered turns in its persisted state; records what `handle_info` got."""

    persist_state = True
    infos: list[Any] = []

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"fallback": lambda prompt: text_turn(f"re: {prompt}")}, {"turns": 0}

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return NoReply({"turns": state["turns"] + 1})

    def handle_info(self, message: Any, state: Any) -> Any:
        type(self).infos.append(message)
        return NoReply(state)


@pytest.mark.usefixtures("agent_system")
def test_an_agent_resumes_and_reports_an_interrupted_turn(store: Any) -> None:
    Counter.infos = []
    gen_agent.start_agent(Counter, name="c", backend=MockBackend, store=store,
                          session_key="user-1")
    assert gen_agent.ask("c", "one", timeout=10).text == "re: one"
    gen_agent.stop("c")
    # A turn left in flight by an owner that died: reported once at the next start.
    lease = store.acquire("user-1")
    store.update(lease, in_flight=InFlightTurn(ref="r-9", origin="ask", attempt=1,
                                               started_at=1.0, pid=1, prompt="two"))
    store.release(lease)
    gen_agent.start_agent(Counter, name="c", backend=MockBackend, store=store,
                          session_key="user-1")
    status = gen_agent.status("c", timeout=10)
    assert status.store.resumed is True and status.agent_state == {"turns": 1}
    assert gen_agent.ask("c", "three", timeout=10).text == "re: three"
    gen_agent.stop("c")
    assert [(i.ref, i.prompt) for i in Counter.infos if isinstance(i, InterruptedTurn)] == [
        ("r-9", "two")]
    record = store.load("user-1")
    assert record is not None and record.totals.turns == 2 and record.in_flight is None
    assert msgspec.msgpack.decode(record.state) == {"turns": 2}
    assert record.totals.interrupted_turns == 1
