"""The built-in script of `gen-agent demo`: the tasks, the workspace and the scripted model.

Three workers of a pool prepare the release of a fictitious project, Orbit 2.0. The pool
routes round robin, so task k always runs on worker k mod 3 and the story is the same every
run:

| task | worker | what it shows |
|---|---|---|
| 1, 4, 7 | demo-0 | a two-part answer, then answers that build on it (one conversation) |
| 2 | demo-1 | a tool call on a real file (`word_count`, or the CLI's `Bash`), then its answer |
| 3 | demo-2 | an HTTP 529 "Overloaded" answer, recovered by the agent's retry policy |
| 5 | demo-1 | the worker crashes on purpose after this answer; the supervisor restarts it |
| 6 | demo-2 | a three-part answer |
| 8 | demo-1 | after the restart: does the worker still know its earlier answer? |

`DemoModel` is the scripted model behind `ScriptedModelServer`: it answers each request by
what the request asks (the prompt found in the last user message, or a tool result), not by
arrival order, so concurrent workers get deterministic answers. Token counts come from the
script (`TaskSpec`), so the demo's table is the same on every run.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import msgspec

from gen_agent.testing._model_server import RecordedRequest, Reply, TextBlock

__all__ = [
    "CRASH_MARK",
    "NOTES",
    "TASKS",
    "TOOL_ID",
    "TOOL_RESULT_PREFIX",
    "WORD_COUNT_TOOL",
    "WORKERS",
    "DemoModel",
    "TaskSpec",
    "count_words",
    "write_workspace",
]

WORKERS: Final = 3
"""Pool size of the demo (the round-robin story above needs exactly three)."""

CRASH_MARK: Final = "(The demo crashes this worker after the answer.)"
"""A prompt containing this makes the demo agent's handle_response raise."""

TOOL_ID: Final = "toolu_demo_word_count"
TOOL_RESULT_PREFIX: Final = "Tool result"
"""Prefix of the prompt that hands a tool's result back (Anthropic API backend)."""

WORD_COUNT_TOOL: Final = {
    "name": "word_count",
    "description": "Count the words of a text file in the release workspace.",
    "input_schema": {
        "type": "object",
        "properties": {"path": {"type": "string", "description": "a file name"}},
        "required": ["path"],
    },
}
"""The tool definition sent to the Anthropic API (run by the demo agent itself)."""

NOTES: Final = """\
# Orbit 2.0 release notes (draft)

Orbit 2.0 replaces the polling scheduler with an event-driven one, halving idle CPU use.
Workers now run under a supervisor and resume their sessions after a crash.
The configuration format moves from INI to TOML; a converter ships with the release.
Known issue: the Windows installer still needs a manual PATH update.
"""

_SUMMARY = (
    "Orbit 2.0 swaps the polling scheduler for an event-driven one (half the idle CPU), "
    "adds supervised workers that resume their sessions, and moves configuration to TOML.",
    " One known issue remains: the Windows installer needs a manual PATH update.",
)
_RISKS = (
    "1. The TOML move breaks hand-edited INI files the converter cannot read.\n"
    "2. Event-driven scheduling changes the order of jobs that used to be polled.\n"
    "3. Windows users who skip the PATH step will not find the new binary."
)
_ANNOUNCEMENT = (
    "Orbit 2.0 is here. Its new event-driven scheduler wakes only when there is work, "
    "so idle machines use half the CPU they did.",
    " Workers now run under a supervisor: when one crashes it is restarted and picks up "
    "its session where it left off.",
    " Configuration moves to TOML, and a converter takes care of your INI files. "
    "Windows users: add Orbit to PATH after installing.",
)
_COUNT_REPLY = re.compile(r"notes\.md has (\d+) words")


def count_words(text: str) -> int:
    """The number of whitespace-separated words in `text` (what `wc -w` counts)."""
    return len(text.split())


def write_workspace(directory: Path) -> Path:
    """Write the release workspace (`notes.md`) into `directory`; return the notes' path."""
    notes = directory / "notes.md"
    notes.write_text(NOTES, encoding="utf-8")
    return notes


