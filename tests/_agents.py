"""The helpers the tests share: one `start`, the probing agent classes, waits on threads.

Helpers:
    WAIT_S: the bound (seconds) of every wait in these tests.
    CallLog: a thread-safe, waitable log of callback calls.
    Probe: a `GenAgent` that logs every callback into a `CallLog` and lets a test override
        any callback with a plain function passed in the start options (`hooks=`).
    ProbeWithInfo: `Probe` plus `handle_info` (whose mere presence changes buffering, §3.9).
    Scripted: the plainest agent on `MockBackend`: its `scripts` option goes to the backend.
    PassThrough: the plainest agent on any backend: its `backend_opts` option goes to it.
    start(): start an agent on `MockBackend` with scripts.
    in_thread(): run a blocking call (an ask) in a thread; returns a `Future`.
    failure(): the exception such a `Future` ended with (bounded wait).
    text_events(): `text` events with no terminal event.
    Hold: a script that streams some events, then holds the turn mid-stream until released.
    log_telemetry(): put telemetry events of one agent into a `CallLog`, so the order of
        callbacks and telemetry can be asserted together (handlers run in the agent thread).
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any

import gen_agent
from gen_agent import GenAgent, NoReply, Proceed, telemetry
from gen_agent._event import Event
from gen_agent.backends.mock import MockBackend

WAIT_S = 5.0
"""Seconds every wait in these tests may take at most."""


class CallLog:
    """A thread-safe list of tuples `(callback_name, *details)` that a test can wait on."""

    def __init__(self) -> None:
        self._items: list[tuple[Any, ...]] = []
        self._cond = threading.Condition()

    def add(self, *entry: Any) -> None:
        """Append one entry and wake waiters."""
        with self._cond:
            self._items.append(entry)
            self._cond.notify_all()

    @property
    def entries(self) -> list[tuple[Any, ...]]:
        """A copy of every entry, in order."""
        with self._cond:
            return list(self._items)

    def names(self) -> list[Any]:
        """The first element of every entry, in order."""
        return [entry[0] for entry in self.entries]

    def of(self, name: str) -> list[tuple[Any, ...]]:
        """Every entry whose first element is `name`."""
        return [entry for entry in self.entries if entry[0] == name]

    def wait_for(self, match: Callable[[tuple[Any, ...]], bool] | tuple[Any, ...],
                 timeout: float = WAIT_S) -> tuple[Any, ...]:
        """Return the first entry matching `match` (a predicate, or an exact entry).

        Raises:
            TimeoutError: nothing matched within `timeout` seconds.
        """
        predicate = match if callable(match) else (lambda entry: entry == match)
        with self._cond:
            found: list[tuple[Any, ...]] = []

            def ready() -> bool:
                found[:] = [entry for entry in self._items if predicate(entry)][:1]
                return bool(found)

            if not self._cond.wait_for(ready, timeout):
                raise TimeoutError(f"no log entry matched within {timeout} s: {self._items}")
            return found[0]

    def count(self, name: str) -> int:
        """How many entries are named `name`."""
        return len(self.of(name))


class Probe(GenAgent):
    """An agent that logs every callback into `opts["log"]` and delegates to `opts["hooks"]`.

    Start options read by `init_agent`: `scripts` (mock scripts), `state` (initial state,
    default None), `log` (a `CallLog`), `hooks` (dict callback name -> function taking the
    callback's arguments and returning its result; the default behaviour otherwise).
    """

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        self.log: CallLog = opts.get("log") or CallLog()
        self.hooks: dict[str, Callable[..., Any]] = opts.get("hooks") or {}
        self.log.add("init_agent", gen_agent.current_name())
        return {"scripts": list(opts.get("scripts", []))}, opts.get("state")

    def _hook(self, name: str, default: Any, *args: Any) -> Any:
        hook = self.hooks.get(name)
        return default if hook is None else hook(*args)

    def pre_run(self, state: Any) -> Any:
        self.log.add("pre_run", state)
        return self._hook("pre_run", state, state)

    def pre_turn(self, prompt: str, state: Any) -> Any:
        self.log.add("pre_turn", prompt)
        return self._hook("pre_turn", Proceed(prompt, state), prompt, state)

    def handle_stream_event(self, event: Event, state: Any) -> Any:
        self.log.add("stream", event.kind)
        return self._hook("handle_stream_event", state, event, state)

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        self.log.add("handle_response", response.prompt)
        return self._hook("handle_response", NoReply(state), ref, response, state)

    def handle_error(self, ref: Any, reason: Any, state: Any) -> Any:
        self.log.add("handle_error", reason)
        return self._hook("handle_error", NoReply(state), ref, reason, state)

    def handle_event(self, event: Any, state: Any) -> Any:
        self.log.add("handle_event", event)
        return self._hook("handle_event", NoReply(state), event, state)

    def post_turn(self, outcome: tuple[str, Any], ref: Any, state: Any) -> Any:
        self.log.add("post_turn", outcome[0])
        return self._hook("post_turn", state, outcome, ref, state)

    def post_run(self, state: Any) -> None:
        self.log.add("post_run", state)
        self._hook("post_run", None, state)

    def terminate_agent(self, reason: Any, state: Any) -> None:
        self.log.add("terminate_agent", reason)
        self._hook("terminate_agent", None, reason, state)


class ProbeWithInfo(Probe):
    """`Probe` that also defines `handle_info` (so info messages are delivered/buffered)."""

    def handle_info(self, message: Any, state: Any) -> Any:
        self.log.add("handle_info", message)
        return self._hook("handle_info", NoReply(state), message, state)


class Scripted(GenAgent):
    """Gives the backend its `scripts` start option (`[]` when absent) and answers nobody."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": list(opts.get("scripts", []))}, None

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return NoReply(state)


