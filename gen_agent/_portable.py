"""Portable reasons: exit and error reasons as plain data that cross processes and storage.

A reason is data (`("task_crashed", exc)`, `("already_started", agent_ref)`, a
`BackendError` whose `raw` is an SDK exception...), but some of what it carries is not: a live
exception holds its traceback and may not pickle, an `AgentRef` is a handle on a thread in this
process. `to_portable` turns a reason into *portable form*, where every such value has become a
record of what it was:

- any exception, gen_agent's own included, becomes a `PortableError`: its type's name, module
  and base classes, its message, its args and attributes (themselves portable), its cause, and
  the frames of its traceback as text;
- an `AgentRef` becomes a `PortableObject` with the agent's name;
- any other value that is neither plain data nor a msgspec struct becomes a `PortableObject`
  naming its type (a mapping or a sequence keeps its items).

Plain data (str, int, float, bool, None, bytes, tuples, lists, dicts, sets, msgspec structs,
datetimes...) passes unchanged, so `to_portable` of a reason that holds none of the above
returns an equal value. The portable form pickles (Ray uses pickle) and `encode` / `decode`
write it with msgspec's MessagePack keeping tuples, sets and gen_agent's structs exactly (the
session store uses them). `from_portable` rebuilds gen_agent's own errors with the same type,
reason and attributes; a foreign exception stays a `PortableError` record, which is never
re-raised as something it is not.

    >>> reason = ("task_crashed", ValueError("boom"))
    >>> portable = to_portable(reason)
    >>> portable[1].type_name, portable[1].is_a(ValueError)
    ('ValueError', True)
    >>> decode(encode(portable)) == portable
    True

Mirrors: the Elixir original's reasons are plain terms that any node can receive
(docs/pages/contract.md#s3-14, docs: Errors, keeps reasons as data); this module gives Python's
reasons the same property.
"""

from __future__ import annotations

import importlib
import traceback
from collections.abc import Mapping
from typing import Any

import msgspec

__all__ = [
    "PortableError",
    "PortableObject",
    "decode",
    "encode",
    "from_portable",
    "is_portable",
    "to_exception",
    "to_portable",
]

# Deeper structures than this are cut (a reason is small; a cycle must not recurse forever).
_MAX_DEPTH = 32
_PLAIN = (str, int, float, bool, bytes, type(None))


class PortableError(msgspec.Struct, frozen=True, tag="error"):
    """The portable record of an exception.

    Fields:
        type_name: the exception type's `__qualname__`, e.g. `"ValueError"`,
            `"APIConnectionError"`.
        module: the type's `__module__`, e.g. `"builtins"`, `"anthropic"`.
        message: `str(exc)`. It may hold request data (as an exception's message may): never
            log it; `repr()` of the record leaves it out.
        args: the exception's `args`, in portable form.
        attrs: the exception's public instance attributes (`vars(exc)` without names starting
            with `_`), in portable form; for gen_agent's errors this includes `reason`.
        mro: `"module.qualname"` of the type and each of its bases down to `BaseException`,
            so `is_a` can answer for base classes.
        frames: the traceback's frames as text, one `"  File ..., line N, in f\\n    code\\n"`
            string per frame, outermost first (empty when the exception was never raised).
        cause: the portable `__cause__` (or the unsuppressed `__context__`), or None.

    Equality compares every field; the hash covers type, module and message. Mirrors: nothing
    in the Elixir original (its exceptions are data already); see the module docstring.
    """

    type_name: str
    module: str
    message: str = ""
    args: tuple[Any, ...] = ()
    attrs: dict[str, Any] = {}
    mro: tuple[str, ...] = ()
    frames: tuple[str, ...] = ()
    cause: PortableError | None = None

    def is_a(self, cls: type[BaseException] | str) -> bool:
        """Whether the recorded exception was an instance of `cls`.

        Args:
            cls: an exception class, or its `"module.qualname"` (e.g. `"builtins.ValueError"`),
                or a bare qualname (e.g. `"ValueError"`).

        Returns:
            True when `cls` is the recorded type or one of its bases.
        """
        if isinstance(cls, str):
            return cls in self.mro or any(name.rpartition(".")[2] == cls for name in self.mro)
        return f"{cls.__module__}.{cls.__qualname__}" in self.mro

    @property
    def traceback_text(self) -> str:
        """The frames joined as one text, in `traceback.format_tb` layout."""
        return "".join(self.frames)

    def __repr__(self) -> str:
        return f"PortableError({self.module}.{self.type_name})"

    def __hash__(self) -> int:
        return hash((self.type_name, self.module, self.message))

    def __describe__(self) -> str:
        # As `describe_reason` shows a live exception: its type, never its message or args.
        return self.type_name


