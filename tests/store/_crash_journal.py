"""Crash trials of the tool journal: agents on `AnthropicAPI` (against the loopback
`ScriptedModelServer` of the calling process) with two Python tools, `lookup` (read-only)
and `refund` (side-effecting: it appends a line to a file), SIGKILLed in one of five phases
of a turn, then restarted on the same key until every turn is answered.

Each trial is a child process forked from a *zygote*: one process that imported gen_agent,
the anthropic SDK and this module once, then forks a child per trial (single-threaded at the
fork) and reports its exit. A child starts its agent on the trial's key, acts on what it finds
(`resend` of an interrupted turn; a turn cut after its answer was stored is reconciled in
`handle_info`), then asks the trial's prompt with one phase armed. The kill moment is driven
by logs, never by a delay: the child prints `{"at": phase}` at the armed point and waits, the
parent SIGKILLs it on reading that line; the `after_tool` point is the model server's own:
the request carrying both tool results is held unanswered and reported to the parent.

Phases: `before_tool` (refund entered, before its effect), `inside_tool` (its line written,
before it returns), `after_tool` (both results sent back, no reply yet), `handle_response`
(inside the decision callback: the conversation is stored, the state is not) and `reply`
(the final reply streaming: the first text event).

The fake model asks, for the prompt `order N`, for `lookup(N)` and `refund(N)` (new call ids
each time) whenever the history does not show both outcomes, and answers `done N` once it
does; so a missing journal guard would run refund twice. `check` then asserts: the file has
no order twice (and none for a kill before the effect), every in-doubt refund was reported,
every order answered exactly once in the stored conversation, and the state counts exactly
the answered turns.

Run `python _crash_journal.py zygote` to be a zygote (the harness does).
"""

from __future__ import annotations

import json
import os
import queue
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from gen_agent.tools import ToolContext, tool

PHASES = ("before_tool", "inside_tool", "after_tool", "handle_response", "reply")
_ORDER = re.compile(r"^order (\d+)$")


# ====================================================================== child side
_ARMED: dict[str, Any] = {"phase": None, "effects": ""}
_OUT = threading.Lock()


def emit(**fields: Any) -> None:
    with _OUT:
        sys.stdout.write(json.dumps(fields, default=str) + "\n")
        sys.stdout.flush()


def _pause(phase: str) -> None:
    if _ARMED["phase"] == phase:
        _ARMED["phase"] = None
        emit(at=phase, pid=os.getpid())
        threading.Event().wait(60)  # the parent kills us now
        os._exit(3)


@tool
def lookup(order: str) -> str:
    """Look an order up."""
    return f"order {order} is open"


