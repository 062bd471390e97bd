"""`Publisher`: one thread that rebuilds the observer's view when it changes and hands the
latest one to every open event stream.

The view is built once per change, whatever the number of viewers (no polling storm): the
thread sleeps in `Collector.wait_changed`, rebuilds at most every `min_interval_ms`, and
about once a second while anyone watches (so elapsed times move). With nobody watching it
builds nothing. A slow viewer skips intermediate views: each subscription holds only the
latest one.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

import msgspec
from loguru import logger

from gen_agent.observer._collector import Collector, escaped_view

__all__ = ["Publisher", "Subscription"]

_REFRESH_S = 1.0


class Subscription:
    """One open event stream: the latest view not yet sent, and an asyncio event set on the
    stream's own loop when a newer one arrives (`None` = the publisher stopped)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._ready = asyncio.Event()
        self._latest: bytes | None = None
        self._closed = False

    def _offer(self, data: bytes | None) -> None:
        # Runs on self.loop (scheduled with call_soon_threadsafe).
        if data is None:
            self._closed = True
        else:
            self._latest = data
        self._ready.set()

    async def next(self) -> bytes | None:
        """Wait for a view newer than the last one returned; None once the publisher
        stopped."""
        await self._ready.wait()
        self._ready.clear()
        if self._closed:
            return None
        data, self._latest = self._latest, None
        if data is None:
            return await self.next()
        return data


class Publisher:
    """Builds the view from `collector` and feeds every `Subscription`. Thread-safe.

    Args:
        collector: the open `Collector`.
        min_interval_ms: least time between two views (milliseconds; default 200).
    """

    def __init__(self, collector: Collector, *, min_interval_ms: int = 200) -> None:
        self.collector = collector
        self._min_interval_s = min_interval_ms / 1000
        self._lock = threading.Lock()
        self._subscriptions: set[Subscription] = set()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gen_agent-observer-publisher",
                                        daemon=True)

    def start(self) -> None:
        """Start the publisher thread."""
        self._thread.start()

    def stop(self, timeout: float | None = 5.0) -> None:
        """End every stream, stop the thread and wait for it (`timeout` seconds)."""
        self._stopping.set()
        self.collector.touch()
        with self._lock:
            subscriptions = list(self._subscriptions)
        for subscription in subscriptions:
            _offer(subscription, None)
        if self._thread.is_alive():
            self._thread.join(timeout)

    def build(self) -> bytes:
        """Build the view now and return it as JSON bytes (blocking: agents are asked).

        A string the view could not carry (a lone surrogate from an unusual name or prompt
        the collector did not escape itself) is escaped, never a view lost for every viewer.
        """
        view = self.collector.snapshot()
        try:
            return msgspec.json.encode(view)
        except UnicodeEncodeError:
            return msgspec.json.encode(escaped_view(view))

    def subscribe(self, loop: asyncio.AbstractEventLoop) -> Subscription:
        """Open a stream fed on `loop`; its first view follows at once."""
        subscription = Subscription(loop)
        with self._lock:
            self._subscriptions.add(subscription)
        if self._stopping.is_set():
            _offer(subscription, None)
        self.collector.touch()
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        """Close one stream (idempotent)."""
        with self._lock:
            self._subscriptions.discard(subscription)

    def _run(self) -> None:
        seen = -1
        while not self._stopping.is_set():
            version = self.collector.wait_changed(seen, _REFRESH_S)
            if self._stopping.is_set():
                break
            with self._lock:
                subscriptions = list(self._subscriptions)
            if not subscriptions:
                seen = version
                continue
            seen = version  # a change, or the periodic refresh while someone watches
            try:
                data = self.build()
            except Exception as exc:  # noqa: BLE001 - a failed view must not end the thread
                logger.warning("gen_agent observer could not build a view ({})",
                               type(exc).__name__)
                data = None
            if data is not None:
                for subscription in subscriptions:
                    _offer(subscription, data)
            # Coalesce bursts: the next view is built no sooner than min_interval later.
            self._stopping.wait(self._min_interval_s)


def _offer(subscription: Subscription, data: Any) -> None:
    # A closed loop raises RuntimeError: its stream is gone, nothing to tell.
    with contextlib.suppress(RuntimeError):
        subscription.loop.call_soon_threadsafe(subscription._offer, data)
