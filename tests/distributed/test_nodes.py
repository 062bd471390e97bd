"""gen_agent.ray nodes: remote calls, names across nodes, both restart layers, streaming."""

from __future__ import annotations

import gc
import os
import signal
import threading
import time

import pytest

import gen_agent
from gen_agent._errors import AgentDown, AgentNotFound, AlreadyStarted, CallTimeout, TurnError
from gen_agent.ray._directory import DIRECTORY_NAME, INTENSITY_REASON

from . import agents
from .conftest import gray, gray_client, pid_gone, ray

gray_remote = ray.remote


def test_remote_ask_tell_poll_status_and_errors(cluster) -> None:
    spec = gen_agent.child_spec(agents.Echo, name="greeter", backend=agents.MockBackend,
                                restart="permanent", prefix="hi ")
    node = cluster.start_node("a", [spec])
    ns = cluster.namespace
    response = gray.ask("greeter", "Ada", timeout=10, namespace=ns)
    assert response.text == "hi Ada"
    ref = gray.tell("greeter", "Bob", timeout=10, namespace=ns)
    result = gray.poll("greeter", ref, timeout=10, namespace=ns)
    assert result.status in ("pending", "completed")
    status = gray.status("greeter", timeout=10, namespace=ns)
    assert status.name == "greeter" and status.agent_state["node_pid"] == node.pid
    assert gray.whereis("greeter", namespace=ns) == "a"
    assert gray.whereis("nobody", namespace=ns) is None
    assert gray.list_agents(namespace=ns) == ["greeter"]
    with pytest.raises(AgentNotFound):
        gray.ask("nobody", "x", timeout=10, namespace=ns)
    with pytest.raises(TypeError, match="prompt must be a str"):
        gray.ask("greeter", 42, namespace=ns)  # type: ignore[arg-type]
    info = node.info()
    assert info["agents"] == 1 and info["rss_kib"] > 0
    assert gray.poll("nobody", ref, namespace=ns).reason == "not_found"



def test_names_resolve_across_nodes_and_from_other_processes(cluster) -> None:
    ns = cluster.namespace
    cluster.start_node("a", [gen_agent.child_spec(agents.Echo, name="on-a",
                                                  backend=agents.MockBackend, prefix="A:")])
    cluster.start_node("b")
    assert gray.start_agent(agents.Echo, name="on-b", backend=agents.MockBackend, node="b",
                            prefix="B:", namespace=ns) == "b"
    with pytest.raises(AlreadyStarted) as taken:  # a name is unique in the whole cluster
        gray.start_agent(agents.Echo, name="on-a", backend=agents.MockBackend, node="b",
                         namespace=ns)
    kind, holder = taken.value.reason  # as locally: the holder's AgentRef, portable here
    assert kind == "already_started" and taken.value.name == "on-a"
    assert (holder.type_name, holder.module, holder.attrs) == (
        "AgentRef", "gen_agent._agent_ref", {"name": "on-a", "node": "a"})
    assert sorted(gray.list_agents(namespace=ns)) == ["on-a", "on-b"]
    assert gray.ask("on-a", "1", timeout=10, namespace=ns).text == "A:1"
    assert gray.ask("on-b", "2", timeout=10, namespace=ns).text == "B:2"

    @gray_remote
    def ask_from_a_ray_task(name: str, namespace: str) -> str:
        import gen_agent.ray as cluster_api

        return cluster_api.ask(name, "3", timeout=10, namespace=namespace).text

    assert ray.get(ask_from_a_ray_task.remote("on-b", ns), timeout=60) == "B:3"
    gray.stop("on-b", namespace=ns)
    assert gray.whereis("on-b", namespace=ns) is None
    with pytest.raises(AgentNotFound):
        gray.ask("on-b", "4", timeout=10, namespace=ns)


