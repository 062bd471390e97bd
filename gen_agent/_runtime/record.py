"""Finishing a turn: its record (totals and a structured reply's check) and the telemetry of a
turn's start, stop and error.

Functions of the actor's data, called from its thread; `emit(name, measurements, metadata)`
is the actor's emitter (it adds the agent's name) and `meta(request, attempt, **extra)` builds
a turn's metadata. Telemetry that nobody attached is not built: the check is
`name in telemetry._table` (what `telemetry.attached` answers, without a call), so an
uninstrumented turn pays one dict lookup per event. Measurements are numbers only, never
content (a prompt or response is metadata, for handlers that ask for it).
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from gen_agent import telemetry
from gen_agent._accounting import Spend, add_turn
from gen_agent._event import monotonic_ms
from gen_agent._output import InvalidOutput, parse_output
from gen_agent._reasons import error_type, reason_kind
from gen_agent._response import Response
from gen_agent._runtime.capture import tool_calls

#: The trace carrier of a turn nobody instruments (never written).
NO_CARRIER: dict[str, str] = {}


def complete(spend: Spend, response: Response, output: Any) -> tuple[Spend, Response, Any]:
    """Add the turn to the agent's totals and validate a structured reply (`output`, a type,
    or None).

    Returns `(spend, response, None)` with `session_usage`/`session_cost_usd` (and `parsed`)
    filled, or `(spend, response, ("invalid_output", InvalidOutput))` (gen_agent._output).
    """
    if response.usage is not None or response.cost_usd is not None:
        spend = add_turn(spend, response.usage, response.cost_usd)
    if spend.turns:
        response = msgspec.structs.replace(
            response, session_usage=dict(spend.usage) if spend.usage else None,
            session_cost_usd=spend.cost_usd)
    if output is None:
        return spend, response, None
    try:
        parsed = parse_output(output, response)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        return spend, response, ("invalid_output", InvalidOutput(message=str(exc),
                                                                 response=response))
    return spend, msgspec.structs.replace(response, parsed=parsed), None


def spend_of(totals: Any) -> Spend:
    """The accounting `Spend` of a store's `Totals` (gen_agent.store)."""
    cost = totals.cost_usd if totals.cost_usd else None
    return Spend(usage=dict(totals.usage), cost_usd=cost, turns=totals.turns)


def request_model(session: Any) -> str | None:
    """The model a session's options name (the bundled backends' `model` option), or None."""
    model = getattr(getattr(session, "options", None), "model", None)
    return model if type(model) is str else None


def started(emit: Any, meta: Any, turn: Any, prompt: str, state: Any, *, backend: Any,
            session: Any, session_id: Any, queue_depth: int) -> dict[str, str]:
    """PROMPT_START and TURN_START of a turn that starts now; returns its trace carrier (the
    one every turn shares when nobody listens to TURN_START)."""
    request, attempt = turn.request, turn.attempt
    if telemetry.PROMPT_START in telemetry._table:
        emit(telemetry.PROMPT_START, {"system_time": time.time_ns()}, meta(
            request, attempt, prompt=turn.prompt, original_prompt=prompt,
            rewritten=turn.prompt != prompt, agent_state=state))
    if telemetry.TURN_START not in telemetry._table:
        return NO_CARRIER
    carrier: dict[str, str] = {}
    queued_at = request.queued_at
    emit(telemetry.TURN_START, {
        "system_time": time.time_ns(),
        "queue_wait_ms": 0 if queued_at is None else max(0, monotonic_ms() - queued_at),
        "queue_depth": queue_depth,
    }, meta(request, attempt, backend=backend, request_model=request_model(session),
            session_id=session_id, trace_context=request.options.trace_context,
            trace_carrier=carrier))
    return carrier


def stopped(emit: Any, meta: Any, turn: Any, response: Response, backend_duration_ms: int,
            stream_state: Any) -> None:
    """PROMPT_STOP and TURN_STOP of a turn that produced `response`."""
    if telemetry.PROMPT_STOP in telemetry._table:
        emit(telemetry.PROMPT_STOP, {"duration": backend_duration_ms},
             meta(turn.request, turn.attempt, agent_state=stream_state, response=response))
    if telemetry.TURN_STOP in telemetry._table:
        emit(telemetry.TURN_STOP,
             stop_measurements(elapsed_ms(turn), backend_duration_ms, response),
             meta(turn.request, turn.attempt, model=response.model, provider=response.provider,
                  finish_reason=response.stop_reason, usage=response.usage,
                  cost_usd=response.cost_usd, session_id=response.session_id,
                  tool_calls=tool_calls(response.events)))


def failed(emit: Any, meta: Any, turn: Any, reason: Any, state: Any, elapsed: int,
           session_id: Any) -> None:
    """PROMPT_ERROR and TURN_ERROR of a turn that failed with `reason`."""
    request, attempt = turn.request, turn.attempt
    emit(telemetry.PROMPT_ERROR, {"system_time": time.time_ns(), "duration": elapsed},
         meta(request, attempt, reason=reason, agent_state=state))
    if telemetry.TURN_ERROR in telemetry._table:
        capture = turn.capture
        terminal = capture.terminal.data if capture.terminal is not None else {}
        emit(telemetry.TURN_ERROR, {"duration_ms": elapsed}, meta(
            request, attempt, reason_kind=reason_kind(reason), error_type=error_type(reason),
            model=terminal.get("model"), provider=terminal.get("provider"),
            usage=capture.usage, session_id=session_id, tool_calls=tool_calls(capture.events)))


def elapsed_ms(turn: Any) -> int:
    """Milliseconds since `turn` started."""
    return max(0, monotonic_ms() - turn.started_at)


def stop_measurements(duration_ms: int, backend_duration_ms: int,
                      response: Any) -> dict[str, Any]:
    """TURN_STOP measurements: `duration_ms`, `backend_duration_ms`, plus `input_tokens` /
    `output_tokens` (ints) and `cost_usd` (float) when the backend reported them. Numbers
    only, never content."""
    measurements: dict[str, Any] = {"duration_ms": duration_ms,
                                    "backend_duration_ms": backend_duration_ms}
    usage = response.usage
    if isinstance(usage, dict):
        for key in ("input_tokens", "output_tokens"):
            value = usage.get(key)
            if type(value) is int:
                measurements[key] = value
    cost = response.cost_usd
    if isinstance(cost, int | float) and not isinstance(cost, bool):
        measurements["cost_usd"] = float(cost)
    return measurements