class TaskSpec(msgspec.Struct, frozen=True, kw_only=True):
    """One task of the demo and the figures its answers report.

    Fields:
        number: 1-based task number (also its submission order).
        label: a short name for the table.
        prompt: the prompt the pool receives.
        input_tokens, output_tokens: usage of the task's (final) answer (tokens).
        overloaded: the first request for it is answered with HTTP 529.
        crash: the worker crashes after the answer (the prompt holds `CRASH_MARK`).
    """

    number: int
    label: str
    prompt: str
    input_tokens: int
    output_tokens: int
    overloaded: bool = False
    crash: bool = False

    @property
    def worker(self) -> int:
        """The index of the worker that runs it (round robin)."""
        return (self.number - 1) % WORKERS


TASKS: Final = (
    TaskSpec(number=1, label="summary", prompt="Summarise notes.md for the release team.",
             input_tokens=412, output_tokens=58),
    TaskSpec(number=2, label="word count", prompt="How many words are in notes.md?",
             input_tokens=380, output_tokens=31),
    TaskSpec(number=3, label="risks",
             prompt="List the three biggest risks of shipping Orbit 2.0.",
             input_tokens=395, output_tokens=64, overloaded=True),
    TaskSpec(number=4, label="one-liner", prompt="Turn your summary into a one-line announcement.",
             input_tokens=498, output_tokens=24),
    TaskSpec(number=5, label="recount",
             prompt=f"Double-check the word count. {CRASH_MARK}",
             input_tokens=470, output_tokens=11, crash=True),
    TaskSpec(number=6, label="blog post", prompt="Draft a short release announcement.",
             input_tokens=430, output_tokens=96),
    TaskSpec(number=7, label="codename", prompt="Suggest a codename for Orbit 2.1.",
             input_tokens=510, output_tokens=18),
    TaskSpec(number=8, label="recall",
             prompt="What word count did you report before the restart?",
             input_tokens=505, output_tokens=19),
)
"""The demo's tasks, in submission order."""

TOOL_FOLLOW_UP: Final = {"input_tokens": 452, "output_tokens": 12}
"""Usage of the answer that follows the word-count tool call (tokens)."""

NEW_SESSION_RECALL: Final = {"input_tokens": 60, "output_tokens": 22}
"""Usage of task 8's answer when the restarted worker has lost its conversation (tokens)."""


def _message_text(message: Any) -> str:
    content = message.get("content") if isinstance(message, Mapping) else None
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for block in content:
        if isinstance(block, Mapping) and isinstance(block.get("text"), str):
            parts.append(block["text"])
    return "\n".join(parts)


def _tool_result(message: Any) -> str | None:
    """The content of our tool's `tool_result` block in `message` (the Claude CLI's)."""
    content = message.get("content") if isinstance(message, Mapping) else None
    if not isinstance(content, list):
        return None
    for block in content:
        if (isinstance(block, Mapping) and block.get("type") == "tool_result"
                and block.get("tool_use_id") == TOOL_ID):
            result = block.get("content")
            return result if isinstance(result, str) else _message_text(block)
    return None


def _history_text(messages: list[Any], role: str) -> str:
    return "\n".join(_message_text(m) for m in messages
                     if isinstance(m, Mapping) and m.get("role") == role)


