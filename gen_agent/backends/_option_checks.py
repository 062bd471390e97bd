"""Backend option validation shared by the bundled backends (Claude, Codex, Anthropic, OpenAI).

Each backend describes its options twice, once as data: a msgspec Struct (the validated
options, with their defaults) and a table `key -> (check, expected)` whose `check` is a
predicate and `expected` the form named in the error message. `validate_options` applies the
table to the dict `init_agent` returned and builds the Struct, so every backend refuses bad
options the same way:

- not a mapping → `SessionStartError(("invalid_options", type_name))`;
- a key the backend refuses on purpose → `SessionStartError(("invalid_option", key, value))`
  with the reason it is refused;
- a key not in the table → `SessionStartError(("unknown_option", key))`, the message listing
  the valid keys;
- a value its check refuses → `SessionStartError(("invalid_option", key, value))`.

`None` for any option means "the default". The predicates below are the checks the tables
share.

Secrets never show: `shown_options` gives an options Struct's repr with its credentials
masked (the bundled options Structs use it as their `repr`), and a refused value of a secret
option is masked in the error's reason and message alike (`masked`).
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Callable, Collection, Mapping
from typing import Any, Final, TypeVar

import msgspec
import msgspec.inspect

from gen_agent._timers import MAX_DURATION_MS
from gen_agent.backend import SessionStartError

__all__ = [
    "Check",
    "duration_ms",
    "int_at_least",
    "is_arg",
    "is_arg_seq",
    "is_bool",
    "is_dict_seq",
    "is_dir",
    "is_env",
    "is_number",
    "is_positive_number",
    "is_str",
    "is_str_map",
    "is_text",
    "keys_other_than",
    "masked",
    "number_between",
    "one_of",
    "rich_fields",
    "shown_options",
    "validate_options",
]

Check = tuple[Callable[[Any], bool], str]
"""One row of an option table: the predicate a value must pass, and the expected form (for
the error message, e.g. `"an int >= 1 (bytes)"`)."""

OptionsT = TypeVar("OptionsT", bound=msgspec.Struct)

_SHOWN_VALUE_CHARS = 80

MASK: Final = "<redacted>"
"""What a secret is shown as."""

# Options holding credentials as a whole (their values are masked).
_SECRET_OPTIONS: Final = frozenset({"api_key"})
# Options that are maps of names to values (environment variables, HTTP headers): a value is
# masked when its name looks like a credential's.
_SECRET_MAPS: Final = frozenset({"env", "default_headers"})
_SECRET_NAME: Final = re.compile(
    r"key|token|secret|passw|auth|credential|cookie|private|signature", re.IGNORECASE)
# The user:password part of a URL (`https://user:pw@host`).
_URL_USERINFO: Final = re.compile(r"(://)[^/@\s]+@")


def is_str(value: Any) -> bool:
    """True for any `str`."""
    return isinstance(value, str)


def is_bool(value: Any) -> bool:
    """True for a `bool`."""
    return isinstance(value, bool)


def is_text(value: Any) -> bool:
    """True for a non-empty `str`."""
    return isinstance(value, str) and value != ""


def is_arg(value: Any) -> bool:
    """True for a non-empty `str` without NUL: a value that can be a command-line argument."""
    return isinstance(value, str) and value != "" and "\x00" not in value


def is_arg_seq(value: Any) -> bool:
    """True for a list or tuple of `is_arg` strings."""
    return isinstance(value, list | tuple) and all(is_arg(item) for item in value)


def int_at_least(minimum: int) -> Callable[[Any], bool]:
    """A predicate: an `int` (not a `bool`) >= `minimum`."""
    return lambda value: isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def duration_ms(minimum: int) -> Check:
    """The table row of a duration in milliseconds: an `int` from `minimum` up to
    `MAX_DURATION_MS` (`threading.TIMEOUT_MAX`, what the platform can wait; ~292 years)."""
    at_least = int_at_least(minimum)
    return (lambda value: at_least(value) and value <= MAX_DURATION_MS,
            f"an int from {minimum} to {MAX_DURATION_MS} (milliseconds)")


def is_number(value: Any) -> bool:
    """True for a finite `int` or `float` (not a `bool`; never nan or an infinity)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def is_positive_number(value: Any) -> bool:
    """True for a finite `int` or `float` (not a `bool`) > 0."""
    return is_number(value) and value > 0


def number_between(low: float, high: float) -> Callable[[Any], bool]:
    """A predicate: a finite `int` or `float` (not a `bool`) from `low` to `high`, both
    included."""
    return lambda value: is_number(value) and low <= value <= high


def is_str_map(value: Any) -> bool:
    """True for a mapping of `str` to `str`."""
    return isinstance(value, Mapping) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    )


def is_dict_seq(value: Any) -> bool:
    """True for a list or tuple of mappings."""
    return isinstance(value, list | tuple) and all(isinstance(item, Mapping) for item in value)


def is_env(value: Any) -> bool:
    """True for environment variables: `is_arg` names without `=` to `str` values without NUL."""
    return isinstance(value, Mapping) and all(
        is_arg(k) and "=" not in k and isinstance(v, str) and "\x00" not in v
        for k, v in value.items()
    )


def is_dir(value: Any) -> bool:
    """True for the path (`is_arg`) of an existing directory."""
    return is_arg(value) and os.path.isdir(value)


