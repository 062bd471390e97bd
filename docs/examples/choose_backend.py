"""Choose the backend a recipe runs on, from its command line.

Every recipe in this folder runs on the scripted `MockBackend` by default, answering each
prompt with the recipe's own `fake_model(prompt) -> str`, so it runs offline and
deterministically. `--backend` swaps in a real client; the recipe's agents are unchanged, only
the backend and its options differ:

    python docs/examples/research.py                        # MockBackend (default)
    python docs/examples/research.py --backend scripted     # AnthropicAPI over HTTP, offline
    python docs/examples/research.py --backend claude       # the Claude Code CLI, logged in
    python docs/examples/research.py --backend codex        # the Codex CLI, logged in
    python docs/examples/research.py --backend anthropic --model claude-sonnet-4-6
    python docs/examples/research.py --backend openai --model gpt-5

`scripted` runs the real Anthropic client (the official SDK, streaming over HTTP) against a
`ScriptedModelServer` on 127.0.0.1 that answers every request with `fake_model` applied to the
newest user message: the whole real-client path, without a network or an API key.
`anthropic` and `openai` read `ANTHROPIC_API_KEY` / `OPENAI_API_KEY`.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend

FakeModel = Callable[[str], str]
"""A recipe's stand-in for a model: the reply text for one prompt."""

BACKENDS = ("mock", "scripted", "claude", "codex", "anthropic", "openai")
"""The names `--backend` accepts."""

SCRIPTED_MODEL = "scripted-model"
"""The model name sent to the loopback server (one the SDK has no deprecation notice for)."""


def mock_options(fake_model: FakeModel, turns: int = 256) -> dict[str, Any]:
    """`MockBackend` options answering up to `turns` prompts with `fake_model(prompt)`."""

    def script(prompt: str) -> list[Any]:
        return mock.text_turn(fake_model(prompt))

    return {"scripts": [script] * turns}


def _user_text(request: Any) -> str:
    """The newest user message of an Anthropic Messages request body."""
    content = request.body["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content if isinstance(block, dict))


@contextlib.contextmanager
def _scripted_server(fake_model: FakeModel, replies: int) -> Iterator[str]:
    from gen_agent.testing._model_server import Reply, ScriptedModelServer

    def answer(request: Any) -> Reply:
        return Reply.text(fake_model(_user_text(request)))

    with ScriptedModelServer([answer] * replies) as server:
        yield server.url


@contextlib.contextmanager
def chosen_backend(
    argv: Sequence[str] | None,
    fake_model: FakeModel,
    *,
    description: str | None = None,
    mock_opts: dict[str, Any] | None = None,
) -> Iterator[tuple[Any, dict[str, Any]]]:
    """Parse `--backend NAME [--model M]` and yield `(backend, backend_opts)`.

    Args:
        argv: the command-line arguments (None: `sys.argv[1:]`).
        fake_model: the recipe's stand-in model, used by `mock` and `scripted`.
        description: the `--help` text.
        mock_opts: the `MockBackend` options for `mock` (default: `mock_options(fake_model)`).

    Yields:
        The backend class and the options every agent of the recipe hands to it from
        `init_agent`. The loopback server of `scripted` runs until the block ends.
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--backend", choices=BACKENDS, default="mock",
                        help="where the agents' turns run (default: mock)")
    parser.add_argument("--model", default=None, help="the model, for real backends")
    args = parser.parse_args(argv)
    model = {"model": args.model} if args.model else {}
    if args.backend == "mock":
        yield MockBackend, mock_opts if mock_opts is not None else mock_options(fake_model)
    elif args.backend == "scripted":
        from gen_agent.backends.anthropic import AnthropicAPI

        with _scripted_server(fake_model, replies=256) as url:
            yield AnthropicAPI, {"base_url": url, "api_key": "offline",
                                 "model": args.model or SCRIPTED_MODEL}
    elif args.backend == "claude":
        from gen_agent.backends.claude import ClaudeCLI

        yield ClaudeCLI, model
    elif args.backend == "codex":
        from gen_agent.backends.codex import CodexCLI

        yield CodexCLI, model
    elif args.backend == "anthropic":
        from gen_agent.backends.anthropic import AnthropicAPI

        yield AnthropicAPI, model
    else:
        from gen_agent.backends.openai import OpenAIResponses

        yield OpenAIResponses, model
