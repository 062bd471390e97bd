"""The bounded poll-result cache (docs/pages/contract.md#s4-16). Pure; no threads.

Stores `ref -> ("ok", response) | ("error", reason)` for tell requests. The size of an entry is
`term_size((ref_key, result))`. After each insert the oldest entries are pruned while the count
exceeds `max_count` or the bytes exceed `max_bytes`, so 0 keeps nothing and an entry bigger than
the byte budget evicts the older ones and then itself.
"""

from __future__ import annotations

from typing import Any

from gen_agent._size import term_size


class ResultCache:
    """Insertion-ordered ref → outcome map bounded by count and bytes."""

    __slots__ = ("_entries", "bytes", "max_bytes", "max_count")

    def __init__(self, max_count: int, max_bytes: int) -> None:
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: dict[Any, tuple[Any, int]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, ref: Any) -> bool:
        return ref in self._entries

    def get(self, ref: Any) -> Any:
        """Return the cached outcome for `ref`, or None."""
        entry = self._entries.get(ref)
        return None if entry is None else entry[0]

    def put(self, ref: Any, outcome: Any) -> None:
        """Store `outcome` under `ref` (a replaced ref keeps its place), then prune."""
        size = term_size((getattr(ref, "id", ref), outcome))
        old = self._entries.get(ref)
        if old is not None:
            self.bytes -= old[1]
        self._entries[ref] = (outcome, size)
        self.bytes += size
        self._prune()

    def _prune(self) -> None:
        entries = self._entries
        while entries and (len(entries) > self.max_count or self.bytes > self.max_bytes):
            oldest = next(iter(entries))
            self.bytes -= entries.pop(oldest)[1]
