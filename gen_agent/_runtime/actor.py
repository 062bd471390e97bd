"""`ActorBase`: the actor loop, its teardown and hibernation, on pykka's `ThreadingActor`.

The only module of the package that touches pykka's internals (`Envelope`, `_ActorStop`, the
loop's setup and teardown). An actor on this base is a stock pykka actor to the outside (its
`ActorRef` works as a recipient, `ActorRef.tell`/`ask`/`stop` behave as pykka's), with three
departures, each for speed or memory:

- its inbox is a C `queue.SimpleQueue` (pykka's `queue.Queue` is pure Python with three
  conditions: most of a round trip's wake-up cost);
- the runtime's own messages come bare (`AgentHandle.send`), not in an `Envelope`, and go
  straight to `on_receive`; pykka's own (stop, a user's `ActorRef.tell`) still come enveloped;
- it is not entered in pykka's `ActorRegistry` (a list scanned on every stop: stopping N
  actors would cost O(N^2)); its owner (an `AgentSystem`) stops it.

Hibernation is BEAM's `:hibernate` for threads: an idle actor (see `_may_hibernate`) whose
inbox stays empty for `hibernate_after_s` ends its thread; everything else stays in the object
and its inbox keeps accepting. The next message put into the inbox starts a new thread that
carries on with the same loop, so order is kept and nothing is lost. Race-free without a lock
on the send path: the actor sets `inbox.hibernated` *before* its last emptiness check and a
sender reads it *after* its put, so one of them always sees the other; `_wake_lock` makes the
flag's True -> False transitions (resume, or the actor changing its mind) exclusive.
"""

from __future__ import annotations

import queue
import sys
import threading
from typing import Any

import pykka
import pykka.messages
from pykka._envelope import Envelope

from gen_agent._context import (
    current_handle,
    current_name,
    current_request,
    set_current,
    set_request,
)
from gen_agent._runtime.reply import OnceEvent


class _HibernatingInbox(queue.SimpleQueue):  # type: ignore[type-arg]
    """The inbox of an actor that may hibernate: a put wakes it when it is hibernated."""

    __slots__ = ("actor", "hibernated")

    actor: Any
    hibernated: bool

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        queue.SimpleQueue.put(self, item)
        if self.hibernated:
            self.actor._wake()


