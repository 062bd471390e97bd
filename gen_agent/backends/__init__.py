"""The bundled backends, in two wings, and the mock.

- CLI processes: `claude` (`ClaudeCLI`, the Claude Code CLI), `codex` (`CodexCLI`, the Codex
  CLI), `warm` (long-lived CLI processes: the live-process cap and its records); their
  private plumbing is `_subprocess/` (process trees, JSONL, each CLI's protocols).
- HTTP SDKs: `anthropic` (`AnthropicAPI`, the Messages API) and `openai` (`OpenAIResponses`,
  the Responses API), each needing its official SDK; their private plumbing is `_http/`
  (SSE, the shared SDK session, the tool loop).
- `mock` (`MockBackend` and its script helpers, for tests and demos) and `fallback`
  (`Fallback`, a chain of backends).

Each class is importable from here or from its module (`gen_agent.backends.claude`, ...);
modules load on first use, so an HTTP backend's SDK is imported only when it is asked for.
A backend of your own is built on `gen_agent.backend` (docs: docs/pages/backends/index.md).
"""

from typing import Any

# Submodules load on first use (PEP 562): the HTTP backends import their SDKs.
_LAZY = {
    "AnthropicAPI": "anthropic", "ClaudeCLI": "claude", "CodexCLI": "codex",
    "Fallback": "fallback", "MockBackend": "mock", "OpenAIResponses": "openai",
}

__all__ = [
    "AnthropicAPI",
    "ClaudeCLI",
    "CodexCLI",
    "Fallback",
    "MockBackend",
    "OpenAIResponses",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gen_agent.backends' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"gen_agent.backends.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
