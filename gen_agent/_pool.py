"""`Pool`: N supervised workers of one agent class serving a stream of independent prompts.

The Elixir guides keep pools a recipe (docs/pages/contract.md#s10, "Pool"; docs: the pattern
recipes): long-lived workers that never halt, a dispatcher that hands out tasks and surfaces
overload per task, and quiescence read from `runtime_snapshot`. This module packages that recipe on
top of `Supervisor`:

- the workers are `permanent` children of a one_for_one `Supervisor` named `<prefix>-<i>`;
- tasks wait in a pool-side queue and a worker is handed one only when it has capacity
  (`max_in_flight`, default 1), through `tell_with_completion` bound to that incarnation; so
  work not yet dispatched to a worker survives that worker's crash and goes to its
  replacement (or, with least-loaded routing, to any worker);
- a task in flight on a worker that dies fails with `("worker_down", exit_reason)`: it is
  never silently retried, because the prompt may be what crashed the worker;
- tasks are independent: each runs on a fresh backend session of its worker
  (`RequestOptions(fresh_session=True)`), unless the pool is built with
  `shared_conversation=True`;
- a `RetryPolicy` retries retryable failures (`BackendError.retryable`, a watchdog
  `"timeout"`) after a backoff that honours the provider's `retry_after`.

One dispatcher thread owns the talking to workers; completions, worker starts and exits are
messages in its inbox, so they are handled in order.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any, Literal

import msgspec
from loguru import logger

from gen_agent import telemetry
from gen_agent._accounting import own_budget
from gen_agent._agent_ref import AgentRef
from gen_agent._child_spec import build_child_spec
from gen_agent._context import capture_trace_context
from gen_agent._errors import CallTimeout, GenAgentError, RequestError, TurnError
from gen_agent._pool_dispatch import (
    DispatchMsg,
    ForgetMsg,
    PoolDispatcher,
    PoolDispatchMixin,
    StopMsg,
    SupervisorDownMsg,
)
from gen_agent._request_options import RequestOptions, check_options
from gen_agent._response import Response
from gen_agent._size import term_size
from gen_agent._status import OverloadInfo
from gen_agent._supervisor import Supervisor
from gen_agent._system import AgentSystem, current_system
from gen_agent._timers import check_duration_ms, wait_s
from gen_agent.backend import BackendError

__all__ = ["Pool", "PoolRef", "PoolStatus", "RetryPolicy", "WorkerInfo"]

Routing = Literal["least_loaded", "round_robin"]

_pool_ids = itertools.count(1)
_task_ids = itertools.count(1)
# wait_idle wakes on worker state telemetry; this bounds a wait for changes that emit none.
_IDLE_RECHECK_S = 0.1


class PoolRef(msgspec.Struct, frozen=True):
    """An opaque reference to one task submitted to a `Pool`. Hashable; never reused."""

    id: int


class RetryPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """How a `Pool` retries a failed task (the task goes back to the pool's queue, front).

    Fields:
        attempts: the most attempts per task, the first included (>= 1; default 3).
        base_delay_ms: the delay before attempt 2 in milliseconds; attempt k waits
            `base_delay_ms * 2 ** (k - 2)`, at most `max_delay_ms` (default 500).
        max_delay_ms: the cap on a computed delay, milliseconds (default 30_000).
        honour_retry_after: wait at least the provider's `BackendError.retry_after_ms` when
            it is given (default True).
        retry_on: `fn(reason) -> bool` deciding what is retried; default: a `BackendError`
            whose `retryable` is set, and a watchdog `"timeout"`. `("worker_down", r)` is never
            retried (the prompt may be what crashed the worker).

    Raises:
        ValueError: a bound out of range (from the constructor).
    """

    attempts: int = 3
    base_delay_ms: int = 500
    max_delay_ms: int = 30_000
    honour_retry_after: bool = True
    retry_on: Any = None

    def __post_init__(self) -> None:
        _check_count("attempts", self.attempts, 1)
        _check_count("base_delay_ms", self.base_delay_ms, 0)
        _check_count("max_delay_ms", self.max_delay_ms, 0)
        check_duration_ms("base_delay_ms", self.base_delay_ms)
        check_duration_ms("max_delay_ms", self.max_delay_ms)
        if self.retry_on is not None and not callable(self.retry_on):
            raise ValueError(f"retry_on must be callable, got {type(self.retry_on).__name__}")

    def should_retry(self, reason: Any, attempt: int) -> bool:
        """Whether a task whose attempt `attempt` failed with `reason` runs again."""
        if attempt >= self.attempts:
            return False
        if isinstance(reason, tuple) and reason and reason[0] in ("worker_down", "pool_down",
                                                                   "agent_terminated"):
            return False
        if self.retry_on is not None:
            return bool(self.retry_on(reason))
        return (isinstance(reason, BackendError) and reason.retryable) or reason == "timeout"

    def delay_ms(self, reason: Any, attempt: int) -> int:
        """The wait before the attempt after `attempt`, in milliseconds."""
        delay = min(self.max_delay_ms, self.base_delay_ms * 2 ** (attempt - 1))
        if self.honour_retry_after and isinstance(reason, BackendError):
            after = reason.retry_after_ms
            if after is not None:
                delay = max(delay, after)
        return delay


class WorkerInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One worker as `Pool.status` reports it.

    Fields:
        name: the worker's registered name.
        alive: whether an incarnation is running now.
        retiring: whether it is being removed by `resize`.
        in_flight: tasks handed to it and not finished (count).
        queued: tasks waiting in the pool for this worker (round_robin routing; count).
        dispatched: tasks handed to it so far, over all incarnations (count).
        completed: outcomes it delivered so far (count).
    """

    name: Any
    alive: bool
    retiring: bool
    in_flight: int
    queued: int
    dispatched: int
    completed: int


class PoolStatus(msgspec.Struct, frozen=True, kw_only=True):
    """A point-in-time view of a `Pool`.

    Fields:
        size: workers not being removed (count).
        queued: tasks waiting in the pool, not yet handed to a worker (count).
        in_flight: tasks handed to workers and not finished (count).
        workers: one `WorkerInfo` per worker, in start order.
        stopped: whether the pool has stopped.
    """

    size: int
    queued: int
    in_flight: int
    workers: tuple[WorkerInfo, ...]
    stopped: bool


class _Task:
    __slots__ = ("attempt", "done", "on_done", "options", "outcome", "prompt", "ref", "slot",
                 "tell_ref", "timer", "trace_context")

    def __init__(self, ref: PoolRef, prompt: str, options: RequestOptions,
                 on_done: Any = None) -> None:
        self.ref = ref
        self.prompt = prompt
        self.options = options
        self.attempt = 1
        self.tell_ref: Any = None  # the worker request of the attempt in flight
        self.timer: Any = None  # the retry timer while the task waits for its next attempt
        self.trace_context = capture_trace_context()  # the submitter's, when traced
        self.slot: _Slot | None = None  # round_robin: the worker it is assigned to
        self.done = threading.Event()
        self.outcome: tuple[str, Any] | None = None
        self.on_done = on_done


class _Slot:
    __slots__ = ("completed", "dispatched", "handle", "in_flight", "name", "queue", "retiring")

    def __init__(self, name: Any) -> None:
        self.name = name
        self.handle: Any = None  # the AgentHandle of the running incarnation
        self.in_flight: dict[int, _Task] = {}
        self.queue: deque[_Task] = deque()
        self.retiring = False
        self.dispatched = 0
        self.completed = 0

    def info(self) -> WorkerInfo:
        return WorkerInfo(name=self.name, alive=self.handle is not None,
                          retiring=self.retiring, in_flight=len(self.in_flight),
                          queued=len(self.queue), dispatched=self.dispatched,
                          completed=self.completed)


class Pool(PoolDispatchMixin):
    """A pool of `size` supervised workers of `module`, started on construction.

    Args:
        module: the `GenAgent` subclass every worker runs (it should not halt).
        size: how many workers (>= 1).
        backend: the workers' backend.
        name_prefix: workers are named `f"{name_prefix}-{i}"`; default `"pool<N>"`. (A
            `name=` option raises `TypeError` pointing here.)
        routing: `"least_loaded"` (default: an idle worker, else the one with the fewest
            tasks in flight) or `"round_robin"` (task k goes to worker k mod size, fixed at
            submit time: deterministic shares, e.g. 400 tasks on 4 workers give 100 each).
        max_in_flight: tasks handed to one worker at a time (>= 1, default 1); the others
            wait in the pool.
        max_queued_tasks: bound on tasks waiting in the pool (count); a task submitted
            beyond it fails with `("overloaded", OverloadInfo)`. None (default) = unbounded.
        max_restarts: restarts allowed within `max_seconds` (the supervisor's restart
            intensity, default 3); beyond it the pool stops and unfinished tasks fail with
            `("pool_down", reason)`.
        max_seconds: the restart-intensity window in seconds (default 5).
        shutdown_ms: each worker's graceful-stop window in milliseconds (default 5_000).
        shared_conversation: False (default): every task is independent, run on a fresh
            backend session of its worker (a worker's conversation does not grow with the
            tasks it served). True: tasks on one worker share its conversation.
        retry: a `RetryPolicy` for failed tasks; None (default) = no retries.
        system: the `AgentSystem` the workers run in (default: the current one).
        **opts: every other `start_agent` option, given to each worker (e.g. `watchdog_ms`,
            and the options for `init_agent`). With `store=` and `session_key=`
            (`gen_agent.store`), `session_key` is a prefix: worker `<name_prefix>-<i>` gets
            the key `"<session_key>/<name_prefix>-<i>"`, so each worker keeps its own durable
            session and a restarted worker resumes it. `max_cost_usd` (US dollars) and
            `max_total_tokens` (tokens) are not given to each worker: they cap the pool as a
            whole (its supervisor's `SharedBudget`); once reached, every worker refuses new
            tasks with `("budget_exceeded", BudgetExceeded)`. `budget=` is that cap given
            instead (`Supervisor(budget=)`: a `gen_agent.ray.ClusterBudget` spans nodes).

    Task outcomes: `result(ref)` returns the `Response`, or raises `TurnError` whose reason
    is the turn's own reason, `("overloaded", info)`, `"halted"`, `("worker_down", reason)`
    (its worker died, crashed or stopped, while it was in flight), `("pool_down", reason)`
    (the supervisor gave up), `"cancelled"` (`cancel`) or `("agent_terminated", "shutdown")`
    (the pool was stopped first). With a `retry` policy, the reason of the last attempt.

    Thread-safety: every method may be called from any thread, except from a worker's own
    callbacks (a worker waiting on its pool can deadlock).

    Mirrors: the Pool pattern of docs/pages/contract.md#s10 (recipe and `gen_agent_ensemble` Pool;
    docs: the pattern recipes).
    """

    def __init__(self, module: type, *, size: int, backend: Any, name_prefix: str | None = None,
                 routing: Routing = "least_loaded", max_in_flight: int = 1,
                 max_queued_tasks: int | None = None, max_restarts: int = 3,
                 max_seconds: float = 5.0, shutdown_ms: Any = 5_000,
                 shared_conversation: bool = False, retry: RetryPolicy | None = None,
                 system: AgentSystem | None = None, **opts: Any) -> None:
        if "name" in opts:  # each worker gets its own name; `name` would reach every one
            raise TypeError(f"Pool() takes no name= (got {opts['name']!r}): its workers are "
                            "named '<name_prefix>-<i>'; pass name_prefix= instead")
        _check_count("size", size, 1)
        _check_count("max_in_flight", max_in_flight, 1)
        if max_queued_tasks is not None:
            _check_count("max_queued_tasks", max_queued_tasks, 0)
        if routing not in ("least_loaded", "round_robin"):
            raise ValueError(f"routing must be 'least_loaded' or 'round_robin', got {routing!r}")
        if type(shared_conversation) is not bool:
            raise TypeError("shared_conversation must be a bool, got "
                            f"{type(shared_conversation).__name__}")
        if retry is not None and type(retry) is not RetryPolicy:
            raise TypeError(f"retry must be a RetryPolicy or None, got {type(retry).__name__}")
        self.retry = retry
        self._task_options = RequestOptions(fresh_session=not shared_conversation)
        self._retrying: set[_Task] = set()
        self.name_prefix = name_prefix if name_prefix is not None else f"pool{next(_pool_ids)}"
        self.routing = routing
        self.max_in_flight = max_in_flight
        self.max_queued_tasks = max_queued_tasks
        self._module, self._backend = module, backend
        # The spend caps cover the pool as a whole: its supervisor's shared budget, which
        # every worker (and each restart) checks at dispatch, not a cap per worker.
        budget = own_budget("Pool", opts.pop("budget", None), opts.pop("max_cost_usd", None),
                            opts.pop("max_total_tokens", None))
        self._worker_opts = {"shutdown_ms": shutdown_ms, **opts}
        self._indices = itertools.count(0)
        self._cond = threading.Condition()
        self._resize_lock = threading.Lock()
        self._slots: list[_Slot] = []
        self._shared: deque[_Task] = deque()
        self._tasks: dict[int, _Task] = {}
        self._rr = 0
        self._stopping = False
        self._stopped = threading.Event()
        self._down_reason: Any = None
        # The dispatcher's actor, made now so the supervisor's first reports queue in its
        # mailbox; its thread starts once the supervisor is up.
        self._dispatcher = PoolDispatcher(self)
        # The first spec warns (as "Pool") for the options, the others do not repeat it.
        specs = [self._spec(self._new_slot(), warn_as="Pool" if i == 0 else None)
                 for i in range(size)]
        self._system = system if system is not None else current_system()
        self._supervisor = Supervisor(
            specs, strategy="one_for_one", max_restarts=max_restarts, max_seconds=max_seconds,
            name=f"{self.name_prefix}-supervisor", listener=self._on_child_event,
            system=self._system, budget=budget)
        post = self._dispatcher.post
        self._supervisor.on_exit(lambda _s, reason: post(SupervisorDownMsg(reason)))
        self._dispatcher.launch()
        self._system._track("pool", self)

    def __repr__(self) -> str:
        return f"<Pool {self.name_prefix!r} size={self.size} {self.routing}>"

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ public API
    @property
    def size(self) -> int:
        """Workers not being removed (count)."""
        with self._cond:
            return sum(1 for slot in self._slots if not slot.retiring)

    @property
    def supervisor(self) -> Supervisor:
        """The `Supervisor` of the workers."""
        return self._supervisor

    def workers(self) -> list[Any]:
        """The names of the workers not being removed, in start order."""
        with self._cond:
            return [slot.name for slot in self._slots if not slot.retiring]

    def submit(self, prompt: str, *, on_done: Any = None, output: Any = None) -> PoolRef:
        """Queue `prompt` as one task and return its `PoolRef` at once.

        The task goes to a worker as soon as one has capacity (see `routing`). Read the
        outcome with `result`.

        Args:
            prompt: the task's prompt.
            on_done: optional `fn(ref)`, called once when the outcome is ready (then `result`
                returns at once). It runs in whichever pool thread settles the task, with the
                pool's lock held: it must be quick and must not call the pool (post to your
                own thread or queue). A raising `on_done` is logged (type only) and ignored.
            output: the type of a structured reply (as for `gen_agent.ask`), or None.

        Raises:
            TypeError: `prompt` is not a `str`, or `output` not a type msgspec can validate.
            RequestError: `"pool_stopped"`, the pool no longer accepts tasks.
        """
        if type(prompt) is not str:
            raise TypeError(f"submit: prompt must be a str, got {type(prompt).__name__}")
        options = check_options(self._task_options, "submit", output)
        task = _Task(PoolRef(next(_task_ids)), prompt, options, on_done)
        with self._cond:
            if self._stopping or self._stopped.is_set():
                raise RequestError("pool_stopped")
            self._tasks[task.ref.id] = task
            overload = self._overload(prompt)
            if overload is not None:
                self._resolve(task, ("error", overload))
                return task.ref
            if self.routing == "round_robin":
                active = [slot for slot in self._slots if not slot.retiring]
                task.slot = active[self._rr % len(active)]
                self._rr += 1
                task.slot.queue.append(task)
            else:
                self._shared.append(task)
        self._dispatcher.post(DispatchMsg())
        return task.ref

    def result(self, ref: PoolRef, timeout: float | None = None) -> Response:
        """Wait for the task's outcome and return its `Response`. Each outcome is handed out
        once: afterwards the ref is forgotten.

        Args:
            timeout: seconds to wait; None = forever.

        Raises:
            TurnError: the task failed (see the class docstring for the reasons).
            CallTimeout: no outcome within `timeout` (the task goes on; ask again later).
            LookupError: unknown ref, or its outcome was already collected.
        """
        return collect_result(self._cond, self._tasks, ref, timeout)

    def map(self, prompts: Iterable[str], timeout: float | None = None, *,
            return_exceptions: bool = False, output: Any = None) -> list[Any]:
        """Submit every prompt, then return their responses in the order of `prompts`.

        `prompts` is read to its end and every item checked before anything is submitted: a
        bad item fails the call, and no task is made (nothing to leak). So `prompts` must be
        finite; for an endless iterable, or to have results while prompts are still being
        made, use `imap`.

        Args:
            prompts: a finite iterable of `str` prompts (a bare `str` is refused).
            timeout: seconds for the whole batch; None = forever.
            return_exceptions: False (default): raise the first failure. True: a failed
                task's `TurnError` takes its place in the list (as `asyncio.gather` does),
                so one failure does not lose the other results.
            output: the type of every task's structured reply (as for `gen_agent.ask`), or
                None; each `Response.parsed` is then a validated value.

        Returns:
            One `Response` (or, with `return_exceptions`, `TurnError`) per prompt, in order.

        Raises:
            TypeError: `prompts` is a `str`, or holds a non-`str` (the message gives its
                index; nothing was submitted), or `output` is not a type msgspec validates.
            TurnError: the first failed task, in order (the others still run; their outcomes
                are dropped). CallTimeout: the batch did not finish in time (the tasks go on).
            RequestError: `"pool_stopped"` (the tasks already submitted are cancelled).
        """
        batch = checked_prompts(prompts, "map")
        check_options(self._task_options, "map", output)
        refs: list[PoolRef] = []
        try:
            for prompt in batch:
                refs.append(self.submit(prompt, output=output))
        except BaseException:
            self._drop_tasks(refs)
            raise
        limit = wait_s(timeout)  # beyond threading.TIMEOUT_MAX: forever
        deadline = None if limit is None else time.monotonic() + limit
        responses: list[Any] = []
        try:
            for ref in refs:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    responses.append(self.result(ref, remaining))
                except TurnError as exc:
                    if not return_exceptions:
                        raise
                    responses.append(exc)
        finally:
            self._forget(refs)
        return responses

    def imap(self, prompts: Iterable[str], timeout: float | None = None, *,
             return_exceptions: bool = False, output: Any = None,
             window: int | None = None) -> Iterator[Any]:
        """Stream `prompts` through the pool: yield their responses in order, taking each
        prompt from `prompts` only when there is room for it.

        At most `window` tasks are submitted and not yet yielded, so an endless iterable
        streams in bounded memory, and work starts before the last prompt is made. A bad
        item fails only itself: its place holds a `TypeError` (naming its index), as a failed
        task's place holds its `TurnError`. When the iteration ends early (`break`, `close`,
        a raised failure, a timeout, or `prompts` raising), the tasks taken ahead that have
        not started are cancelled and every outcome not yielded is dropped: nothing is left
        in the pool.

        Args:
            prompts: an iterable of `str` prompts, possibly endless (a bare `str` is refused).
            timeout: seconds for the whole iteration from this call (None = forever), as
                `concurrent.futures.Executor.map` counts it.
            return_exceptions: False (default): the first failure (a `TurnError`, or the
                `TypeError` of a bad item) is raised when its turn comes, ending the
                iteration. True: it is yielded in its place and the iteration goes on.
            output: the type of every task's structured reply, or None (as for `map`).
            window: the most tasks submitted ahead of the consumer (>= 1); None: twice the
                pool's capacity (`size * max_in_flight`) when each prompt is taken.

        Returns:
            An iterator of one `Response` (or, with `return_exceptions`, `TurnError` /
            `TypeError`) per prompt, in order.

        Raises:
            TypeError: at the call, `prompts` is a `str` or `output` not a type msgspec
                validates; while iterating, a non-`str` item (see `return_exceptions`).
            ValueError: `window` is not an int >= 1.
            TurnError: the first failed task, in order (see `return_exceptions`).
            CallTimeout: the iteration did not finish within `timeout`.
            RequestError: `"pool_stopped"`.

        Mirrors: `multiprocessing.pool.Pool.imap`; `concurrent.futures.Executor.map` with
        its `buffersize` (Python 3.14).
        """
        if isinstance(prompts, (str, bytes)):
            raise TypeError("imap: prompts must be an iterable of str prompts, got a single "
                            f"{type(prompts).__name__} (wrap it in a list: [prompt])")
        if window is not None and (type(window) is not int or window < 1):
            raise ValueError(f"imap: window must be an int >= 1 (tasks) or None, got {window!r}")
        check_options(self._task_options, "imap", output)
        deadline = None if timeout is None else time.monotonic() + timeout
        return self._stream(iter(prompts), deadline, return_exceptions, output, window)

    def _stream(self, prompts: Iterator[Any], deadline: float | None,
                return_exceptions: bool, output: Any, window: int | None) -> Iterator[Any]:
        ahead: deque[PoolRef | TypeError] = deque()  # in prompt order
        taken = 0
        exhausted = False
        try:
            while True:
                room = window or 2 * self.size * self.max_in_flight
                while not exhausted and len(ahead) < room:
                    try:
                        prompt = next(prompts)
                    except StopIteration:
                        exhausted = True
                        break
                    if type(prompt) is str:
                        ahead.append(self.submit(prompt, output=output))
                    else:
                        ahead.append(TypeError(f"imap: prompt {taken} must be a str, got "
                                               f"{type(prompt).__name__}"))
                    taken += 1
                if not ahead:
                    return
                head = ahead[0]
                if isinstance(head, PoolRef):
                    remaining = (None if deadline is None
                                 else max(0.0, deadline - time.monotonic()))
                    try:
                        value: Any = self.result(head, remaining)
                    except TurnError as exc:
                        ahead.popleft()
                        if not return_exceptions:
                            raise
                        value = exc
                    else:
                        ahead.popleft()
                else:
                    ahead.popleft()
                    if not return_exceptions:
                        raise head
                    value = head
                yield value
        finally:
            self._drop_tasks([ref for ref in ahead if isinstance(ref, PoolRef)])

    def as_completed(self, refs: Iterable[PoolRef],
                     timeout: float | None = None) -> Iterator[PoolRef]:
        """Yield each of `refs` as soon as its task has an outcome (completion order); read it
        with `result(ref)`, which then returns at once.

        Args:
            refs: `PoolRef`s from `submit`.
            timeout: seconds for all of them; None = forever.

        Raises:
            CallTimeout: not all finished within `timeout` (the rest go on).
            LookupError: an unknown ref, or one whose outcome was already collected.

        Mirrors: `concurrent.futures.as_completed`.
        """
        limit = wait_s(timeout)
        deadline = None if limit is None else time.monotonic() + limit
        with self._cond:
            pending = []
            for ref in refs:
                task = self._tasks.get(ref.id) if isinstance(ref, PoolRef) else None
                if task is None:
                    raise LookupError("unknown PoolRef, or its result was already collected")
                pending.append(task)
        while pending:
            with self._cond:
                done = [task for task in pending if task.done.is_set()]
                if not done:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise CallTimeout(timeout)
                    self._cond.wait(remaining)
                    continue
            for task in done:
                pending.remove(task)
                yield task.ref

    def cancel(self, ref: PoolRef, timeout: float | None = None) -> str:
        """Cancel a task that has not started: its `result` then raises
        `TurnError("cancelled")`.

        Returns:
            `"cancelled"` (it was waiting in the pool, for a retry, or queued at its worker),
            `"current"` (a worker is running it: use the worker's `interrupt` if you must),
            `"already_finished"`, or `"not_found"` (unknown, or its outcome was collected).

        Mirrors: `GenAgent.cancel_request/3` for a pool task.
        """
        with self._cond:
            task = self._tasks.get(ref.id) if isinstance(ref, PoolRef) else None
            if task is None:
                return "not_found"
            if task.outcome is not None:
                return "already_finished"
            if self._unqueue(task):
                self._resolve(task, ("error", "cancelled"))
                return "cancelled"
            slot = next((s for s in self._slots if s.in_flight.get(task.ref.id) is task), None)
            handle, tell_ref = (slot.handle, task.tell_ref) if slot is not None else (None, None)
        if handle is None or tell_ref is None:
            return "current"
        try:
            answer = AgentRef(handle).cancel_request(tell_ref, timeout)
        except (GenAgentError, LookupError):
            return "current"
        # a cancelled worker request sends its completion ("error", "cancelled") to the pool
        return "cancelled" if answer == "cancelled" else "current"

    def _unqueue(self, task: _Task) -> bool:
        """Take `task` out of the pool's queues or its retry wait; True if it was there."""
        if task in self._retrying:
            self._retrying.discard(task)
            if task.timer is not None:
                task.timer.cancel()
            return True
        for target in (self._shared, *(slot.queue for slot in self._slots)):
            if task in target:
                target.remove(task)
                return True
        return False

    def status(self) -> PoolStatus:
        """A point-in-time `PoolStatus`."""
        with self._cond:
            workers = tuple(slot.info() for slot in self._slots)
            return PoolStatus(size=sum(1 for s in self._slots if not s.retiring),
                              queued=self._queued(),
                              in_flight=sum(len(s.in_flight) for s in self._slots),
                              workers=workers, stopped=self._stopped.is_set())

    def wait_idle(self, timeout: float | None = None) -> None:
        """Wait for quiescence: nothing queued or in flight in the pool, and every worker's
        `runtime_snapshot` idle with no pending prompt, notification or self-chain.

        Wakes on task completions and on worker state-change telemetry.

        Raises:
            CallTimeout: not quiescent within `timeout` seconds.
            RequestError: `("pool_down", reason)` when the pool stopped meanwhile.
        """
        limit = wait_s(timeout)
        deadline = None if limit is None else time.monotonic() + limit
        handler_id = ("gen_agent.pool.wait_idle", uuid.uuid4().hex)
        telemetry.attach(handler_id, telemetry.STATE_CHANGED, self._wake)
        try:
            while True:
                if self._stopped.is_set():
                    raise RequestError(("pool_down", self._down_reason))
                if self._quiet() and self._workers_quiet():
                    return
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise CallTimeout(timeout)
                with self._cond:
                    wait = _IDLE_RECHECK_S if remaining is None else min(remaining,
                                                                         _IDLE_RECHECK_S)
                    self._cond.wait(wait)
        finally:
            telemetry.detach(handler_id)

    def resize(self, size: int, timeout: float | None = None) -> None:
        """Grow or shrink the pool to `size` workers.

        Growing starts new workers at once. Shrinking removes the newest workers: they take
        no new task, their queued (round_robin) tasks move to the remaining workers, their
        tasks in flight finish (the worker is drained), then they stop.

        Args:
            timeout: seconds each removed worker may take to drain; None = forever. After
                it the worker is stopped (its unfinished task fails with "worker_down").

        Raises:
            ValueError: `size` < 1. RequestError: `"pool_stopped"`.
            AgentStartError, AlreadyStarted: a new worker failed to start (it and the ones
                after it are not added; those started before it stay).

        Resizes are serialised: a second call waits for the first.
        """
        _check_count("size", size, 1)
        with self._resize_lock:
            with self._cond:
                if self._stopping or self._stopped.is_set():
                    raise RequestError("pool_stopped")
                active = [slot for slot in self._slots if not slot.retiring]
                grow = [self._new_slot() for _ in range(size - len(active))]
                shrink = active[size:] if size < len(active) else []
                for slot in shrink:
                    slot.retiring = True
                self._requeue_from(shrink)
            try:
                for index, slot in enumerate(grow):
                    try:
                        self._supervisor.start_child(self._spec(slot))
                    except BaseException:
                        self._abandon(grow[index:])
                        raise
                for slot in shrink:
                    self._supervisor.terminate_child(slot.name, drain=True, timeout=timeout)
                    self._supervisor.delete_child(slot.name)
            finally:
                if shrink:
                    self._dispatcher.post(ForgetMsg(shrink))
                self._dispatcher.post(DispatchMsg())

    def _abandon(self, slots: list[_Slot]) -> None:
        """Drop slots whose worker could not be started; their queued tasks move on."""
        with self._cond:
            for slot in slots:
                slot.retiring = True
            self._requeue_from(slots)
            self._slots = [s for s in self._slots if s not in slots]

    def stop(self, timeout: float | None = None) -> None:
        """Stop the pool: tasks still queued fail with `("agent_terminated", "shutdown")`,
        the workers stop (their tasks in flight fail the same way), then the dispatcher.
        Idempotent.

        Raises:
            CallTimeout: not stopped within `timeout` seconds.
        """
        with self._cond:
            self._stopping = True
            for task in self._take_queued():
                self._resolve(task, ("error", ("agent_terminated", "shutdown")))
            for task in self._take_retrying():
                self._resolve(task, ("error", ("agent_terminated", "shutdown")))
        if self._supervisor.is_alive():
            self._supervisor.stop(timeout)
        self._dispatcher.post(StopMsg())
        if threading.get_ident() != self._dispatcher.thread and not self._stopped.wait(
                wait_s(timeout)):
            raise CallTimeout(timeout)

    def wait_stopped(self, timeout: float | None = None) -> bool:
        """Block until the pool stopped; False if `timeout` (s) expired first."""
        return self._stopped.wait(wait_s(timeout))

    # ------------------------------------------------------------------ bookkeeping
    def _spec(self, slot: _Slot, warn_as: str | None = None) -> Any:
        opts = dict(self._worker_opts)
        if opts.get("session_key") is not None:  # one durable session per worker
            opts["session_key"] = f"{opts['session_key']}/{slot.name}"
        return build_child_spec(self._module, name=slot.name, backend=self._backend,
                                restart="permanent", shutdown_ms=opts.pop("shutdown_ms"),
                                resume_session=opts.pop("resume_session", False),
                                opts=opts, warn_as=warn_as)

    def _new_slot(self) -> _Slot:
        slot = _Slot(f"{self.name_prefix}-{next(self._indices)}")
        self._slots.append(slot)
        return slot

    def _queued(self) -> int:
        return len(self._shared) + sum(len(slot.queue) for slot in self._slots)

    def _overload(self, prompt: str) -> Any:
        if self.max_queued_tasks is None:
            return None
        count = self._queued()
        if count < self.max_queued_tasks:
            return None
        pending = [*self._shared, *(t for s in self._slots for t in s.queue)]
        return ("overloaded", OverloadInfo(
            queue="prompts", limit="count", pending_count=count,
            pending_bytes=sum(term_size(t.prompt) for t in pending),
            incoming_bytes=term_size(prompt), max_count=self.max_queued_tasks,
            max_bytes=0))

    def _resolve(self, task: _Task, outcome: tuple[str, Any]) -> None:
        """Give `task` its one outcome (later ones are ignored). Caller holds the lock."""
        if task.outcome is not None:
            return
        task.outcome = outcome
        task.done.set()
        self._cond.notify_all()
        if task.on_done is not None:
            try:
                task.on_done(task.ref)
            except Exception as exc:  # noqa: BLE001 - a caller's hook must not break the pool
                logger.warning("gen_agent pool on_done raised {}", type(exc).__name__)

    def _drop_tasks(self, refs: list[PoolRef]) -> None:
        """Drop tasks nobody will collect: those not started are cancelled (never run), the
        others run on and their outcomes are dropped."""
        with self._cond:
            for ref in refs:
                task = self._tasks.pop(ref.id, None)
                if task is not None and task.outcome is None and self._unqueue(task):
                    self._resolve(task, ("error", "cancelled"))

    def _forget(self, refs: list[PoolRef]) -> None:
        with self._cond:
            for ref in refs:
                self._tasks.pop(ref.id, None)

    def _take_retrying(self) -> list[_Task]:
        tasks = list(self._retrying)
        self._retrying.clear()
        for task in tasks:
            if task.timer is not None:
                task.timer.cancel()
        return tasks

    def _take_queued(self) -> list[_Task]:
        tasks = list(self._shared)
        self._shared.clear()
        for slot in self._slots:
            tasks.extend(slot.queue)
            slot.queue.clear()
        return tasks

    def _requeue_from(self, leaving: list[_Slot]) -> None:
        """Move the queued tasks of `leaving` slots to the remaining ones (round robin)."""
        remaining = [slot for slot in self._slots if not slot.retiring]
        for slot in leaving:
            while slot.queue:
                task = slot.queue.popleft()
                task.slot = remaining[self._rr % len(remaining)]
                self._rr += 1
                task.slot.queue.append(task)

    def _quiet(self) -> bool:
        with self._cond:
            return self._queued() == 0 and all(not s.in_flight for s in self._slots)

    def _workers_quiet(self) -> bool:
        with self._cond:
            handles = [s.handle for s in self._slots if not s.retiring]
        for handle in handles:
            if handle is None:
                return False
            try:
                snap = AgentRef(handle).runtime_snapshot()
            except (GenAgentError, LookupError):
                return False
            if (snap.phase != "idle" or snap.pending_prompts or snap.pending_notifications
                    or snap.self_chain_pending):
                return False
        return True

    def _wake(self, _name: Any, _measurements: Any, metadata: dict[str, Any], _config: Any) -> None:
        # Runs in a worker's actor thread: only wake the waiter.
        if metadata.get("to") == "idle":
            with self._cond:
                self._cond.notify_all()

def checked_prompts(prompts: Any, fn: str) -> list[str]:
    """The prompts of a batch (`Pool.map`, `aio.map`), all checked before any is submitted.

    Raises:
        TypeError: `prompts` is a single str or bytes, or holds a non-str (its index named).
    """
    if isinstance(prompts, (str, bytes)):
        raise TypeError(f"{fn}: prompts must be an iterable of str prompts, got a single "
                        f"{type(prompts).__name__} (wrap it in a list: [prompt])")
    batch = list(prompts)
    for index, prompt in enumerate(batch):
        if type(prompt) is not str:
            raise TypeError(f"{fn}: prompts[{index}] must be a str, got "
                            f"{type(prompt).__name__}; no task was submitted")
    return batch


def _check_count(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


def collect_result(lock: Any, tasks: dict[int, Any], ref: Any, timeout: float | None) -> Any:
    """Wait for the task `ref` of `tasks` (guarded by `lock`), hand its outcome out once and
    forget it: the `result` of `Pool` and of `gen_agent.ray.RemotePool`.

    Raises:
        TurnError: the task failed. CallTimeout: no outcome within `timeout` seconds.
        LookupError: unknown ref, or its outcome was already collected.
    """
    with lock:
        task = tasks.get(ref.id) if isinstance(ref, PoolRef) else None
    if task is None:
        raise LookupError("unknown PoolRef, or its result was already collected")
    if not task.done.wait(wait_s(timeout)):
        raise CallTimeout(timeout)
    with lock:
        if tasks.pop(ref.id, None) is None:
            raise LookupError("unknown PoolRef, or its result was already collected")
    assert task.outcome is not None
    kind, value = task.outcome
    if kind == "ok":
        return value
    raise TurnError(value)