def test_a_node_whose_handle_is_dropped_keeps_running_and_restarting(cluster) -> None:
    # Ray removes an actor once its owner holds no handle on it: gen_agent keeps the one
    # start_node made until stop_node, whatever the caller does with the Node it got.
    ns = cluster.namespace
    pid = gray.start_node("loose", [gen_agent.child_spec(
        agents.Echo, name="loose-echo", backend=agents.MockBackend, restart="permanent")],
        namespace=ns).pid
    try:
        gc.collect()
        gray_client._forget_all()  # cached lookups go; the node must not
        assert gray.ask("loose-echo", "one", timeout=10, namespace=ns).text == "one"
        os.kill(pid, signal.SIGKILL)
        assert pid_gone(pid, 10)
        deadline = time.monotonic() + 60
        while True:  # the first asks after the death may see it: node_down
            try:
                answer = gray.ask("loose-echo", "two", timeout=10, namespace=ns)
                break
            except AgentDown as down:
                assert down.reason == ("node_down", "loose")
                assert time.monotonic() < deadline, "the node was not restarted"
                time.sleep(0.1)
        assert answer.text == "two"  # Ray restarted it and it restored its child
        assert gray.status("loose-echo", timeout=10, namespace=ns).agent_state["node_pid"] \
            not in (pid, None)
    finally:
        gray.stop_node("loose", namespace=ns, timeout=30)


def test_a_node_gone_without_a_word_frees_its_names(cluster) -> None:
    # Its actor removed for good without telling the directory (the process that started it
    # exited; here: killed with no restart): the first caller that finds it gone tells the
    # directory, and its names can be taken elsewhere.
    ns = cluster.namespace
    node = cluster.start_node("lost", [gen_agent.child_spec(
        agents.Echo, name="orphan", backend=agents.MockBackend)])
    cluster.start_node("heir")
    assert gray.ask("orphan", "one", timeout=10, namespace=ns).text == "one"
    ray.kill(node.actor, no_restart=True)
    assert pid_gone(node.pid, 10)
    assert gray.list_agents(namespace=ns) == []
    assert gray.whereis("orphan", namespace=ns) is None
    with pytest.raises(AgentDown) as down:
        gray.ask("orphan", "two", timeout=10, namespace=ns)
    assert down.value.reason == ("node_down", "lost")
    directory = ray.get_actor(DIRECTORY_NAME, namespace=ns)
    assert ray.get(directory.node_status.remote("lost")) == ("down", "not_running")
    gray.start_agent(agents.Echo, name="orphan", backend=agents.MockBackend, node="heir",
                     prefix="heir:", namespace=ns)
    assert gray.ask("orphan", "three", timeout=10, namespace=ns).text == "heir:three"
    gray.stop_node("lost", namespace=ns)  # releases what is left of it
    assert ray.get(directory.node_status.remote("lost")) is None


def test_dropping_the_directory_leaves_an_empty_one_for_the_next_call(cluster) -> None:
    ns = cluster.namespace
    node = cluster.start_node("tmp", [gen_agent.child_spec(
        agents.Echo, name="short", backend=agents.MockBackend)])
    assert gray.list_agents(namespace=ns) == ["short"]
    node.stop()
    gray.drop_directory(ns)
    assert gray.list_agents(namespace=ns) == []  # a new directory, nothing read back
    assert gray.whereis("short", namespace=ns) is None
    directory = ray.get_actor(DIRECTORY_NAME, namespace=ns)
    assert ray.get(directory.info.remote())["nodes"] == 0


def test_errors_keep_their_type_and_reason(cluster) -> None:
    ns = cluster.namespace
    cluster.start_node("a", [
        gen_agent.child_spec(agents.Echo, name="raiser", backend=agents.MockBackend,
                             scripts=[agents.mock.raising(KeyError("k"))]),
        gen_agent.child_spec(agents.Echo, name="slow", backend=agents.MockBackend,
                             delay_s=1.0),
    ])
    with pytest.raises(TurnError) as crashed:
        gray.ask("raiser", "x", timeout=10, namespace=ns)
    kind, record = crashed.value.reason
    assert kind == "task_crashed" and record.is_a(KeyError) and record.frames
    with pytest.raises(CallTimeout):
        gray.ask("slow", "x", timeout=0.2, namespace=ns)
    # The timed-out ask kept its place (the agent is unaffected), as locally.
    assert gray.status("slow", timeout=10, namespace=ns).state == "processing"
    with pytest.raises(TurnError) as exhausted:
        gray.ask("raiser", "again", timeout=10, namespace=ns)
    assert exhausted.value.reason == "no_script"


