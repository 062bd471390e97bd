"""`RequestRef`: the opaque, never-reused reference of one logical request."""

from __future__ import annotations

import itertools
import os

import msgspec

__all__ = ["RequestRef"]

_PREFIX = os.urandom(4).hex()
_counter = itertools.count(1)


class RequestRef(msgspec.Struct, frozen=True):
    """An opaque reference to one logical request (a tell, an ask, a generated prompt).

    Unique within the process and, through a random per-process prefix, across processes;
    never reused, not derived from the agent, so a ref from an earlier incarnation of a name
    never matches the new one. Hashable, comparable with `==`, safe to share between threads.

    Mirrors: `make_ref()` request references (docs/pages/contract.md#s1-4; docs: Concepts).
    """

    id: str

    @classmethod
    def new(cls) -> RequestRef:
        """Return a fresh, never-used ref."""
        return cls(f"{_PREFIX}-{next(_counter):x}")

    def __repr__(self) -> str:
        return f"RequestRef({self.id!r})"