class PortableObject(msgspec.Struct, frozen=True, tag="object"):
    """The portable record of a value that is not data (a handle, a lock, a client...).

    Fields:
        type_name: the value's type `__qualname__`, e.g. `"AgentRef"`.
        module: the type's `__module__`, e.g. `"gen_agent._agent_ref"`.
        attrs: what is kept of it, in portable form: `{"name": ...}` for an `AgentRef`, empty
            otherwise.

    Mirrors: nothing in the Elixir original (a pid is data there); see the module docstring.
    """

    type_name: str
    module: str
    attrs: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"PortableObject({self.module}.{self.type_name})"

    def __hash__(self) -> int:
        return hash((self.type_name, self.module))


# ------------------------------------------------------------------------- to portable form
def to_portable(term: Any) -> Any:
    """Return `term` in portable form (see the module docstring).

    Args:
        term: any reason or value: plain data, exceptions, `AgentRef`s, msgspec structs, or
            containers of them, nested up to 32 levels (deeper parts become a
            `PortableObject` of their type).

    Returns:
        An equal value when `term` holds only data; otherwise a copy in which every exception is
        a `PortableError` and every other non-data value a `PortableObject`. Idempotent: a
        portable value is returned unchanged. Never raises for any input.

    Mirrors: see the module docstring.
    """
    return _portable(term, 0)


def _portable(term: Any, depth: int) -> Any:
    if isinstance(term, (*_PLAIN, PortableError, PortableObject)):
        return term
    if depth >= _MAX_DEPTH:
        return _object(term)
    if isinstance(term, BaseException):
        return _error(term, depth, set())
    if isinstance(term, msgspec.Struct):
        return _struct(term, depth)
    kind = type(term)
    if kind is tuple:
        return tuple(_portable(item, depth + 1) for item in term)
    if kind is list:
        return [_portable(item, depth + 1) for item in term]
    if kind is dict or isinstance(term, Mapping):
        return {_key(k, depth): _portable(v, depth + 1) for k, v in term.items()}
    if kind in (set, frozenset):
        return kind(_key(item, depth) for item in term)
    if _encodable(term):
        return term
    return _object(term)


def _key(key: Any, depth: int) -> Any:
    # Keys must stay hashable: a key that is not data becomes its record (also hashable).
    portable = _portable(key, depth + 1)
    try:
        hash(portable)
    except TypeError:
        kind = type(key)
        return PortableObject(kind.__qualname__, kind.__module__)
    return portable


def _struct(term: msgspec.Struct, depth: int) -> msgspec.Struct:
    changes = {}
    for name in term.__struct_fields__:
        value = getattr(term, name)
        portable = _portable(value, depth + 1)
        if portable is not value:
            changes[name] = portable
    return msgspec.structs.replace(term, **changes) if changes else term


def _encodable(term: Any) -> bool:
    try:
        msgspec.msgpack.encode(term)
    except (TypeError, ValueError, OverflowError):
        return False
    return True


def _object(term: Any) -> PortableObject:
    kind = type(term)
    attrs: dict[str, Any] = {}
    if kind.__name__ == "AgentRef" and kind.__module__ == "gen_agent._agent_ref":
        attrs["name"] = _key(term.name, 0)
    return PortableObject(kind.__qualname__, kind.__module__, attrs)


def _error(exc: BaseException, depth: int, seen: set[int]) -> PortableError:
    seen.add(id(exc))
    kind = type(exc)
    cause = exc.__cause__
    if cause is None and not exc.__suppress_context__:
        cause = exc.__context__
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 - a broken __str__ must not lose the record
        message = ""
    attrs = {
        name: _portable(value, depth + 1)
        for name, value in _vars(exc).items()
        if not name.startswith("_")
    }
    return PortableError(
        type_name=kind.__qualname__,
        module=kind.__module__,
        message=message,
        args=tuple(_portable(arg, depth + 1) for arg in exc.args),
        attrs=attrs,
        mro=tuple(
            f"{base.__module__}.{base.__qualname__}"
            for base in kind.__mro__
            if issubclass(base, BaseException)
        ),
        frames=tuple(traceback.format_tb(exc.__traceback__)),
        cause=(
            _error(cause, depth + 1, seen)
            if cause is not None and id(cause) not in seen and depth + 1 < _MAX_DEPTH
            else None
        ),
    )