def test_a_callback_crash_is_restarted_inside_the_node(cluster) -> None:
    ns = cluster.namespace
    node = cluster.start_node("a", [gen_agent.child_spec(
        agents.Echo, name="fragile", backend=agents.MockBackend, restart="permanent")])
    assert gray.ask("fragile", "one", timeout=10, namespace=ns).text == "one"
    with pytest.raises(AgentDown) as down:
        gray.ask("fragile", "crash", timeout=10, namespace=ns)
    assert down.value.reason[:2] == ("callback_failed", "error")
    # The node's supervisor restarted it: a fresh incarnation in the same process.
    assert gray.ask("fragile", "two", timeout=10, namespace=ns).text == "two"
    status = gray.status("fragile", timeout=10, namespace=ns)
    assert status.agent_state == {"turns": 1, "node_pid": node.pid}


def test_a_killed_node_is_restored_with_its_sessions_until_its_intensity_is_spent(
        cluster) -> None:
    ns = cluster.namespace
    node = cluster.start_node("a", [gen_agent.child_spec(
        agents.Echo, name="keeper", backend=agents.ResumableMock, restart="permanent",
        resume_session=True, session_id="s-1", child=True)], node_max_restarts=1,
        node_max_seconds=60)
    cluster.start_node("b")
    gray.start_agent(agents.Echo, name="late", backend=agents.ResumableMock, node="a",
                     session_id="s-late", namespace=ns)
    assert gray.ask("keeper", "one", timeout=10, namespace=ns).session_id == "s-1"
    assert gray.ask("late", "one", timeout=10, namespace=ns).session_id == "s-late"
    first = gray.status("keeper", timeout=10, namespace=ns).agent_state
    os.kill(node.pid, signal.SIGKILL)
    assert node.wait_ready(60) != node.pid
    # The restarted node restored both children, resuming their sessions.
    restored = gray.ask("keeper", "two", timeout=60, namespace=ns)
    assert restored.text == "resumed s-1: two"
    assert gray.ask("late", "two", timeout=10, namespace=ns).text == "resumed s-late: two"
    second = gray.status("keeper", timeout=10, namespace=ns).agent_state
    assert second["node_pid"] != first["node_pid"]
    # The CLI stand-in the dead incarnation left behind was reaped by the restarted node.
    assert pid_gone(first["child_pid"], 10)
    assert sorted(gray.list_agents(namespace=ns)) == ["keeper", "late"]
    # A second death within node_max_seconds exceeds node_max_restarts=1: the node stays
    # down and its callers are told so.
    os.kill(second["node_pid"], signal.SIGKILL)
    with pytest.raises(AgentDown):
        node.wait_ready(60)
    with pytest.raises(AgentDown) as down:
        gray.ask("keeper", "three", timeout=30, namespace=ns)
    assert down.value.reason == ("node_down", "a")
    with pytest.raises(AgentDown):  # also through a fresh lookup
        gray.ask("keeper", "four", timeout=30, namespace=ns)
    assert gray.whereis("keeper", namespace=ns) is None
    assert gray.list_agents(namespace=ns) == []
    # Its names can be taken again elsewhere.
    gray.start_agent(agents.Echo, name="keeper", backend=agents.MockBackend, node="b",
                     namespace=ns)
    assert gray.ask("keeper", "five", timeout=10, namespace=ns).text == "five"
    # The incarnation that found the intensity spent reaped the second one's child first.
    assert pid_gone(second["child_pid"], 10)