class DemoModel:
    """The scripted model: a `ScriptedModelServer` script item, `model(request) -> Reply`.

    Args:
        tool: `"word_count"` (the Anthropic API backend: the agent runs the tool) or
            `"Bash"` (the Claude Code CLI runs `wc -w < notes.md` itself).
        fast: no artificial delays; otherwise answers start after `delay_s` and stream one
            word every `chunk_delay_s` (seconds), so the live view has something to show.

    Thread-safe: the server calls it from one thread per connection.
    """

    def __init__(self, *, tool: str, fast: bool, delay_s: float = 0.6,
                 chunk_delay_s: float = 0.04) -> None:
        self._tool = tool
        self._timing: dict[str, float] = (
            {} if fast else {"delay": delay_s, "chunk_delay": chunk_delay_s})
        self._lock = threading.Lock()
        self._asked: dict[int, int] = {}
        self.unmatched = 0

    def __call__(self, request: RecordedRequest) -> Reply:
        body = request.body if isinstance(request.body, Mapping) else {}
        messages = body.get("messages")
        messages = messages if isinstance(messages, list) else []
        last = messages[-1] if messages else {}
        tool_output = _tool_result(last)
        text = _message_text(last)
        if tool_output is not None or text.startswith(TOOL_RESULT_PREFIX):
            return self._count_answer(tool_output if tool_output is not None else text)
        for task in TASKS:
            if task.prompt in text:
                return self._answer(task, messages)
        with self._lock:
            self.unmatched += 1
        return Reply.text("I have no scripted answer for that.", input_tokens=8,
                          output_tokens=8, **self._timing)

    def _first_time(self, task: TaskSpec) -> bool:
        with self._lock:
            self._asked[task.number] = self._asked.get(task.number, 0) + 1
            return self._asked[task.number] == 1

    def _reply(self, task: TaskSpec, *parts: str) -> Reply:
        blocks = [TextBlock(tuple(re.findall(r"\s*\S+\s*", part))) for part in parts]
        return Reply.message(*blocks, input_tokens=task.input_tokens,
                             output_tokens=task.output_tokens, **self._timing)

    def _answer(self, task: TaskSpec, messages: list[Any]) -> Reply:
        if task.overloaded and self._first_time(task):
            return Reply.http_error(529, "Overloaded", error_type="overloaded_error",
                                    delay=0.3 if self._timing else 0.0)
        earlier = _history_text(messages, "assistant")
        count = _COUNT_REPLY.search(earlier)
        if task.number == 1:
            return self._reply(task, *_SUMMARY)
        if task.number == 2:
            return self._tool_call(task)
        if task.number == 3:
            return self._reply(task, _RISKS)
        if task.number == 4:
            if _SUMMARY[0] not in earlier:
                return self._reply(task, "There is no summary in this conversation yet.")
            return self._reply(task, "Orbit 2.0: an event-driven scheduler, self-healing "
                                     "workers and TOML configuration. Upgrade today!")
        if task.number == 5:
            said = f"still {count.group(1)} words" if count else "I cannot tell without a count"
            return self._reply(task, f"Checked again: {said}.")
        if task.number == 6:
            return self._reply(task, *_ANNOUNCEMENT)
        if task.number == 7:
            return self._reply(task, "How about \"Perihelion\"? It is where an orbit comes "
                                     "closest to the sun.")
        return self._recall(task, count)

    def _recall(self, task: TaskSpec, count: re.Match[str] | None) -> Reply:
        if count is not None:
            return self._reply(task, f"Before the restart I reported {count.group(1)} words: "
                                     "this conversation survived the restart.")
        lost = msgspec.structs.replace(task, input_tokens=NEW_SESSION_RECALL["input_tokens"],
                                       output_tokens=NEW_SESSION_RECALL["output_tokens"])
        return self._reply(lost, "I have no earlier answer in this conversation: after the "
                                 "restart this worker started a new session.")

    def _tool_call(self, task: TaskSpec) -> Reply:
        if self._tool == "Bash":
            call = {"command": "wc -w < notes.md", "description": "Count the words in notes.md"}
        else:
            call = {"path": "notes.md"}
        return Reply.tool_use(self._tool, call, id=TOOL_ID, text="Let me count them.",
                              input_tokens=task.input_tokens, output_tokens=task.output_tokens,
                              **self._timing)

    def _count_answer(self, tool_output: str) -> Reply:
        found = re.search(r"(\d+)\s*$", tool_output.strip())
        said = f"notes.md has {found.group(1)} words." if found else "The count failed."
        blocks = TextBlock(tuple(re.findall(r"\s*\S+\s*", said)))
        return Reply.message(blocks, **TOOL_FOLLOW_UP, **self._timing)
