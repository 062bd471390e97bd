"""Steering a running warm `claude` turn: the `busy="steer"` capability of `ClaudeCLI`
(docs/pages/busy.md, "steer").

Facts of the pinned CLI (2.1.197, tests/backends/test_busy_real_cli.py): a `user` line with
`"priority": "next"` written to the warm process's stdin while a tool runs joins the running
turn at the tool boundary (the CLI adds it to the tool_result's message), is replayed with its
uuid inside that turn (`--replay-user-messages`), and the turn ends with one `result`. Written
when no tool runs, it becomes a turn of its own after the running one.

So a steer is offered only while a `tool_use` of the turn has no `tool_result` yet, and the
turn counts the steered lines whose replay it saw (`joined`, reported on its terminal event as
`data["steered_joined"]`, in the order they were written: the CLI takes queued input in
order). A steered line the turn ended without taking (the tool boundary had passed) is an
orphan: the CLI runs it as a turn of its own later; that turn's lines are drained and
dropped (never a caller's, never an `UnrequestedTurn`), and the runtime runs the request as
a normal turn instead.
"""

from __future__ import annotations

import threading
import uuid
from typing import TYPE_CHECKING, Any, Final

from loguru import logger

if TYPE_CHECKING:
    from gen_agent.backends._subprocess.claude_warm import WarmSlot

__all__ = ["JOINED_KEY", "Orphans", "SteerState", "steer"]

JOINED_KEY: Final = "steered_joined"
"""The terminal data key counting the steered prompts that joined the turn (int)."""


class SteerState:
    """A warm turn's steering bookkeeping (thread-safe): whether a tool call is in flight
    (`tool_open`, set by the reader thread), the uuids of the steered lines written into it
    (`steers`), how many the CLI replayed inside the turn (`joined`), and whether the turn
    ended (`closed`: no steer is written after that)."""

    __slots__ = ("closed", "joined", "lock", "steers", "tool_open")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tool_open = False
        self.closed = False
        self.steers: list[str] = []
        self.joined = 0

    def note(self, raw: bytes) -> None:
        """Reader thread: a line of the running turn (after its echo), in order."""
        if b'"tool_use"' in raw and b'"assistant"' in raw[:40]:
            self.tool_open = True
        elif b'"tool_result"' in raw:
            self.tool_open = False
        if self.steers and b'"isReplay"' in raw:
            from gen_agent.backends._subprocess.jsonl import decode_json

            try:
                line = decode_json(raw)
            except Exception:  # noqa: BLE001 - an unreadable line joins nothing
                return
            if isinstance(line, dict) and line.get("uuid") in self.steers[self.joined:]:
                with self.lock:
                    self.joined += 1

    def close(self) -> list[str]:
        """The turn ended: no more steers; returns the uuids of those it did not take (the
        first call only)."""
        with self.lock:
            if self.closed:
                return []
            self.closed = True
            return self.steers[self.joined:]


class Orphans:
    """The uuids of steered lines a turn ended without taking (reader thread, mostly): the
    CLI runs each as a turn of its own later; the runtime reruns the request, so that turn
    is dropped, recognised by the line's replay."""

    __slots__ = ("_in_stray", "_uuids")

    def __init__(self) -> None:
        self._uuids: set[str] = set()
        self._in_stray = False  # the turn of the CLI's own in progress replayed one

    @property
    def pending(self) -> bool:
        return bool(self._uuids)

    def add(self, uuids: list[str]) -> bool:
        self._uuids.update(uuids)
        return bool(uuids)

    def seen(self, line_id: Any) -> None:
        """A `user` line of a turn of the CLI's own."""
        if line_id in self._uuids:
            self._uuids.discard(line_id)
            self._in_stray = True

    def drop_stray(self) -> bool:
        """That turn ended: True when it was an orphan's (dropped; a debug log)."""
        if not self._in_stray:
            return False
        self._in_stray = False
        logger.debug("gen_agent claude: the turn of a steered prompt it did not take was "
                     "dropped")
        return True


def steer_line(prompt: str, line_id: str) -> dict[str, Any]:
    return {"type": "user", "message": {"role": "user", "content": prompt},
            "parent_tool_use_id": None, "session_id": "default", "uuid": line_id,
            "priority": "next"}


def steer(slot: WarmSlot, prompt: str) -> bool:
    """Write `prompt` into the slot's running turn if a tool call of it is in flight (agent
    thread; quick). True when written (the turn reports whether it took it); False when no
    turn runs, its prompt is not yet taken, no tool runs, or the process is gone."""
    with slot._cond:
        lines, process = slot._turn, slot.process
    if lines is None or process is None or process.turn is not lines or not lines.echoed:
        return False
    state = lines.steer
    with state.lock:
        if state.closed or not state.tool_open:
            return False
        line_id = str(uuid.uuid4())
        try:
            process.live.write_json(steer_line(prompt, line_id))
        except OSError:
            return False
        state.steers.append(line_id)
    return True