def _directory_info(directory: object, timeout: float) -> dict[str, int]:
    # The directory's info, once Ray has restarted it (a call in flight at its death fails).
    deadline = time.monotonic() + timeout
    while True:
        try:
            return ray.get(directory.info.remote(), timeout=10)  # type: ignore[attr-defined]
        except ray.exceptions.RayActorError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_a_killed_directory_comes_back_with_its_names_sessions_and_restart_counts(
        cluster) -> None:
    ns = cluster.namespace
    node = cluster.start_node("d", [gen_agent.child_spec(
        agents.Echo, name="kept", backend=agents.ResumableMock, restart="permanent",
        resume_session=True, session_id="s-1")], node_max_restarts=2, node_max_seconds=60)
    cluster.start_node("e")
    gray.start_agent(agents.Echo, name="added", backend=agents.ResumableMock, node="d",
                     session_id="s-add", namespace=ns)
    gray.start_agent(agents.Echo, name="gone", backend=agents.MockBackend, node="d",
                     namespace=ns)
    gray.stop("gone", namespace=ns)
    assert gray.ask("kept", "one", timeout=10, namespace=ns).session_id == "s-1"
    assert gray.ask("added", "one", timeout=10, namespace=ns).session_id == "s-add"
    os.kill(node.pid, signal.SIGKILL)
    restarted_pid = node.wait_ready(60)
    directory = ray.get_actor(DIRECTORY_NAME, namespace=ns)
    assert ray.get(directory.node_restarts.remote("d")) == 1
    first = _directory_info(directory, 10)

    os.kill(first["pid"], signal.SIGKILL)
    assert pid_gone(first["pid"], 10)
    # Calls made while Ray restarts it wait for the new incarnation (none was in flight).
    gray.start_agent(agents.Echo, name="during", backend=agents.MockBackend, node="e",
                     namespace=ns)
    assert sorted(gray.list_agents(namespace=ns)) == ["added", "during", "kept"]
    gray.stop("during", namespace=ns)
    second = _directory_info(directory, 60)

    # Ray restarted it and it read everything back from the GCS store.
    assert second["pid"] != first["pid"]
    assert (second["names"], second["nodes"]) == (first["names"], first["nodes"]) == (2, 2)
    gray_client._forget_all()  # no cached lookup: every one goes to the new incarnation
    assert sorted(gray.list_agents(namespace=ns)) == ["added", "kept"]
    assert gray.whereis("kept", namespace=ns) == "d"
    with pytest.raises(AlreadyStarted):  # the claim is still held, cluster-wide
        gray.start_agent(agents.Echo, name="kept", backend=agents.MockBackend, node="e",
                         namespace=ns)
    assert ray.get(directory.node_restarts.remote("d")) == 1
    # The node's next death is restored from the new directory: sessions resumed, the agent
    # stopped for good not restored, and the restart counted in the same window.
    os.kill(restarted_pid, signal.SIGKILL)
    assert node.wait_ready(60) != restarted_pid
    assert gray.ask("kept", "two", timeout=60, namespace=ns).text == "resumed s-1: two"
    assert gray.ask("added", "two", timeout=10, namespace=ns).text == "resumed s-add: two"
    assert sorted(gray.list_agents(namespace=ns)) == ["added", "kept"]
    assert ray.get(directory.node_restarts.remote("d")) == 2


def test_an_in_node_supervisor_giving_up_restarts_the_node_until_the_node_intensity_is_spent(
        cluster) -> None:
    # Two layers: the node supervisor allows no restart (max_restarts=0), so one callback
    # crash spends it; it gives up, the node process exits (escalation), Ray restarts it,
    # and the directory counts that restart against node_max_restarts=1.
    ns = cluster.namespace
    node = cluster.start_node("esc", [gen_agent.child_spec(
        agents.Echo, name="brittle", backend=agents.MockBackend, restart="permanent")],
        max_restarts=0, max_seconds=60, node_max_restarts=1, node_max_seconds=60)
    directory = ray.get_actor(DIRECTORY_NAME, namespace=ns)
    first_pid = node.pid
    assert gray.ask("brittle", "one", timeout=10, namespace=ns).text == "one"
    assert ray.get(directory.node_restarts.remote("esc")) == 0
    with pytest.raises(AgentDown) as down:
        gray.ask("brittle", "crash", timeout=30, namespace=ns)
    # The crash's own reason, or node_down when the process exited before its reply left.
    assert (down.value.reason[:2] == ("callback_failed", "error")
            or down.value.reason == ("node_down", "esc")), down.value.reason
    assert pid_gone(first_pid, 30)  # the escalation ended the node process
    second_pid = node.wait_ready(60)
    assert second_pid != first_pid
    assert ray.get(directory.node_restarts.remote("esc")) == 1
    assert ray.get(directory.node_status.remote("esc")) == ("up", None)
    # The restarted node started its child again.
    assert gray.ask("brittle", "two", timeout=30, namespace=ns).text == "two"
    status = gray.status("brittle", timeout=10, namespace=ns)
    assert status.agent_state == {"turns": 1, "node_pid": second_pid}
    # The second escalation within node_max_seconds exceeds node_max_restarts=1: the node
    # stays down and its callers get node_down.
    with pytest.raises(AgentDown):
        gray.ask("brittle", "crash", timeout=30, namespace=ns)
    assert pid_gone(second_pid, 30)
    with pytest.raises(AgentDown) as gone:
        node.wait_ready(60)
    assert gone.value.reason == ("node_down", "esc")
    assert ray.get(directory.node_status.remote("esc")) == ("down", INTENSITY_REASON)
    assert ray.get(directory.node_restarts.remote("esc")) == 2
    with pytest.raises(AgentDown) as after:
        gray.ask("brittle", "three", timeout=30, namespace=ns)
    assert after.value.reason == ("node_down", "esc")