class ActorBase(pykka.ThreadingActor):
    """The loop every gen_agent actor runs. Subclasses implement `on_receive` and the hooks
    below (`_bind_thread`, `_unbind_thread`, `_thread_of`, `_may_hibernate`,
    `_starts_hibernated`); `hibernations` counts the times the thread ended while idle."""

    use_daemon_thread = True

    @staticmethod
    def _create_actor_inbox() -> Any:  # see `enable_hibernation` for a hibernating actor
        # SimpleQueue has what pykka uses (put, get, empty) and qsize; it is unbounded, like
        # pykka's own inbox (an agent bounds its work with its own queues).
        return queue.SimpleQueue()

    @classmethod
    def start(cls, *args: Any, **kwargs: Any) -> Any:
        """Create the actor and start its thread, without pykka's `ActorRegistry` (see the
        module docstring); returns its `ActorRef`."""
        return cls(*args, **kwargs).launch()

    def launch(self) -> Any:
        """Start the thread of an actor made earlier (its inbox takes messages from the
        moment it is made: they wait for the thread); returns its `ActorRef`."""
        self._start_actor_loop()
        return self.actor_ref

    def post(self, message: Any) -> None:
        """Put a bare message in the inbox, from any thread (never blocks)."""
        self.actor_inbox.put(message)

    def stop_now(self) -> None:
        """From the actor's own thread: stop without handling the rest of the inbox (pykka's
        `_stop`: `on_stop` runs, then the loop ends and the teardown empties the inbox)."""
        self._stop()

    def __init__(self) -> None:
        super().__init__()
        # pykka only sets and reads its stop flag: a lighter one (memory per actor).
        self.actor_stopped = self.actor_ref.actor_stopped = OnceEvent()  # type: ignore[assignment]
        self._hibernate_s: float | None = None
        self._wake_lock: threading.Lock | None = None
        self._hibernating_inbox: _HibernatingInbox | None = None
        self.hibernations = 0  # times this actor's thread ended while idle (tests, benches)

    # ------------------------------------------------------------------ subclass hooks
    def _bind_thread(self) -> None:
        """Mark the calling thread as this actor's (identity, `current_name()`)."""

    def _unbind_thread(self) -> None:
        """The actor has no thread of its own any more (hibernated or stopped)."""

    def _thread_of(self) -> int | None:
        """The ident of the thread the actor runs on now, or None."""
        return None

    def _may_hibernate(self) -> bool:
        """True when the actor is idle enough to end its thread now (may tidy up first)."""
        return False

    def _starts_hibernated(self) -> bool:
        """True when, with `hibernate_after_s == 0`, the actor may start without a thread."""
        return False

    # ------------------------------------------------------------------ the loop
    def enable_hibernation(self, after_s: float) -> None:
        """Hibernate after `after_s` seconds idle (0: as soon as it is idle)."""
        inbox = _HibernatingInbox()
        inbox.actor = self
        inbox.hibernated = False
        self.actor_inbox = self._hibernating_inbox = inbox
        self.actor_ref.actor_inbox = inbox  # the ref copied pykka's inbox when it was made
        self._hibernate_s = after_s
        self._wake_lock = threading.Lock()

    def _actor_loop(self) -> None:
        self._actor_loop_setup()
        self._run_loop()

    def _start_actor_loop(self) -> None:
        if self._hibernate_s != 0 or not self._starts_hibernated():
            super()._start_actor_loop()
            return
        # Initialise in the starting thread and begin hibernated, so starting 100,000 such
        # actors starts no thread at all.
        self._inline(self._start_hibernated)

    def _start_hibernated(self) -> None:
        self._actor_loop_setup()  # on_start
        if not self._hibernate():
            self._wake(force=True)  # messages arrived meanwhile (or it stopped): a thread

    def _inline(self, body: Any) -> None:
        # Run `body` as this actor's thread in the calling thread, then give the calling
        # thread its own identity back (it may itself be another actor's thread).
        name, handle, request = current_name(), current_handle(), current_request()
        self._bind_thread()
        me = self._thread_of()
        try:
            body()
        finally:
            if self._thread_of() == me:
                self._unbind_thread()  # hibernated or stopped: no thread is its own
            set_current(name, handle)
            set_request(request)

    def run_inline(self, message: Any) -> bool:
        """If this actor hibernates, put `message` in its inbox and run it in the calling
        thread until it hibernates again or stops; False (nothing done) if it is awake. Used
        to stop hibernated agents without starting a thread for each."""
        inbox, lock = self._hibernating_inbox, self._wake_lock
        if inbox is None or lock is None:
            return False
        with lock:
            if not inbox.hibernated:
                return False
            inbox.hibernated = False  # claimed: the put below wakes nobody
        if self.actor_stopped.is_set():
            return False
        inbox.put(message)
        self._inline(self._run_loop)
        return True

    def _run_loop(self) -> None:
        if self._hibernate_s is None:
            inbox, stopped, receive = self.actor_inbox, self.actor_stopped, self._receive
            while not stopped.is_set():
                receive(inbox.get())
        elif self._loop_until_hibernated():
            return  # hibernated: this thread ends, the actor lives on
        self._actor_loop_teardown()

    def _loop_until_hibernated(self) -> bool:
        """pykka's receive loop, but an idle actor hibernates. True when it did (the thread
        must end at once), False when the actor stopped."""
        inbox, stopped, after = self._hibernating_inbox, self.actor_stopped, self._hibernate_s
        assert inbox is not None and after is not None
        while not stopped.is_set():
            try:
                envelope = inbox.get(timeout=after) if after > 0 else inbox.get(block=False)
            except queue.Empty:
                if self._hibernate():
                    return True
                envelope = inbox.get()  # busy (a turn runs): wait for its next message
            self._receive(envelope)
        return False

    def _receive(self, item: Any) -> None:
        # As pykka's `_actor_loop_running` handles one envelope, but bare messages go straight
        # to `on_receive`: no `Envelope` to build, no dispatch on pykka's message types.
        reply_to = item.reply_to if type(item) is Envelope else None
        try:
            if type(item) is not Envelope:
                self.on_receive(item)
            else:
                response = self._handle_receive(item.message)
                if reply_to is not None:
                    reply_to.set(response)
        except Exception:  # noqa: BLE001 - as pykka: to the asker, else logged
            if reply_to is not None:
                reply_to.set_exception()
            else:
                self._handle_failure(*sys.exc_info())
                try:
                    self.on_failure(*sys.exc_info())
                except Exception:  # noqa: BLE001 - as pykka
                    self._handle_failure(*sys.exc_info())
        except BaseException:  # noqa: BLE001 - as pykka: stop on KeyboardInterrupt/SystemExit
            self._stop()
            pykka.ActorRegistry.stop_all()

    def _actor_loop_teardown(self) -> None:
        # pykka's teardown reads `reply_to` of every envelope left; bare messages carry their
        # own replies, which the owner fails when the actor ends (`AgentHandle.close`).
        inbox = self.actor_inbox
        while not inbox.empty():
            item = inbox.get()
            if type(item) is Envelope and item.reply_to is not None:
                if isinstance(item.message, pykka.messages._ActorStop):
                    item.reply_to.set(None)
                else:
                    item.reply_to.set_exception(exc_info=(
                        pykka.ActorDeadError,
                        pykka.ActorDeadError(f"{self.actor_ref} stopped before handling the "
                                             "message"), None))

    # ------------------------------------------------------------------ hibernation
    def _hibernate(self) -> bool:
        if not self._may_hibernate():
            return False
        inbox, lock = self._hibernating_inbox, self._wake_lock
        assert inbox is not None and lock is not None
        with lock:
            inbox.hibernated = True
            if not inbox.empty() or self.actor_stopped.is_set():
                inbox.hibernated = False  # a message came in meanwhile: carry on
                return False
            self._unbind_thread()
            self.hibernations += 1
        return True

    def _wake(self, force: bool = False) -> None:
        """Resume a hibernated actor on a new thread (called by `_HibernatingInbox.put` in
        the sender's thread; `force`: start the thread even though the actor was not marked
        hibernated). Raises RuntimeError when no thread can be started: the message stays
        queued and the next put tries again."""
        inbox, lock = self._hibernating_inbox, self._wake_lock
        assert inbox is not None and lock is not None
        with lock:
            if not inbox.hibernated and not force:
                return
            inbox.hibernated = False
            thread = threading.Thread(target=self._resumed, daemon=True,
                                      name=f"{type(self).__name__}-{self._thread_label()}")
            try:
                thread.start()
            except BaseException:
                inbox.hibernated = True
                raise

    def _thread_label(self) -> str:
        return f"{getattr(self, 'name', '')!s:.40}"

    def _resumed(self) -> None:
        self._bind_thread()
        self._run_loop()
