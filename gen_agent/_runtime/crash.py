"""Logging an exception within the redaction promise (see `gen_agent._debug`)."""

from __future__ import annotations

import traceback
from typing import Any

from gen_agent._debug import debug_enabled


def frames(exc: BaseException) -> list[tuple[str, int, str]]:
    """The traceback of `exc` as `(file, line, function)` tuples, outermost first."""
    return [(f.filename, f.lineno or 0, f.name) for f in traceback.extract_tb(exc.__traceback__)]


def log_exception(log: Any, level: str, text: str, exc: BaseException) -> None:
    """Log `text` about `exc` at `level`: its type and where it was raised, never its message
    (unless `gen_agent.set_debug(True)`, which adds the message and the full traceback).

    The record's extra has `exception_type` (str) and `frames` (see `frames`).
    """
    stack = frames(exc)
    where = f" at {stack[-1][0]}:{stack[-1][1]} in {stack[-1][2]}" if stack else ""
    kind = type(exc).__name__
    bound = log.bind(exception_type=kind, frames=stack)
    if debug_enabled():
        bound.opt(exception=exc, depth=1).log(level, "{} (error: {}{}: {})", text, kind, where,
                                              str(exc))
    else:
        bound.opt(depth=1).log(level, "{} (error: {}{})", text, kind, where)
