"""The one development switch: show exception messages and full tracebacks in gen_agent's logs.

By default gen_agent's log records never carry an exception *message*, a prompt, a response
text or agent state (they may hold user data): a crashed callback is logged with its exception
type and where it was raised (the traceback's frames as `(file, line, function)` in the
record's `extra["frames"]`, the innermost one in the message). `set_debug(True)` adds the
exception message to the text and attaches the full traceback to the record (loguru prints it
with the message); use it while developing, never where logs leave the machine.

Logging itself stays off until you call `logger.enable("gen_agent")` (loguru).
"""

from __future__ import annotations

__all__ = ["debug_enabled", "set_debug"]

_state = {"enabled": False}


def set_debug(enabled: bool = True) -> None:
    """Turn the development switch on (or off with `enabled=False`) for the whole process.

    On: log records of crashed callbacks, turn tasks and backends also carry the exception
    message and the full traceback. Off (the default): type name and frames only.
    """
    if not isinstance(enabled, bool):
        raise TypeError(f"set_debug: enabled must be a bool, got {type(enabled).__name__}")
    _state["enabled"] = enabled


def debug_enabled() -> bool:
    """True while `set_debug(True)` is in force."""
    return _state["enabled"]