def _vars(exc: BaseException) -> dict[str, Any]:
    try:
        return dict(vars(exc))
    except TypeError:  # a type with __slots__ and no __dict__
        return {}


def is_portable(term: Any) -> bool:
    """Whether `term` is already in portable form (holds no exception and no non-data value).

    Args:
        term: any value.

    Returns:
        True when `to_portable(term)` would return it unchanged.
    """
    return _is_portable(term, 0)


def _is_portable(term: Any, depth: int) -> bool:
    if isinstance(term, (*_PLAIN, PortableError, PortableObject)):
        return True
    if depth >= _MAX_DEPTH or isinstance(term, BaseException):
        return False
    if isinstance(term, msgspec.Struct):
        return all(_is_portable(getattr(term, f), depth + 1) for f in term.__struct_fields__)
    kind = type(term)
    if kind in (tuple, list, set, frozenset):
        return all(_is_portable(item, depth + 1) for item in term)
    if kind is dict:
        return all(
            _is_portable(k, depth + 1) and _is_portable(v, depth + 1) for k, v in term.items()
        )
    return not isinstance(term, Mapping) and _encodable(term)


# ----------------------------------------------------------------------- from portable form
def from_portable(term: Any) -> Any:
    """Rebuild gen_agent's own errors in a portable `term`.

    Args:
        term: a value in portable form (from `to_portable` or `decode`).

    Returns:
        A copy of `term` where every `PortableError` of a gen_agent error type (a
        `GenAgentError` subclass defined in a `gen_agent` module, e.g. `TurnError`,
        `AlreadyStarted`, `BackendError`) is an instance of that type again, with the same
        message, args and attributes (so the same `reason`), its attributes rebuilt in turn.
        Everything else is returned as it is: a foreign exception stays a `PortableError`, an
        `AgentRef` a `PortableObject` (its process may be gone). The traceback is not
        restored; the rebuilt error's `__notes__` holds the original frames as one text.

    Mirrors: see the module docstring.
    """
    return _rebuild(term, 0)


def _rebuild(term: Any, depth: int) -> Any:
    if isinstance(term, _PLAIN) or depth >= _MAX_DEPTH:
        return term
    if isinstance(term, PortableError):
        exc = _own_error(term, depth)
        return term if exc is None else exc
    kind = type(term)
    if kind is tuple:
        return tuple(_rebuild(item, depth + 1) for item in term)
    if kind is list:
        return [_rebuild(item, depth + 1) for item in term]
    if kind is dict:
        return {k: _rebuild(v, depth + 1) for k, v in term.items()}
    if isinstance(term, msgspec.Struct) and not isinstance(term, PortableObject):
        changes = {}
        for name in term.__struct_fields__:
            value = getattr(term, name)
            rebuilt = _rebuild(value, depth + 1)
            if rebuilt is not value:
                changes[name] = rebuilt
        return msgspec.structs.replace(term, **changes) if changes else term
    return term


def _own_error(record: PortableError, depth: int) -> BaseException | None:
    from gen_agent._errors import GenAgentError

    cls = _gen_agent_type(record.module, record.type_name)
    if cls is None or not (isinstance(cls, type) and issubclass(cls, GenAgentError)):
        return None
    exc = cls.__new__(cls)
    exc.args = tuple(_rebuild(arg, depth + 1) for arg in record.args)
    for name, value in record.attrs.items():
        setattr(exc, name, _rebuild(value, depth + 1))
    if record.frames:
        exc.add_note("Original traceback (from another process):\n" + record.traceback_text)
    return exc


def _gen_agent_type(module: str, qualname: str) -> Any:
    # Only gen_agent's own modules are imported: a record never names code to load elsewhere.
    if module != "gen_agent" and not module.startswith("gen_agent."):
        return None
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return None
    return obj


