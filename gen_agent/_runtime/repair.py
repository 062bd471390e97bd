"""What the model is told about a turn cut short: one repair for a resume and for an
in-process cut (an interrupt, the watchdog) of an agent that opts in.

- `report_of`: the `InterruptedTurn` of a turn's in-flight marker and journal entries.
- `repaired`: a provider-neutral history (the HTTP backends' `export_session` record) with
  the cut turn added: its user message, its journalled tool calls and their results (an
  in-doubt call's: the "outcome unknown" text), and a closing note.
- `preamble`: the same as text before the next prompt, for a backend whose transcript
  gen_agent cannot edit (a CLI's).
- `cut_session`: the session an agent keeps after an in-process cut when it sets
  `repair_interrupted_turns = True` (`Durable.cut_short`): the repaired history through the
  backend's `export_session` / `restore_session` (the resume path's code), else the
  preamble for the next prompt.
- `end_session`: the backend's optional `terminate_session`, a failure logged, not raised.
- `MemoryJournal`: the turn journal of such an agent without a store (the same guard and
  bookkeeping as `TurnJournal`, nothing written, no idempotency key of its own).

Mirrors: nothing in the Elixir original (§4.13 keeps the session from before the turn; the
repair is opt-in for an in-process cut).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import msgspec

from gen_agent._runtime.journal import TurnJournal
from gen_agent.store import InFlightTurn, InterruptedTurn, ToolCallEntry

CUT_REASONS = frozenset({"interrupted", "timeout"})
"""The reasons of an in-process cut the opt-in repairs: an interrupt, the watchdog."""


def report_of(key: str, flight: InFlightTurn,
              entries: Iterable[ToolCallEntry]) -> InterruptedTurn:
    """The `InterruptedTurn` of the turn of `flight` whose journal holds `entries`."""
    calls = list(entries)
    return InterruptedTurn(
        key=key, ref=flight.ref, origin=flight.origin, attempt=flight.attempt,
        started_at=flight.started_at, detected_at=time.time(), prompt=flight.prompt,
        output=flight.output, tools=flight.tools,
        finished=tuple(e for e in calls if e.finished_at is not None),
        in_doubt=tuple(e for e in calls if e.finished_at is None),
        usage=dict(flight.usage), phase=flight.phase, response=flight.response)


def repaired(conversation: Any, cut: InterruptedTurn | None, unknown: str, note: str) -> Any:
    """A kept provider-neutral history (the HTTP backends' record) with what the model
    needs not to repeat the cut turn: its user message, its journalled tool calls, their
    results (in-doubt ones: `unknown`, as errors) and the closing `note` (an assistant
    message). With a response id to continue from (`OpenAIResponses(store=True)`), the
    backend sends a kept history as input items of the next request. Other records (a
    CLI's session id), a turn that was answered and one without a prompt are returned as
    they are (the same object)."""
    if (cut is None or cut.phase != "turn" or cut.prompt is None
            or not isinstance(conversation, dict)
            or not isinstance(conversation.get("history"), list)):
        return conversation
    added: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": cut.prompt}]}]
    calls = sorted([*cut.finished, *cut.in_doubt], key=lambda entry: entry.started_at)
    if calls:
        added.append({"role": "assistant", "content": [
            {"type": "tool_call", "id": e.call_id, "name": e.tool, "input": e.input}
            for e in calls]})
        added.append({"role": "user", "content": [
            {"type": "tool_result", "tool_call_id": e.call_id,
             "content": unknown if e.finished_at is None else (e.result or ""),
             "is_error": e.finished_at is None or e.is_error}
            for e in calls]})
    # The backends replace a trailing user message (a failed turn's) with the next
    # prompt: a closing note keeps the repair, and tells the model the turn ended.
    added.append({"role": "assistant", "content": [{"type": "text", "text": note}]})
    return {**conversation, "history": [*conversation["history"], *added]}


def preamble(cut: InterruptedTurn, unknown: str, result_chars: int = 2_000,
             kept: frozenset[str] = frozenset()) -> str:
    """The text put before the next prompt about an interrupted turn (see `prefixed`).

    `kept` is what the backend's own transcript keeps of a cut turn (its `keeps_cut_turn`):
    `"prompt"` leaves the request out, `"tool_calls"` the finished calls (the transcript
    shows them with their outputs); in-doubt calls are always listed, since a transcript's
    stand-in for a missing output (Codex: "aborted") does not say the call may have run."""
    lines = ["[Context: your previous turn was interrupted before it was answered (the process "
             "running it stopped)."]
    if "prompt" in kept:
        lines.append("Its request is the unanswered message above.")
    else:
        lines.append(f"The request was: {cut.prompt}")
    calls = sorted([*cut.finished, *cut.in_doubt], key=lambda entry: entry.started_at)
    if "tool_calls" in kept:
        lines.append("A tool call of it shown above as aborted, or without a result, may have "
                     "run before the stop: check its effect before repeating it.")
        calls = [entry for entry in calls if entry.finished_at is None]
    if calls:
        lines.append("Tool calls made in that turn:")
    for entry in calls:
        try:
            arguments = msgspec.json.encode(entry.input).decode()
        except (TypeError, msgspec.EncodeError, UnicodeEncodeError):
            arguments = "(arguments not shown)"
        if entry.finished_at is None:
            outcome = unknown
        else:
            text = (entry.result or "")[:result_chars]
            outcome = f"{'error' if entry.is_error else 'result'}: {text}"
        lines.append(f"- {entry.tool} {arguments} -> {outcome}")
    return "\n".join(lines) + "]"


def kept_of(backend: Any, conversation: Any) -> frozenset[str]:
    """The backend's `keeps_cut_turn` (what its own transcript keeps of a cut turn) when the
    stored `conversation` resumes that transcript (a `session_id` to resume): a turn cut
    before any was stored (e.g. the first) resumes nothing, so nothing of it was kept."""
    kept = getattr(backend, "keeps_cut_turn", None)
    if (not isinstance(kept, frozenset | set | tuple) or not isinstance(conversation, dict)
            or conversation.get("session_id") is None):
        return frozenset()
    return frozenset(kept)


def cut_session(backend: Any, session: Any, backend_opts: dict[str, Any],
                cut: InterruptedTurn, unknown: str, note: str,
                log: Any) -> tuple[Any, str | None]:
    """The session to keep after an in-process cut, and the preamble for the next prompt.

    A backend whose `export_session` record is a provider-neutral history (`AnthropicAPI`,
    `OpenAIResponses`) gets the repaired history through its `restore_session` (a new
    session; the old one is terminated), as at a resume: `(new session, None)`. Any other
    backend keeps `session` and the next prompt gets the `preamble`. A backend that fails
    to export or restore keeps `session` (logged by exception type) and gets the preamble.
    """
    export = getattr(backend, "export_session", None)
    restore = getattr(backend, "restore_session", None)
    if export is None or restore is None:
        return session, preamble(cut, unknown)
    try:
        data = export(session)
        fixed = repaired(data, cut, unknown, note)
        if fixed is data:  # a CLI's record: its transcript may keep part of the turn
            return session, preamble(cut, unknown, kept=kept_of(backend, data))
        fresh = restore(fixed, dict(backend_opts))
    except Exception as exc:  # noqa: BLE001 - the cut turn's session is kept; reported
        log.warning("gen_agent could not repair the cut turn's history ({})",
                    type(exc).__name__)
        return session, preamble(cut, unknown)
    end_session(backend, session, log)  # its client: the restored session has its own
    return fresh, None


def end_session(backend: Any, session: Any, log: Any) -> None:
    """The backend's optional `terminate_session(session)`; a failure is logged by
    exception type, never raised (the repair or the start goes on)."""
    terminate = getattr(backend, "terminate_session", None)
    if terminate is None:
        return
    try:
        terminate(session)
    except Exception as exc:  # noqa: BLE001 - reported; the caller goes on
        log.warning("gen_agent terminate_session raised {}", type(exc).__name__)


class MemoryJournal(TurnJournal):
    """The turn journal of an agent with `repair_interrupted_turns` and no store: the
    entries are kept in memory only, for the repair of a cut turn; the tools' idempotency
    keys stay those of an agent without a store."""

    def idempotency_key(self, call_id: str) -> str:
        return ""  # `ToolContext` derives the store-less key itself

    def _write(self, entry: ToolCallEntry, *, sync: bool) -> str | None:
        return None  # kept in `entries` only

    def _write_marker(self) -> None:
        return None


__all__ = ["CUT_REASONS", "MemoryJournal", "cut_session", "preamble", "repaired",
           "report_of"]
