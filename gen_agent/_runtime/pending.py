"""Bounded FIFO queues with count and byte limits (docs/pages/contract.md#s4-17). Pure; no threads.

Used for the prompt mailbox and the deferred-notification buffer. The agent actor owns each
queue, so nothing here is locked.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Generic, Literal, TypeVar

from gen_agent._status import OverloadInfo

T = TypeVar("T")

QueueName = Literal["prompts", "notifications", "self_chain"]


def check_admission(
    queue: QueueName, count: int, pending_bytes: int, incoming_bytes: int,
    max_count: int, max_bytes: int,
) -> OverloadInfo | None:
    """Return why an item may not join a queue, or None if it fits.

    Rule (docs/pages/contract.md#s4-17): `count >= max_count` → limit "count"; else
    `incoming_bytes > max_bytes - pending_bytes` → limit "bytes"; else accept.
    """
    if count >= max_count:
        limit: Literal["count", "bytes"] = "count"
    elif incoming_bytes > max_bytes - pending_bytes:
        limit = "bytes"
    else:
        return None
    return OverloadInfo(
        queue=queue, limit=limit, pending_count=count, pending_bytes=pending_bytes,
        incoming_bytes=incoming_bytes, max_count=max_count, max_bytes=max_bytes,
    )


_NO_ITEMS: Any = ()  # the shared "nothing queued yet" value of BoundedQueue.items


class BoundedQueue(Generic[T]):
    """A FIFO of items, each with a byte size, bounded by `max_count` and `max_bytes`.

    `items` (read-only for callers) holds the queued `(item, size)` pairs, oldest first: the
    actor tests it for emptiness and length directly (`if queue.items`, `len(queue.items)`),
    which costs no call on its per-turn path.
    """

    __slots__ = ("bytes", "items", "max_bytes", "max_count", "name")

    def __init__(self, name: QueueName, max_count: int, max_bytes: int) -> None:
        self.name: QueueName = name
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.bytes = 0
        # Made on the first offer: an empty deque holds a 64-slot block (~760 bytes), and most
        # agents never queue anything (100,000 hibernated agents).
        self.items: deque[tuple[T, int]] = _NO_ITEMS

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[T]:
        return (item for item, _ in self.items)

    def offer(self, item: T, size: int) -> OverloadInfo | None:
        """Append `item` (of `size` bytes) if it fits; return the overload info if not."""
        info = check_admission(
            self.name, len(self.items), self.bytes, size, self.max_count, self.max_bytes
        )
        if info is None:
            if self.items is _NO_ITEMS:
                self.items = deque()
            self.items.append((item, size))
            self.bytes += size
        return info

    def offer_ahead(self, item: T, size: int, behind: Callable[[T], bool]) -> OverloadInfo | None:
        """As `offer`, but insert `item` before every queued item, except the leading run of
        items matching `behind` (those placed ahead earlier keep their order)."""
        info = check_admission(
            self.name, len(self.items), self.bytes, size, self.max_count, self.max_bytes
        )
        if info is None:
            if self.items is _NO_ITEMS:
                self.items = deque()
            index = 0
            for queued, _ in self.items:
                if not behind(queued):
                    break
                index += 1
            self.items.insert(index, (item, size))
            self.bytes += size
        return info

    def pop(self) -> T:
        """Remove and return the oldest item. Raises IndexError when empty."""
        if not self.items:
            raise IndexError("pop from an empty BoundedQueue")
        item, size = self.items.popleft()
        self.bytes -= size
        return item

    def remove_where(self, predicate: Callable[[T], bool]) -> list[T]:
        """Remove every item matching `predicate`, keeping the others in order; return them."""
        if not self.items:
            return []
        kept: deque[tuple[T, int]] = deque()
        removed: list[T] = []
        for item, size in self.items:
            if predicate(item):
                removed.append(item)
                self.bytes -= size
            else:
                kept.append((item, size))
        self.items = kept
        return removed

    def clear(self) -> list[T]:
        """Remove and return every item, oldest first."""
        items = [item for item, _ in self.items]
        self.items = _NO_ITEMS
        self.bytes = 0
        return items

    def find(self, predicate: Callable[[T], bool]) -> Any:
        """Return the first item matching `predicate`, or None."""
        for item, _ in self.items:
            if predicate(item):
                return item
        return None