def test_an_ask_in_flight_on_a_killed_node_fails_with_node_down(cluster) -> None:
    ns = cluster.namespace
    node = cluster.start_node("a", [gen_agent.child_spec(
        agents.Echo, name="busy", backend=agents.MockBackend, restart="permanent",
        delay_s=30.0)])
    errors: list[BaseException] = []
    started = threading.Event()

    def caller() -> None:
        started.set()
        try:
            gray.ask("busy", "long", timeout=60, namespace=ns)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=caller)
    thread.start()
    started.wait(5)
    deadline = time.monotonic() + 10
    while gray.status("busy", timeout=10, namespace=ns).state != "processing":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(node.pid, signal.SIGKILL)
    thread.join(30)
    assert not thread.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], AgentDown)
    assert errors[0].reason == ("node_down", "a")


def test_stream_yields_events_in_order_then_the_response(cluster) -> None:
    ns = cluster.namespace
    cluster.start_node("a", [gen_agent.child_spec(
        agents.Echo, name="streamer", backend=agents.MockBackend,
        scripts=[agents.mock.text_turn(["one ", "two ", "three"])])])
    items = list(gray.stream("streamer", "go", timeout=10, namespace=ns))
    response = items[-1]
    assert isinstance(response, gen_agent.Response) and response.text == "one two three"
    deltas = [e.data["text"] for e in items[:-1] if e.kind == "text"]
    assert deltas == ["one ", "two ", "three"]
    assert items[-2].kind == "result"
    stamps = [e.timestamp for e in items[:-1]]
    assert stamps == sorted(stamps)
    with pytest.raises(TurnError) as failed:
        list(gray.stream("streamer", "again", timeout=10, namespace=ns))
    assert failed.value.reason == "no_script"


def test_a_stopped_agent_is_not_restored_by_a_node_restart(cluster) -> None:
    ns = cluster.namespace
    node = cluster.start_node("a", [
        gen_agent.child_spec(agents.Echo, name="stays", backend=agents.MockBackend,
                             restart="permanent"),
        gen_agent.child_spec(agents.Echo, name="goes", backend=agents.MockBackend,
                             restart="permanent"),
    ])
    gray.stop("goes", namespace=ns)
    os.kill(node.pid, signal.SIGKILL)
    node.wait_ready(60)
    assert gray.list_agents(namespace=ns) == ["stays"]
    assert node.info()["agents"] == 1
    with pytest.raises(AgentNotFound):
        gray.ask("goes", "x", timeout=10, namespace=ns)
    # An abandoned stream is forgotten by the node (the turn itself goes on).
    events = gray.stream("stays", "x", timeout=10, namespace=ns)
    first = next(events)
    assert first.kind == "text"
    events.close()


def test_a_restarted_node_restores_stored_agent_state(cluster, tmp_path) -> None:
    from gen_agent.store import SQLiteStore

    ns = cluster.namespace
    store = SQLiteStore(tmp_path / "sessions.db")  # travels to the node as its settings
    node = cluster.start_node("a", [gen_agent.child_spec(
        agents.Counter, name="counter", backend=agents.MockBackend, restart="permanent",
        store=store, session_key="counter")])
    for prompt in ("1", "2", "3"):
        gray.ask("counter", prompt, timeout=10, namespace=ns)
    assert gray.status("counter", timeout=10, namespace=ns).agent_state == {"turns": 3}
    os.kill(node.pid, signal.SIGKILL)
    node.wait_ready(60)  # the dead owner's lease is taken over at once (same host)
    assert gray.status("counter", timeout=10, namespace=ns).agent_state == {"turns": 3}
    gray.ask("counter", "4", timeout=10, namespace=ns)
    assert gray.status("counter", timeout=10, namespace=ns).agent_state == {"turns": 4}
    store.close()
