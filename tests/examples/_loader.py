"""Load the recipes of `docs/examples/` as modules for their scenario tests.

The recipes are scripts (`python docs/examples/NAME.py`), not a package: each is loaded from
its file under a unique module name, and `docs/examples` is appended to `sys.path` (at the
end, so that no recipe name shadows an installed module) for their shared `choose_backend`.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def load_example(name: str) -> ModuleType:
    """Import `docs/examples/<name>.py` once (`name` may be `"guide/first_agent"`), as the
    module `docs_example_<name>` (slashes become underscores)."""
    if str(EXAMPLES) not in sys.path:
        sys.path.append(str(EXAMPLES))
    module_name = "docs_example_" + name.replace("/", "_")
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses look their module up while executing
    spec.loader.exec_module(module)
    return module