def to_exception(term: Any) -> BaseException:
    """An exception to raise for a portable error record.

    Args:
        term: a `PortableError` (or an exception, returned as it is).

    Returns:
        The rebuilt gen_agent error for a gen_agent record; for a foreign record, a
        `gen_agent.GenAgentError` whose `reason` is `("remote_error", record)` (a
        foreign exception is never impersonated).

    Raises:
        TypeError: `term` is neither a `PortableError` nor an exception.
    """
    if isinstance(term, BaseException):
        return term
    if not isinstance(term, PortableError):
        raise TypeError(f"to_exception: expected a PortableError, got {type(term).__name__}")
    rebuilt = from_portable(term)
    if isinstance(rebuilt, BaseException):
        return rebuilt
    from gen_agent._errors import GenAgentError

    return GenAgentError(("remote_error", term), f"remote {term.type_name}")


# ------------------------------------------------------------------------ MessagePack codec
# Extension codes: MessagePack arrays would come back as lists and structs as dicts, so tuples,
# sets and structs travel as extensions and are rebuilt exactly.
_EXT_TUPLE = 1
_EXT_SET = 2
_EXT_FROZENSET = 3
_EXT_STRUCT = 4


def encode(term: Any) -> bytes:
    """Encode `term` (made portable first) as MessagePack bytes.

    Args:
        term: any reason or value (see `to_portable`).

    Returns:
        Bytes that `decode` turns back into `to_portable(term)`, tuples, sets, frozensets,
        `PortableError`, `PortableObject` and gen_agent's structs (`Response`, `OverloadInfo`,
        ...) included. Other msgspec structs are written too and decoded as the struct when
        its class is passed to `decode`, else as a `PortableObject` with its fields.

    Raises:
        TypeError: a value msgspec cannot encode survived `to_portable` (not expected).
    """
    return _ENCODER.encode(_wire(to_portable(term)))


def _wire(term: Any) -> Any:
    if isinstance(term, _PLAIN):
        return term
    kind = type(term)
    if kind is tuple:
        return msgspec.msgpack.Ext(_EXT_TUPLE, _ENCODER.encode([_wire(x) for x in term]))
    if kind is list:
        return [_wire(x) for x in term]
    if kind is dict:
        return {_wire(k): _wire(v) for k, v in term.items()}
    if kind in (set, frozenset):
        code = _EXT_SET if kind is set else _EXT_FROZENSET
        return msgspec.msgpack.Ext(code, _ENCODER.encode([_wire(x) for x in term]))
    if isinstance(term, msgspec.Struct):
        fields = {name: _wire(getattr(term, name)) for name in term.__struct_fields__}
        name = f"{kind.__module__}:{kind.__qualname__}"
        return msgspec.msgpack.Ext(_EXT_STRUCT, _ENCODER.encode([name, fields]))
    return term


def decode(data: bytes, *, structs: tuple[type[msgspec.Struct], ...] = ()) -> Any:
    """Decode bytes written by `encode`.

    Args:
        data: the bytes.
        structs: msgspec struct classes outside gen_agent to rebuild (gen_agent's own are
            always rebuilt; a struct not named here comes back as a `PortableObject` whose
            `attrs` are its fields). Classes are never imported by name outside gen_agent.

    Returns:
        The portable value, equal to `to_portable` of what was encoded. Apply `from_portable`
        to get gen_agent's errors back as exceptions.

    Raises:
        msgspec.DecodeError: the bytes are not what `encode` writes.
    """
    known = {f"{cls.__module__}:{cls.__qualname__}": cls for cls in structs}

    def ext_hook(code: int, payload: memoryview) -> Any:
        items = decoder.decode(payload)
        if code == _EXT_TUPLE:
            return tuple(items)
        if code == _EXT_SET:
            return set(items)
        if code == _EXT_FROZENSET:
            return frozenset(items)
        if code == _EXT_STRUCT:
            name, fields = items
            return _struct_from(name, fields, known)
        raise msgspec.DecodeError(f"unknown MessagePack extension code {code}")

    decoder: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(ext_hook=ext_hook)
    return decoder.decode(data)


def _struct_from(name: str, fields: dict[str, Any], known: dict[str, type]) -> Any:
    cls = known.get(name)
    if cls is None:
        module, _, qualname = name.partition(":")
        candidate = _gen_agent_type(module, qualname)
        if isinstance(candidate, type) and issubclass(candidate, msgspec.Struct):
            cls = candidate
    if cls is None:
        module, _, qualname = name.partition(":")
        return PortableObject(qualname, module, fields)
    try:
        return cls(**fields)
    except TypeError as exc:
        raise msgspec.DecodeError(f"cannot rebuild {name}: {type(exc).__name__}") from None


_ENCODER = msgspec.msgpack.Encoder()
