"""Old spellings that keep working for one release, with a `DeprecationWarning`.

Each is listed in the changelog (docs/pages/changelog.md) with the release that removes it.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

#: The registry argument's old names: `_system=` (the threaded client) and `system=` (aio).
OLD_SYSTEM_NAMES = ("_system", "system")


def _renamed(fn_name: str, kwargs: dict[str, Any]) -> None:
    for old in OLD_SYSTEM_NAMES:
        if old in kwargs:
            if "agent_system" in kwargs:
                raise TypeError(f"{fn_name}: give agent_system= only (not also {old}=)")
            warnings.warn(f"{fn_name}: {old}= is deprecated, use agent_system=",
                          DeprecationWarning, stacklevel=3)
            kwargs["agent_system"] = kwargs.pop(old)


def system_renamed(fn: F) -> F:
    """Accept `_system=`/`system=` as a deprecated spelling of `fn`'s `agent_system=`."""
    name = fn.__name__
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def awaited(*args: Any, **kwargs: Any) -> Any:
            if kwargs:
                _renamed(name, kwargs)
            return await fn(*args, **kwargs)
        return awaited  # type: ignore[return-value]

    @functools.wraps(fn)
    def called(*args: Any, **kwargs: Any) -> Any:
        if kwargs:
            _renamed(name, kwargs)
        return fn(*args, **kwargs)
    return called  # type: ignore[return-value]
