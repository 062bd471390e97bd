"""`GenAgent`: the behaviour an agent implements, and the values its callbacks return.

Subclass `GenAgent` and define at least `init_agent` and `handle_response`; every other
callback has the default of the Elixir original (docs/pages/contract.md#s3; docs: Concepts,
callbacks). The runtime creates one instance of your class per started agent and calls its methods
with the agent *state* passed explicitly, as the Elixir behaviour does. A class that does not
subclass `GenAgent` but defines `init_agent` and `handle_response` works too: missing callbacks take
the defaults' semantics.

Threads: every callback runs in the agent's actor thread, except `handle_stream_event`, which
runs in the turn task thread. Callbacks run one at a time; while one runs, synchronous client
calls to this agent wait (docs/pages/contract.md#s3-13; docs: Concepts, callbacks).

Return values (python_api.md, "Callbacks"):

| Elixir | Python |
|---|---|
| `{:noreply, s}` | `NoReply(s)` |
| `{:prompt, text, s}` | `Prompt(text, s)` |
| `{:halt, s}` | `Halt(s)` |
| pre_turn `{:ok, p, s}` / `{:skip, s}` | `Proceed(p, s)` / `Skip(s)` |
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from gen_agent._permission import DENY_FAILED

__all__ = ["GenAgent", "Halt", "NoReply", "Proceed", "Prompt", "Skip"]


class NoReply(msgspec.Struct, frozen=True):
    """Decision: keep `state` and go (or stay) idle. Mirrors `{:noreply, state}`."""

    state: Any


class Prompt(msgspec.Struct, frozen=True):
    """Decision: run `text` (a `str`) as a follow-up turn with `state`.

    From `handle_response`, or from `handle_error` on an event/self-chain turn, it is an
    independent follow-up (the self-chain slot, §4.9). From `handle_error` on an ask/tell turn
    it is a caller-owned retry under the same ref (§4.8). From `handle_event`/`handle_info` it
    is dispatched now when idle, else queued in the mailbox. Mirrors `{:prompt, text, state}`.
    A non-`str` text is a malformed return.

    `delay_ms` (milliseconds, an int >= 0; None = at once) is for caller-owned retries only:
    from `handle_error` on an ask/tell turn the retry waits that long on the agent's timer,
    under the same ref with attempt + 1, without blocking the agent; it keeps its priority
    over queued work (the mailbox waits for it, docs/pages/contract.md#s4-21; docs: the retry
    recipe). A `Prompt` with a delay anywhere else is a malformed return (not part of the original).
    """

    text: str
    state: Any
    delay_ms: int | None = None


class Halt(msgspec.Struct, frozen=True):
    """Decision: enter the halted mode (idle, dispatch frozen, process alive) with `state`.

    `post_run` runs once for the transition. Mirrors `{:halt, state}`.
    """

    state: Any


class Proceed(msgspec.Struct, frozen=True):
    """pre_turn result: dispatch `prompt` (a `str`, possibly rewritten) with `state`.

    Mirrors `{:ok, prompt, state}` from `pre_turn/2`.
    """

    prompt: str
    state: Any


class Skip(msgspec.Struct, frozen=True):
    """pre_turn result: do not dispatch; the request fails with `"pre_turn_skipped"`.

    Mirrors `{:skip, state}` from `pre_turn/2`.
    """

    state: Any


Decision = NoReply | Prompt | Halt


class GenAgent:
    """Base class of agent implementations. One instance per started agent.

    Subclasses must define `init_agent` and `handle_response`. Every method documents the
    thread it runs in, what each return value does, and what happens if it raises. The runtime
    never sets attributes on your instance; your own attributes are yours, but the agent
    *state* passed to and returned from callbacks is what the runtime keeps, snapshots for
    `status()`, and restores after interrupts.

    Mirrors: the `GenAgent` behaviour (`use GenAgent`), docs/pages/contract.md#s3 (docs: Concepts,
    callbacks).
    """

    persist_state: ClassVar[bool] = False
    """Whether an agent started with `store=`/`session_key=` stores its state (through
    `encode_state`) after every turn and gets it back (through `decode_state`) at its next
    start, instead of `init_agent`'s state. Default False: only the conversation and the
    accounting totals are stored (`gen_agent.store`)."""

    repair_interrupted_turns: ClassVar[bool] = False
    """Whether a turn cut in process by an interrupt or the watchdog is kept in the
    conversation as a resumed one is: the cut turn's user message, its tool calls with
    their results ("outcome unknown" for those still running) and a closing note in the
    history of `AnthropicAPI` / `OpenAIResponses`, or a preamble of the next prompt on a
    CLI backend; with or without a store. Default False: the session from before the turn
    (docs/pages/contract.md#s4-13; docs/pages/durable-sessions.md#a-turn-cut-in-process).
    Mirrors: nothing in the original."""

    def encode_state(self, state: Any) -> bytes:
        """Encode the agent state for the session store (`persist_state = True` only).

        Runs in the agent thread after each turn's decision callback and `post_turn`, before
        the reply, and after `handle_event` / `handle_info`; the write is skipped when the
        bytes equal the last stored ones. The default is
        `msgspec.msgpack.encode` (dicts, lists, str, numbers, msgspec structs...; tuples come
        back as lists).

        Returns:
            The bytes to store.

        Raises:
            Exception: protected: logged (type only), reported in `Status.store` and the
                `STORE_ERROR` telemetry event; the turn's outcome is unchanged and the write
                is retried after the next turn.

        Mirrors: nothing in the original (durable sessions, `gen_agent.store`).
        """
        return msgspec.msgpack.encode(state)

    def decode_state(self, data: bytes) -> Any:
        """Decode a stored agent state (`persist_state = True` only); the inverse of
        `encode_state`.

        Runs in the agent thread at start, after `init_agent` and before `pre_run`; its
        result replaces `init_agent`'s state. The default is `msgspec.msgpack.decode`.

        Raises:
            Exception: the start fails with `AgentStartError(("store_corrupt", key,
                "the agent state does not decode"))`.

        Mirrors: nothing in the original (durable sessions, `gen_agent.store`).
        """
        return msgspec.msgpack.decode(data)

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        """Build the backend options and the initial state. Required.

        Runs in the agent thread, once, before the backend session starts; `current_name()`
        already works here.

        Args:
            opts: every start option except `name`, `backend` and the reserved limits.

        Returns:
            `(backend_opts, state)`: `backend_opts` (a dict) goes verbatim to the backend's
            `start_session`.

        Raises:
            InitAgentError: refuse the start; `start_agent` raises
                `AgentStartError(("init_agent_failed", reason))`.
            Exception: any other exception fails the start with
                `("init_failed", "error", "TypeName")`.

        Mirrors: `init_agent/1`.
        """
        raise NotImplementedError(f"{type(self).__name__} must define init_agent")

    def handle_response(self, ref: Any, response: Any, state: Any) -> Decision:
        """Decide what follows a successful turn. Required.

        Runs in the agent thread after a turn ended with a terminal "result".
        `response.prompt` is the prompt actually dispatched (after `pre_turn`).

        Returns:
            `NoReply(s)` (go idle), `Prompt(text, s)` (a follow-up turn with a fresh ref),
            or `Halt(s)`.

        Raises:
            Exception: not protected: an exception or a malformed return stops the agent
                with `("callback_failed", "error", "TypeName")` (`"other"` for a malformed
                return); the waiting caller gets `AgentDown` (docs/pages/contract.md#s3-7; docs:
                Concepts, callbacks).

        Mirrors: `handle_response/3`.
        """
        raise NotImplementedError(f"{type(self).__name__} must define handle_response")

    def handle_error(self, ref: Any, reason: Any, state: Any) -> Decision:
        """Decide what follows a failed turn or a rejected generated prompt.

        Runs in the agent thread. `reason` is one of the contract's reasons (§4.20), e.g.
        `"timeout"`, `"interrupted"`, `("task_crashed", exc)`, or a backend's reason.

        Returns:
            `NoReply(s)` (default): deliver the error. `Prompt(text, s)`: for an ask/tell turn
            whose reason is not `"interrupted"`, retry under the same ref (the caller keeps
            waiting, §4.8); otherwise an independent follow-up. `Prompt(text, s,
            delay_ms=n)`: the same retry after `n` ms (e.g. a 429's `retry_after`), without
            blocking the agent. `Halt(s)`: deliver and halt. `gen_agent.current_request()`
            gives the failed request's prompt, attempt and options (docs: the retry recipe).

        Raises:
            Exception: protected: an exception or malformed return is logged (type only)
                and treated as `NoReply(previous_state)`; the original error still reaches
                the caller.

        Mirrors: `handle_error/3`.
        """
        return NoReply(state)

    def handle_event(self, event: Any, state: Any) -> Decision:
        """Handle a notification sent with `notify`/`notify_ack`.

        Runs in the agent thread: at once when idle; after the current turn's decision and
        `post_turn` when busy (deferred, in arrival order, §4.10).

        Returns:
            `NoReply(s)` (default), `Prompt(text, s)` (dispatched now when idle and not halted,
            else queued in the mailbox with origin "event"), or `Halt(s)`.

        Raises:
            Exception: protected: logged (type only), treated as `NoReply(previous_state)`.

        Mirrors: `handle_event/2`.
        """
        return NoReply(state)

    # handle_info is deliberately not defined here (as `use GenAgent` does not define it):
    # an agent without it drops other messages with a debug log and never buffers them.
    # Define `handle_info(self, message, state) -> Decision` to receive messages sent with
    # `gen_agent.send`, timers from `gen_agent.send_after`, and completion messages.

    def handle_stream_event(self, event: Any, state: Any) -> Any:
        """See every normalized event of a turn, in order, as it arrives.

        Runs in the TURN TASK thread (not the agent thread), for each event including the
        terminal one. Returns the new state, threaded to the next event; after a normal stream
        end the final state becomes the state the decision callback sees. After a crash,
        interrupt or watchdog the threaded state is discarded.

        Raises:
            Exception: crashes the turn task: the turn fails with `("task_crashed", exc)`.

        Mirrors: `handle_stream_event/2`. The default is never called (no per-event cost).
        """
        return state

    def handle_tool_permission(self, request: Any, state: Any) -> Any:
        """Decide whether the backend may run a tool (optional; the default is not called).

        Runs in the AGENT thread, while the turn that asked waits for the answer (the agent
        keeps handling other messages around it). Only backends that can ask call it: the
        Claude Code CLI (warm mode, `--permission-prompt-tool stdio`) and Codex `app-server`
        approvals. Without an override the provider's own permission mode applies. It decides
        and does not change the state.

        Args:
            request: a frozen `gen_agent.ToolPermissionRequest` (backend,
                tool_name, input, tool_use_id, details).
            state: the agent's current state (read it; changes are not kept).

        Returns:
            `Allow(updated_input=None)`: the tool runs (with `updated_input` when given).
            `Deny(message, interrupt=False)`: the tool does not run and the model sees
            `message`; `interrupt=True` also ends the turn as interrupted.

        Raises:
            Exception: protected: logged (type only) and treated as a deny
                (`DENY_FAILED`); so is a malformed return. No answer within the backend's
                bound (default 60 s) is a deny too.

        Mirrors: no Elixir original (an extension, see `gen_agent.ToolPermissionRequest`).
        """
        return DENY_FAILED

    def pre_run(self, state: Any) -> Any:
        """Run once after start, before any turn. Returns the new state.

        Runs in the agent thread before any request is processed (`start_agent` has already
        returned).

        Raises:
            PreRunError: stop the agent with `("pre_run_failed", reason)`.
            Exception: any other exception stops it with `("pre_run_crashed", "TypeName")`.

        Mirrors: `pre_run/1`.
        """
        return state

    def pre_turn(self, prompt: str, state: Any) -> Proceed | Skip | Halt:
        """Inspect, rewrite, skip or halt each prompt before it is dispatched.

        Runs in the agent thread before every dispatch (retries and generated prompts too).

        Returns:
            `Proceed(prompt, s)` (default: unchanged), `Skip(s)` (the request fails with
            `"pre_turn_skipped"`), or `Halt(s)` (fails with `"pre_turn_halted"`, then halts).

        Raises:
            Exception: protected: for ask/tell the request fails with `"pre_turn_skipped"`;
                for generated prompts `handle_error` gets `("pre_turn_crashed", "TypeName")`.
                A malformed return gives `"pre_turn_invalid"` (docs/pages/contract.md#s3-5; docs:
                Concepts, callbacks).

        Mirrors: `pre_turn/2`.
        """
        return Proceed(prompt, state)

    def post_turn(self, outcome: tuple[str, Any], ref: Any, state: Any) -> Any:
        """Observe every dispatched turn after its decision callback. Returns the new state.

        Runs in the agent thread with `outcome` = `("ok", response)` or `("error", reason)`
        and the post-decision state. It cannot change the transition.

        Raises:
            Exception: protected: logged (type only); the post-decision state is kept.

        Mirrors: `post_turn/3`.
        """
        return state

    def post_run(self, state: Any) -> None:
        """Run once per transition into halted, after buffered notifications were applied.

        Runs in the agent thread. The return value is ignored.

        Raises:
            Exception: protected: logged (type only); the halt completes anyway.

        Mirrors: `post_run/1`.
        """

    def terminate_agent(self, reason: Any, state: Any) -> None:
        """Clean up when the agent stops (not after a failed start or a kill).

        Runs in the agent thread with the exit reason: `"normal"` (drain), `"shutdown"`
        (stop), `("pre_run_failed", r)`, `("callback_failed", ...)`, ... The return value is
        ignored.

        Raises:
            Exception: protected: logged (type only) and ignored.

        Mirrors: `terminate_agent/2`.
        """


# Exported for the runtime: the base defaults, to detect overrides cheaply.
BASE_STREAM_EVENT = GenAgent.handle_stream_event
BASE_TOOL_PERMISSION = GenAgent.handle_tool_permission
