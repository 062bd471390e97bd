"""Public helpers for testing code built on gen_agent (see `docs/pages/testing.md`)."""

# -- helpers for actor-based tests (gen_agent.testing._helpers; the pytest plugin's fixtures
# live in gen_agent.testing.pytest_plugin, loaded through the `pytest11` entry point)
from gen_agent.testing._helpers import (
    LeakReport,
    MockScripts,
    ScriptedAgent,
    child_processes,
    find_leaks,
    is_quiescent,
    wait_for_state,
    wait_until_idle,
)
from gen_agent.testing._model_server import (
    RecordedRequest,
    Reply,
    ScriptedModelServer,
    TextBlock,
    ToolUseBlock,
)

__all__ = [
    "LeakReport",
    "MockScripts",
    "RecordedRequest",
    "Reply",
    "ScriptedAgent",
    "ScriptedModelServer",
    "TextBlock",
    "ToolUseBlock",
    "child_processes",
    "find_leaks",
    "is_quiescent",
    "wait_for_state",
    "wait_until_idle",
]