@tool(side_effects=True)
def refund(order: str, ctx: ToolContext) -> str:
    """Refund an order (appends one line to the effects file)."""
    _pause("before_tool")
    fd = os.open(_ARMED["effects"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{order}\t{ctx.call_id}\t{ctx.idempotency_key}\n".encode())
    finally:
        os.close(fd)
    _pause("inside_tool")
    return f"refunded {order}"


def _child(config: dict[str, Any]) -> None:
    import msgspec

    import gen_agent
    from gen_agent.backends.anthropic import AnthropicAPI
    from gen_agent.store import InterruptedTurn, SQLiteStore

    _ARMED["effects"] = config["effects"]

    class Shop(gen_agent.GenAgent):
        persist_state = True

        def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
            return dict(opts["backend_opts"]), {"answered": []}

        def handle_stream_event(self, event: Any, state: Any) -> Any:
            if event.kind == "text":
                _pause("reply")
            return state

        def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
            _pause("handle_response")
            return gen_agent.NoReply({"answered": [*state["answered"], response.text]})

        def handle_info(self, message: Any, state: Any) -> Any:
            if isinstance(message, InterruptedTurn) and message.phase == "after_response":
                # The reply was stored, its decision was not: make the state agree.
                return gen_agent.NoReply({"answered": [*state["answered"], message.response]})
            return gen_agent.NoReply(state)

    store = SQLiteStore(config["db"])
    key = config["key"]
    opts = {"api_key": "test-key", "base_url": config["url"], "model": "claude-test",
            "tools": [lookup, refund]}
    with gen_agent.AgentSystem():
        gen_agent.start_agent(Shop, name=key, backend=AnthropicAPI, store=store,
                              session_key=key, backend_opts=opts, watchdog_ms=60_000)
        interrupted = gen_agent.status(key).store.interrupted_turn
        if interrupted is not None:
            emit(interrupted={
                "prompt": interrupted.prompt, "phase": interrupted.phase,
                "finished": [e.tool for e in interrupted.finished],
                "in_doubt": [e.tool for e in interrupted.in_doubt],
                "usage": interrupted.usage})
            if interrupted.phase == "turn":
                response = gen_agent.resend(key, interrupted, timeout=60)
                emit(answered=interrupted.prompt, text=response.text)
        if config.get("prompt") is not None:
            _ARMED["phase"] = config.get("phase")
            response = gen_agent.ask(key, config["prompt"], timeout=60)
            emit(answered=config["prompt"], text=response.text)
        status = gen_agent.status(key)
        emit(done=True, state=msgspec.to_builtins(status.agent_state),
             last_error=status.store.last_error)
    store.close()


def _zygote() -> int:
    """Read one trial config per stdin line; fork a child for each; report its exit."""
    import anthropic  # noqa: F401 - imported once, before any fork

    import gen_agent
    import gen_agent.backends.anthropic
    import gen_agent.store  # noqa: F401

    emit(zygote=os.getpid(), threads=threading.active_count())
    for line in sys.stdin:
        config = json.loads(line)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                _child(config)
            except BaseException as exc:
                emit(child_failed=repr(exc))
                code = 1
            sys.stdout.flush()
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        emit(exited=pid, signal=os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
             code=os.WEXITSTATUS(status) if os.WIFEXITED(status) else None)
    return 0


# ====================================================================== parent side
class Model:
    """The fake model (a `ScriptedModelServer` script item): tools until both outcomes show,
    then `done N`; holds the armed `after_tool` request and reports it."""

    def __init__(self, events: queue.Queue[dict[str, Any]]) -> None:
        self.events = events
        self.armed: str | None = None  # the order whose after_tool request is held
        self.calls = Counter[str]()  # tool calls the model asked for, per order

    def __call__(self, request: Any) -> Any:
        from gen_agent.testing._model_server import Reply
        from gen_agent.testing._script import ToolUseBlock

        messages = request.body["messages"]
        start = max(i for i, m in enumerate(messages) if m["role"] == "user"
                    and _text(m.get("content")) is not None)
        match = _ORDER.match(_text(messages[start]["content"]) or "")
        order = match.group(1) if match else "?"
        names: dict[str, str] = {}
        shown: set[str] = set()
        for message in messages[start:]:
            for block in message.get("content") if isinstance(message.get("content"),
                                                              list) else ():
                if block.get("type") == "tool_use":
                    names[block["id"]] = block["name"]
                elif block.get("type") == "tool_result" and block["tool_use_id"] in names:
                    shown.add(names[block["tool_use_id"]])
        missing = [name for name in ("lookup", "refund") if name not in shown]
        if missing:
            self.calls[order] += len(missing)
            return Reply.message(*(ToolUseBlock(f"toolu_{uuid.uuid4().hex[:12]}", name,
                                                {"order": order}) for name in missing),
                                 stop_reason="tool_use")
        if self.armed == order:
            self.armed = None
            self.events.put({"at": "after_tool", "server": True})
            return Reply.text(f"done {order}", delay=30.0)  # held: the child dies first
        return Reply.text(f"done {order}")


def _text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [b.get("text") for b in content if b.get("type") == "text"]
        if texts and all(isinstance(t, str) for t in texts):
            return "".join(texts)
    return None


class Zygote:
    """The zygote process and a reader of its (and its children's) JSON lines."""

    def __init__(self, workdir: Path, events: queue.Queue[dict[str, Any]]) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        self._stderr = (workdir / "zygote.err").open("w")
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "zygote"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._stderr, text=True, env=env)
        self.events = events
        self._reader = threading.Thread(target=self._read, name="crash-zygote", daemon=True)
        self._reader.start()
        hello = self.next(60)
        assert hello.get("threads") == 1, hello  # a single-threaded parent for every fork

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.put(json.loads(line))
        self.events.put({"zygote_gone": self.proc.poll()})

    def next(self, timeout: float) -> dict[str, Any]:
        try:
            item = self.events.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no line from the crash child within {timeout} s") from None
        if "zygote_gone" in item or "child_failed" in item:
            raise AssertionError(f"crash zygote: {item}")
        return item

    def run(self, config: dict[str, Any], timeout: float = 60.0) -> list[dict[str, Any]]:
        """Run one trial; SIGKILL the child when it reaches its armed phase. Returns the
        lines, ending with the zygote's `exited`."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(config) + "\n")
        self.proc.stdin.flush()
        lines: list[dict[str, Any]] = []
        pid: int | None = None
        killed = False
        deadline = time.monotonic() + timeout
        while True:
            item = self.next(max(0.1, deadline - time.monotonic()))
            lines.append(item)
            if "pid" in item:
                pid = item["pid"]
            if "at" in item and not killed:
                target = pid if pid is not None else _child_pid(self.proc.pid)
                os.kill(target, signal.SIGKILL)  # our own trial child, by its id
                killed = True
            if "exited" in item:
                return lines

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self._reader.join(timeout=30)  # EOF once the zygote exited
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr.close()


def _child_pid(zygote: int) -> int:
    """The zygote's one running child (a server-side kill point does not know its pid)."""
    children = Path(f"/proc/{zygote}/task/{zygote}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def run_trials(workdir: Path, trials: int, keys: int = 2, seed: int = 0) -> dict[str, Any]:
    """Run `trials` kills (the phases balanced, in a random order), then finish every key;
    check the invariants. Returns the counts (phases hit, per the logs) and findings."""
    from gen_agent.testing._model_server import ScriptedModelServer

    events: queue.Queue[dict[str, Any]] = queue.Queue()
    model = Model(events)
    db, effects = workdir / "shop.db", workdir / "refunds.txt"
    plan = [PHASES[i % len(PHASES)] for i in range(trials)]
    random.Random(seed).shuffle(plan)
    hits: Counter[str] = Counter()
    expected: dict[str, str] = {}  # order -> the phase it was killed in
    reports: dict[str, dict[str, Any]] = {}  # order -> what the next start found
    answered: Counter[str] = Counter()
    finals: dict[str, Any] = {}
    started = time.monotonic()
    with ScriptedModelServer(handler_timeout=60.0) as server:
        server.enqueue(*[model] * (trials * 12 + keys * 12))
        zygote = Zygote(workdir, events)
        try:
            for index, phase in enumerate(plan):
                key = f"shop-{index % keys}"
                prompt = f"order {index}"
                model.armed = str(index) if phase == "after_tool" else None
                lines = zygote.run({"db": str(db), "effects": str(effects), "url": server.url,
                                    "key": key, "prompt": prompt, "phase": phase})
                _collect(lines, reports, answered)
                hit = [item["at"] for item in lines if "at" in item]
                assert hit == [phase], (index, phase, lines)
                hits[phase] += 1
                expected[str(index)] = phase
            for index in range(keys):
                key = f"shop-{index}"
                lines = zygote.run({"db": str(db), "effects": str(effects), "url": server.url,
                                    "key": key, "prompt": None, "phase": None})
                _collect(lines, reports, answered)
                done = [item for item in lines if item.get("done")]
                assert done and lines[-1]["code"] == 0, lines
                finals[key] = done[0]
        finally:
            zygote.close()
    elapsed = time.monotonic() - started
    return check(db, effects, expected, reports, answered, finals, hits, keys, elapsed,
                 model)


def _collect(lines: list[dict[str, Any]], reports: dict[str, dict[str, Any]],
             answered: Counter[str]) -> None:
    for item in lines:
        if "interrupted" in item:
            prompt = item["interrupted"]["prompt"] or ""
            reports[prompt.removeprefix("order ")] = item["interrupted"]
        if "answered" in item:
            answered[item["answered"].removeprefix("order ")] += 1


def check(db: Path, effects: Path, expected: dict[str, str], reports: dict[str, Any],
          answered: Counter[str], finals: dict[str, Any], hits: Counter[str], keys: int,
          elapsed: float, model: Model) -> dict[str, Any]:
    """Assert the invariants (see the module docstring); return the counts."""
    from gen_agent.store import SQLiteStore

    lines = effects.read_text().splitlines() if effects.exists() else []
    refunds = Counter(line.split("\t")[0] for line in lines)
    twice = sorted(order for order, count in refunds.items() if count > 1)
    assert not twice, f"refund ran twice for orders {twice}"
    for order, phase in expected.items():
        want = 0 if phase == "before_tool" else 1
        assert refunds[order] == want, (order, phase, refunds[order])
        report = reports.get(order)
        if phase == "handle_response":
            assert report is not None and report["phase"] == "after_response", (order, report)
            continue
        assert report is not None and report["phase"] == "turn", (order, phase, report)
        if phase in ("before_tool", "inside_tool"):
            assert "refund" in report["in_doubt"], (order, phase, report)  # reported
        else:
            assert sorted(report["finished"]) == ["lookup", "refund"], (order, phase, report)
    store = SQLiteStore(db)
    try:
        replies: Counter[str] = Counter()
        for index in range(keys):
            key = f"shop-{index}"
            record = store.load(key)
            assert record is not None and record.in_flight is None
            history = record.conversation.get("history") or []
            texts = [_text(m.get("content")) for m in history if m.get("role") == "assistant"]
            done = [t for t in texts if t and t.startswith("done ")]
            replies.update(t.removeprefix("done ") for t in done)
            state = finals[key]["state"]["answered"]
            assert state == done, (key, state, done)  # the state agrees with the conversation
            assert finals[key]["last_error"] is None
            assert store.journal(key) == []
    finally:
        store.close()
    lost = sorted(set(expected) - set(replies))
    duplicated = sorted(order for order, count in replies.items() if count > 1)
    assert not lost and not duplicated, (lost, duplicated)
    return {"trials": len(expected), "hits": dict(hits), "refund_lines": len(lines),
            "double_refunds": len(twice), "lost_turns": len(lost),
            "duplicated_turns": len(duplicated),
            "in_doubt_reported": sum(1 for r in reports.values() if "refund" in r["in_doubt"]),
            "model_tool_calls": sum(model.calls.values()), "seconds": round(elapsed, 1)}


if __name__ == "__main__":
    if sys.argv[1:] == ["zygote"]:
        sys.exit(_zygote())
    sys.exit(f"usage: {sys.argv[0]} zygote")