class PassThrough(GenAgent):
    """Gives the backend its `backend_opts` start option as is and answers nobody."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return opts["backend_opts"], None

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return NoReply(state)


def start(module: type = Probe, name: Any = "a", scripts: Iterable[Any] = (), *,
          backend: Any = MockBackend, **opts: Any) -> gen_agent.AgentRef:
    """Start `module` as `name` on `backend` (`MockBackend`) with `scripts`; other options pass
    through. The one start helper of the tests: a test file binds its agent class and name
    with `functools.partial(start, Agent, NAME)`."""
    return gen_agent.start_agent(module, name=name, backend=backend,
                                 scripts=list(scripts), **opts)


def in_thread(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
    """Run `fn(*args, **kwargs)` in a new daemon thread; its outcome lands in the Future."""
    future: Future[Any] = Future()

    def run() -> None:
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed to the test through the future
            future.set_exception(exc)

    threading.Thread(target=run, name="test-caller", daemon=True).start()
    return future


def failure(future: Future[Any]) -> BaseException:
    """The exception `future` ended with (bounded wait); fails if it succeeded."""
    exc = future.exception(WAIT_S)
    assert exc is not None, f"expected a failure, got {future.result()!r}"
    return exc


class Hold:
    """A script that yields `before`, then holds the turn mid-stream until `release()`.

    `streaming` is set once `before` was pulled (the turn is streaming). The hold ends on
    `release()` or after `WAIT_S` seconds, then `after` is yielded. Unlike a mock gate it
    does not wake on cancellation: release it in the test (`with hold:` does).
    """

    def __init__(self, before: Sequence[Event], after: Sequence[Event]) -> None:
        self.before = list(before)
        self.after = list(after)
        self.streaming = threading.Event()
        self._released = threading.Event()

    def __call__(self, prompt: str) -> Iterator[Event]:
        yield from self.before
        self.streaming.set()
        self._released.wait(WAIT_S)
        yield from self.after

    def wait_streaming(self) -> None:
        """Wait until the turn is held mid-stream."""
        assert self.streaming.wait(WAIT_S), "the turn never reached the hold"

    def release(self) -> None:
        """Let the stream go on."""
        self._released.set()

    def __enter__(self) -> Hold:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@contextlib.contextmanager
def log_telemetry(log: CallLog, agent: Any,
                  events: Iterable[Sequence[str]] = telemetry.EVENTS) -> Iterator[CallLog]:
    """Append `("telemetry", "turn.start", metadata)`-style entries for `agent`'s events."""
    handler_id = f"test-server-{uuid.uuid4().hex}"

    def handle(name: tuple[str, ...], measurements: dict[str, Any],
               metadata: dict[str, Any], _config: Any) -> None:
        if metadata.get("agent") == agent:
            log.add("telemetry", ".".join(name[1:]), metadata)

    telemetry.attach_many(handler_id, list(events), handle)
    try:
        yield log
    finally:
        telemetry.detach(handler_id)


def text_events(*chunks: str) -> list[Event]:
    """`text` events only, no terminal (a stream that ends without one)."""
    return [Event.new("text", {"text": chunk}) for chunk in chunks]


__all__ = [
    "WAIT_S", "CallLog", "Hold", "PassThrough", "Probe", "ProbeWithInfo", "Scripted", "failure",
    "in_thread", "log_telemetry", "start", "text_events",
]
