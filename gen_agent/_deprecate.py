"""Old spellings that keep working for one release, with a `DeprecationWarning`.

Each is listed in the changelog (docs/pages/changelog.md) with the release that removes it:
the registry argument's old names (`system_renamed`), module paths that moved
(`MOVED_MODULES`, served by `install_moved_modules`) and names that moved inside a module
(`moved_names`, for a module's `__getattr__`).
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import inspect
import sys
import warnings
from collections.abc import Callable, Mapping
from types import ModuleType
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


#: Old public module paths and the modules that now hold them. Importing an old path warns
#: once per process and gives the new module itself (one module object under two names), so
#: `from gen_agent.client import ask` keeps working until 0.3 removes the entry.
#: (`gen_agent.status` is not here: as a module path it would rebind the root's `status`
#: function, and its names were always in the root.)
MOVED_MODULES: dict[str, str] = {
    "gen_agent.accounting": "gen_agent._accounting",
    "gen_agent.agent": "gen_agent._agent",
    "gen_agent.agent_ref": "gen_agent._agent_ref",
    "gen_agent.client": "gen_agent._client",
    "gen_agent.conversation": "gen_agent._conversation",
    "gen_agent.debug": "gen_agent._debug",
    "gen_agent.errors": "gen_agent._errors",
    "gen_agent.event": "gen_agent._event",
    "gen_agent.host": "gen_agent._host",
    "gen_agent.limits": "gen_agent._limits",
    "gen_agent.messages": "gen_agent._delivered",
    "gen_agent.output": "gen_agent._output",
    "gen_agent.permission": "gen_agent._permission",
    "gen_agent.pool": "gen_agent._pool",
    "gen_agent.portable": "gen_agent._portable",
    "gen_agent.ref": "gen_agent._request_ref",
    "gen_agent.request": "gen_agent._request_options",
    "gen_agent.response": "gen_agent._response",
    "gen_agent.size": "gen_agent._size",
    "gen_agent.streaming": "gen_agent._streaming",
    "gen_agent.supervisor": "gen_agent._supervisor",
    "gen_agent.system": "gen_agent._system",
    "gen_agent.testing.anthropic_protocol": "gen_agent.testing._anthropic_protocol",
    "gen_agent.testing.helpers": "gen_agent.testing._helpers",
    "gen_agent.testing.model_server": "gen_agent.testing._model_server",
    "gen_agent.testing.openai_protocol": "gen_agent.testing._openai_protocol",
    "gen_agent.testing.script": "gen_agent.testing._script",
    "gen_agent.store.lease": "gen_agent.store._lease",
    "gen_agent.store.memory": "gen_agent.store._memory",
    "gen_agent.store.records": "gen_agent.store._records",
    "gen_agent.store.sqlite": "gen_agent.store._sqlite",
    "gen_agent.ray.client": "gen_agent.ray._client",
    "gen_agent.ray.directory": "gen_agent.ray._directory",
    "gen_agent.ray.local": "gen_agent.ray._local",
    "gen_agent.ray.node": "gen_agent.ray._node",
    "gen_agent.ray.pool": "gen_agent.ray._pool",
    "gen_agent.observer.actions": "gen_agent.observer._actions",
    "gen_agent.observer.app": "gen_agent.observer._app",
    "gen_agent.observer.collector": "gen_agent.observer._collector",
    "gen_agent.observer.publisher": "gen_agent.observer._publisher",
    "gen_agent.observer.server": "gen_agent.observer._server",
    "gen_agent.cli.app": "gen_agent.cli._app",
    "gen_agent.cli.demo": "gen_agent.cli._demo",
    "gen_agent.cli.demo_script": "gen_agent.cli._demo_script",
    "gen_agent.cli.demo_view": "gen_agent.cli._demo_view",
    "gen_agent.cli.inputs": "gen_agent.cli._inputs",
    "gen_agent.cli.sessions": "gen_agent.cli._sessions",
    "gen_agent.cli.support": "gen_agent.cli._support",
    "gen_agent.cli.terminal": "gen_agent.cli._terminal",
}


class _MovedLoader(importlib.abc.Loader):
    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.new)
        self.spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # Already executed under its new name; the import system set the old name's spec on
        # it, so give the module back its own.
        module.__spec__ = self.spec


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Finds an old path of `MOVED_MODULES`: warns, then aliases the new module.

    A finder rather than a file at each old path, so the old file's history follows the move
    (git sees a rename, not a rewrite) and no stub module can drift from its target.
    """

    def find_spec(self, fullname: str, path: Any = None,
                  target: Any = None) -> importlib.machinery.ModuleSpec | None:
        new = MOVED_MODULES.get(fullname)
        if new is None:
            return None
        # Level 2 is the importer: `warnings` itself skips the import system's frames.
        warnings.warn(f"{fullname} is deprecated and will be removed in 0.3; import its names "
                      f"from {public_home(fullname)}", DeprecationWarning, stacklevel=2)
        spec = importlib.machinery.ModuleSpec(fullname, _MovedLoader(new))
        return spec


def public_home(old: str) -> str:
    """The public namespace holding the names of the old module path `old`: its subpackage
    (`gen_agent.testing`, `.store`, `.ray`, `.observer`, `.cli`), else the root."""
    parts = old.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 else "gen_agent"


_FINDER = _MovedFinder()


def install_moved_modules() -> None:
    """Let the old paths of `MOVED_MODULES` import (idempotent; `gen_agent` calls it)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def moved_names(module: str, names: Mapping[str, tuple[str, str]]) -> Callable[[str], Any]:
    """A module `__getattr__` serving old names of `module`, each with a `DeprecationWarning`.

    Args:
        module: the module's `__name__` (for the error of an unknown name).
        names: old name → `(module path, new name)` where it lives now.
    """
    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        where, new = names[name]
        warnings.warn(f"{module}.{name} is deprecated and will be removed in 0.3; use "
                      f"{where}.{new}", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(where), new)
    return __getattr__