def keys_other_than(reserved: Collection[str]) -> Callable[[Any], bool]:
    """A predicate: a mapping whose keys are `str` and none of `reserved` (the keys a backend
    sets itself)."""
    return lambda value: (
        isinstance(value, Mapping) and all(isinstance(k, str) and k not in reserved for k in value)
    )


def one_of(values: Collection[str]) -> Check:
    """The table row for a value that must be one of `values`."""
    return values.__contains__, f"one of {sorted(values)}"


def validate_options(
    opts: Any,
    options_type: type[OptionsT],
    checks: Mapping[str, Check],
    *,
    backend: str,
    rejected: Mapping[str, str] | None = None,
    show_values: bool = False,
) -> OptionsT:
    """Check `opts` against `checks` and build the `options_type` Struct from them.

    Args:
        opts: the backend options as given (normally a `dict`); `None` values mean "default".
        options_type: the msgspec Struct of the validated options; its fields are the keys of
            `checks`.
        checks: `key -> (predicate, expected form)` for every accepted key.
        backend: the backend's name for messages (`"ClaudeCLI"`).
        rejected: keys refused on purpose, each with the reason (for the message).
        show_values: name a refused value's type and (shortened) repr in the message; False
            names its type only (for options that may hold credentials).

    Returns:
        The `options_type` instance. A value is stored in the form its field keeps: a mapping
        as a `dict`, a list or tuple as a `tuple` (its mappings as `dict`s), an `int` given
        for a field declared `float` as a `float`.

    Raises:
        SessionStartError: reason `("invalid_options", type_name)`,
            `("unknown_option", key)` or `("invalid_option", key, value)`.
    """
    if not isinstance(opts, Mapping):
        raise SessionStartError(
            ("invalid_options", type(opts).__name__),
            f"{backend} options must be a dict, got {type(opts).__name__}",
        )
    refused = rejected or {}
    for key, value in opts.items():
        if key in refused:
            raise SessionStartError(
                ("invalid_option", key, value), f"{backend} option {key!r}: {refused[key]}"
            )
        if key not in checks:
            valid = ", ".join(sorted(checks))
            raise SessionStartError(
                ("unknown_option", key),
                f"unknown {backend} option {key!r}; accepted: {valid}",
            )
        check, expected = checks[key]
        if value is not None and not check(value):
            safe = masked(key, value)
            shown = _shape(safe) if show_values else type(value).__name__
            raise SessionStartError(
                ("invalid_option", key, safe),
                f"{backend} option {key!r} must be {expected}, got {shown}",
            )
    floats = _float_fields(options_type)
    given = {
        key: float(value) if key in floats else _stored(value)
        for key, value in opts.items()
        if value is not None
    }
    return options_type(**given)


def check_warm_only(backend: str, opts: Mapping[str, Any], options: Any, warm: bool,
                    needs: str) -> None:
    """Refuse the `prewarm` and `fleet` options of a session that runs no warm process
    (`warm` False): they start a process ahead of a turn.

    Raises:
        SessionStartError: `("invalid_option", key, value)`, the message saying the session
            `needs` another mode.
    """
    if warm or not (options.prewarm or options.fleet is not None):
        return
    key = "prewarm" if options.prewarm else "fleet"
    raise SessionStartError(("invalid_option", key, opts.get(key)),
                            f"{backend} option {key!r}: needs {needs}")


def masked(key: str, value: Any) -> Any:
    """`value` of option `key` as it may be shown: an `api_key` as `MASK`; in `env` and
    `default_headers`, each value whose name looks like a credential's (`KEY`, `TOKEN`,
    `SECRET`, `PASSWORD`, `AUTH`, ... in any case) as `MASK`; in any `str` the `user:password@`
    of a URL as `MASK@`. Other values unchanged (the same object when nothing is masked)."""
    if key in _SECRET_OPTIONS and value is not None:
        return MASK
    if key in _SECRET_MAPS and isinstance(value, Mapping):
        return {name: MASK if isinstance(name, str) and _SECRET_NAME.search(name)
                else masked("", item) for name, item in value.items()}
    if isinstance(value, str) and "@" in value:
        return _URL_USERINFO.sub(rf"\1{MASK}@", value)
    return value


def shown_options(options: msgspec.Struct) -> str:
    """The repr of an options Struct with its secrets masked (see `masked`):
    `AnthropicOptions(api_key='<redacted>', base_url=..., ...)`."""
    fields = ", ".join(f"{name}={value!r}" for name, value in rich_fields(options))
    return f"{type(options).__name__}({fields})"


def rich_fields(options: msgspec.Struct) -> list[tuple[str, Any]]:
    """`(name, masked value)` of every field of an options Struct: its `__rich_repr__`."""
    return [(name, masked(name, getattr(options, name))) for name in options.__struct_fields__]


def _stored(value: Any) -> Any:
    # The Struct is frozen; copies keep a caller's later changes to its dicts out of it.
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, list | tuple):
        return tuple(dict(item) if isinstance(item, Mapping) else item for item in value)
    return value


@functools.cache
def _float_fields(options_type: type[msgspec.Struct]) -> frozenset[str]:
    info = msgspec.inspect.type_info(options_type)
    assert isinstance(info, msgspec.inspect.StructType)
    return frozenset(
        field.name for field in info.fields if isinstance(field.type, msgspec.inspect.FloatType)
    )


def _shape(value: Any) -> str:
    text = repr(value)
    if len(text) > _SHOWN_VALUE_CHARS:
        text = text[: _SHOWN_VALUE_CHARS - 3] + "..."
    return f"{type(value).__name__} {text}"
