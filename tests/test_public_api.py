"""The public surface: one sorted `__all__`, every name present and documented."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import types

import gen_agent
import gen_agent.telemetry


def test_all_is_sorted_and_unique() -> None:
    assert list(gen_agent.__all__) == sorted(gen_agent.__all__)
    assert len(set(gen_agent.__all__)) == len(gen_agent.__all__)


def test_all_names_exist() -> None:
    missing = [name for name in gen_agent.__all__ if not hasattr(gen_agent, name)]
    assert missing == []


def test_every_public_name_has_a_docstring() -> None:
    undocumented = [
        name for name in gen_agent.__all__
        if callable(getattr(gen_agent, name)) and not inspect.getdoc(getattr(gen_agent, name))
    ]
    assert undocumented == []


def test_public_methods_of_public_classes_are_documented() -> None:
    undocumented = []
    for name in gen_agent.__all__:
        obj = getattr(gen_agent, name)
        if not inspect.isclass(obj):
            continue
        for attr, member in vars(obj).items():
            if attr.startswith("_") or not (inspect.isfunction(member) or
                                            isinstance(member, (classmethod, property))):
                continue
            if not inspect.getdoc(getattr(obj, attr)):
                undocumented.append(f"{name}.{attr}")
    assert undocumented == []


def test_logging_is_disabled_for_the_library_by_default() -> None:
    from loguru import logger

    messages: list[str] = []
    sink = logger.add(messages.append, level="DEBUG")
    try:
        # A raising telemetry handler is detached with a warning logged inside gen_agent.
        def boom(*_args: object) -> None:
            raise RuntimeError("secret")

        gen_agent.telemetry.attach("probe", ("probe", "event"), boom)
        gen_agent.telemetry.execute(("probe", "event"), {}, {})
        assert gen_agent.telemetry.list_handlers(("probe",)) == []
    finally:
        logger.remove(sink)
    assert messages == []


# The public namespaces, by audience: users (`gen_agent` and the namespaces below), backend
# authors (`gen_agent.backend`), the bundled backends' modules (contract paths), and the
# command line. Every other module is `_`-prefixed (design page, "Public surface").
PUBLIC_NAMESPACES = (
    "gen_agent", "gen_agent.aio", "gen_agent.backend", "gen_agent.backends",
    "gen_agent.backends.anthropic", "gen_agent.backends.claude", "gen_agent.backends.codex",
    "gen_agent.backends.fallback", "gen_agent.backends.mock", "gen_agent.backends.openai",
    "gen_agent.backends.warm", "gen_agent.cli", "gen_agent.observer", "gen_agent.otel",
    "gen_agent.ray", "gen_agent.store", "gen_agent.telemetry", "gen_agent.testing",
    "gen_agent.testing.pytest_plugin", "gen_agent.tools",
)
_NEEDS = {"gen_agent.ray": "ray", "gen_agent.observer": "starlette", "gen_agent.otel":
          "opentelemetry", "gen_agent.backends.anthropic": "anthropic",
          "gen_agent.backends.openai": "openai"}
PUBLIC_MODULES = tuple(name for name in PUBLIC_NAMESPACES
                       if name not in _NEEDS or importlib.util.find_spec(_NEEDS[name]))


def _defined_public_names(source: str) -> tuple[set[str], set[str]]:
    """`(own, imported)`: the public names a module's source binds at its top level by its
    own definitions and assignments (with the lazy names of a PEP 562 `_LAZY` table; not a
    `TypeVar`, typing plumbing), and those it imports from gen_agent (never under
    `if TYPE_CHECKING:`)."""
    tree = ast.parse(source)
    own: set[str] = set()
    imported: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            own.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign) and not (
                isinstance(node.value, ast.Call) and ast.unparse(node.value.func) == "TypeVar"):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            own.update(t.id for t in targets if isinstance(t, ast.Name))
            if any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in targets):
                own.update(ast.literal_eval(node.value))  # type: ignore[arg-type]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gen_agent"):
            imported.update(alias.asname or alias.name for alias in node.names)
    public = {name for name in own | imported if not name.startswith("_")}
    return own & public, imported & public


def _all_mismatch(source: str, exported: set[str]) -> dict[str, list[str]]:
    """What is wrong with `exported` (a module's `__all__`) for `source`: a namespace (no
    functions or classes of its own) exports exactly what it imports from gen_agent and
    assigns; any other public module exports every public name it defines, and otherwise
    only names it imports from gen_agent (deliberate re-exports)."""
    own, imported = _defined_public_names(source)
    if not any(isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
               and not node.name.startswith("_") for node in ast.parse(source).body):
        own |= imported  # a namespace: every import is a re-export
    found = {"not exported": sorted(own - exported),
             "not defined": sorted(exported - own - imported)}
    return {key: names for key, names in found.items() if names}


def test_all_of_every_public_namespace_is_exactly_the_public_names_it_defines() -> None:
    import importlib

    wrong = {}
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        if problem := _all_mismatch(inspect.getsource(module), set(module.__all__)):
            wrong[module_name] = problem
    assert wrong == {}


def test_the_public_name_walker_sees_definitions_imports_and_lazy_names() -> None:
    source = ("from typing import Any\nfrom gen_agent._x import A, B as C, _D\n"
              "E = 1\n_F = 2\n_LAZY = {'I': 'mod'}\n")
    assert _defined_public_names(source) == ({"E", "I"}, {"A", "C"})
    assert _all_mismatch(source, {"A", "C", "E", "I"}) == {}
    assert _all_mismatch(source, {"A", "E", "I", "J"}) == {"not exported": ["C"],
                                                          "not defined": ["J"]}
    module = source + "def g(): pass\nclass H: pass\n"
    assert _all_mismatch(module, {"E", "I", "g", "H"}) == {}  # its imports need not be shown
    assert _all_mismatch(module, {"E", "I", "g"}) == {"not exported": ["H"]}


def _is_alias(obj: object) -> bool:
    """A type alias (`Callable[...]`, `tuple[str, ...]`): documented where it is defined."""
    return isinstance(obj, types.GenericAlias) or type(obj).__name__.endswith("GenericAlias")


def test_every_public_module_documents_its_public_names_and_methods() -> None:
    import importlib

    undocumented = []
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        assert inspect.getdoc(module), module_name
        for name in module.__all__:
            obj = getattr(module, name)
            if callable(obj) and not _is_alias(obj) and not inspect.getdoc(obj):
                undocumented.append(f"{module_name}.{name}")  # (a typing alias has no doc)
            if not inspect.isclass(obj):
                continue
            for attr, member in vars(obj).items():
                if attr.startswith("_") or not (
                        inspect.isfunction(member)
                        or isinstance(member, (classmethod, staticmethod, property))):
                    continue
                if not inspect.getdoc(getattr(obj, attr)):
                    undocumented.append(f"{module_name}.{name}.{attr}")
    assert undocumented == []


def test_every_contract_reference_links_a_section_of_the_contract_page() -> None:
    # A newcomer can follow every reference: "contract §N" is written as a link into
    # docs/pages/contract.md, and each anchor linked exists on that page.
    import pathlib
    import re

    root = pathlib.Path(gen_agent.__file__).parent
    page = (root.parent / "docs" / "pages" / "contract.md").read_text()
    anchors = set(re.findall(r"\{#([a-z0-9-]+)\}", page))
    unlinked, missing = [], []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        relative = path.relative_to(root)
        unlinked += [f"{relative}: {m.group(0)}" for m in re.finditer(r"contract §\S+", text)]
        for link in re.finditer(r"contract\.md#([a-z0-9-]+)((?:(?:, | and |, and )#[a-z0-9-]+)*)",
                                text):
            for anchor in [link.group(1), *re.findall(r"#([a-z0-9-]+)", link.group(2))]:
                if anchor not in anchors:
                    missing.append(f"{relative}: #{anchor}")
    assert unlinked == []
    assert missing == []
    assert len(anchors) > 50


def test_an_old_module_path_warns_and_gives_the_module_that_moved() -> None:
    import importlib
    import sys

    import pytest

    from gen_agent._deprecate import MOVED_MODULES

    for old, new in MOVED_MODULES.items():
        extra = {"ray": "ray", "observer": "starlette"}.get(old.split(".")[1])
        if extra is not None and importlib.util.find_spec(extra) is None:
            continue  # an optional extra that is not installed
        parent, _, child = old.rpartition(".")
        sys.modules.pop(old, None)
        try:
            with pytest.warns(DeprecationWarning, match=f"{old} is deprecated"):
                module = importlib.import_module(old)
            assert module is importlib.import_module(new)
            assert module.__spec__.name == new  # the module keeps its own spec
        finally:
            sys.modules.pop(old, None)
            if getattr(sys.modules[parent], child, None) is sys.modules[new]:
                delattr(sys.modules[parent], child)
    assert "gen_agent.status" not in MOVED_MODULES  # it would rebind the root's `status`


def test_old_names_inside_a_module_warn() -> None:
    import pytest

    from gen_agent import observer

    with pytest.warns(DeprecationWarning, match="use gen_agent.telemetry.ToolSpan"):
        assert gen_agent.telemetry.ToolCall is gen_agent.telemetry.ToolSpan
    with pytest.warns(DeprecationWarning, match="use gen_agent.observer.brief_reason"):
        assert observer.describe_reason is observer.brief_reason
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        gen_agent.telemetry.nothing  # noqa: B018
