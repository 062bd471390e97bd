"""`term_size`: the one deterministic byte size behind every byte limit.

The Elixir original measures terms with `:erlang.external_size/1`; Python has no such function, so
gen_agent fixes its own (docs/pages/contract.md#s1-4, #s12-6; docs: Concepts) and exposes it,
because limits such as `max_pending_prompt_bytes` and `max_event_bytes_per_turn` are configured in
its terms.

Encoding: the length in bytes of the value's MessagePack encoding by msgspec
(`msgspec.msgpack.encode`). msgspec Structs (e.g. `Event`) encode as maps of their fields,
tuples as arrays. A value msgspec cannot encode natively is encoded as the bytes of
`pickle.dumps(value, protocol=5)` (a value holding an int beyond 64 bits, or a `str` with a
lone surrogate, which UTF-8 cannot encode, is pickled whole) and, if pickling fails too, as
the UTF-8 bytes of `type(value).__qualname__`. A `str` of n ASCII characters therefore
measures n + 1 to n + 5 bytes. The result is the same for equal values in every process and
on every platform.
"""

from __future__ import annotations

import pickle
from typing import Any

import msgspec

__all__ = ["term_size"]


def _fallback(value: Any) -> Any:
    # Objects msgspec cannot encode (exceptions, arbitrary classes) still need a stable size.
    try:
        return pickle.dumps(value, protocol=5)
    except Exception:  # noqa: BLE001 - unpicklable values are measured by their type name
        return type(value).__qualname__


_encoder = msgspec.msgpack.Encoder(enc_hook=_fallback)


def term_size(value: Any) -> int:
    """Return the size of `value` in bytes, as every byte limit of gen_agent counts it.

    Args:
        value: any Python value (str, bytes, dict, list, tuple, numbers, `Event`, Structs...).

    Returns:
        The length in bytes of its msgspec MessagePack encoding (see the module docstring for
        the fallback for values MessagePack cannot hold, a `str` with a lone surrogate among them).
        Always >= 1.

    Never raises for ordinary values; a value whose `__reduce__` misbehaves in a way other
    than raising an `Exception` may propagate that error.

    Mirrors: `:erlang.external_size/1` as used by GenAgent's limits (docs/pages/contract.md#s1-4;
    docs: Concepts).
    """
    try:
        return len(_encoder.encode(value))
    except (OverflowError, UnicodeEncodeError):
        # ints beyond 64 bits and strs with a lone surrogate never reach enc_hook; measure
        # the whole value pickled instead (pickle keeps surrogates)
        return len(_encoder.encode(_fallback(value)))
