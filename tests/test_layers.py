"""The package's import structure: no cycle, and imports only downward through the layers.

Layers, lowest first (docs/pages/design.md draws them): records and leaf services ← the
backend contract ← `_runtime` (sealed: outside it only `gen_agent._runtime`'s exported names
are imported) ← the API modules ← the public namespaces. `backends/` may use only the records,
the contract and the runtime's exported names, never the API it is called by.

The cycle check counts module-level and function-level (lazy) imports alike, since a lazy import
only hides a cycle; leaves out imports under `if TYPE_CHECKING:`, which never run, and the
implicit import of a parent package (importing `gen_agent.backends.mock` runs
`gen_agent/__init__.py` first, which no module can avoid).

Counts module-level and function-level (lazy) imports alike, since a lazy import only hides a
cycle; leaves out imports under `if TYPE_CHECKING:`, which never run, and the implicit import of
a parent package (importing `gen_agent.backends.mock` runs `gen_agent/__init__.py` first, which
no module can avoid).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "gen_agent"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, here: str, is_package: bool, known: set[str]) -> set[str]:
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target in known:
                    found.add(target)
                elif base in known:
                    found.add(base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    found.discard(here)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {
        name: _imports(ast.parse(path.read_text()), name, path.name == "__init__.py", known)
        for name, path in modules.items()
    }


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (cycle := walk(nxt)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := walk(node)) is not None:
            return cycle
    return None


def test_the_walker_sees_real_edges() -> None:
    graph = _graph()
    assert "gen_agent._agent_ref" in graph["gen_agent._system"]
    assert "gen_agent.testing._script" in graph["gen_agent.testing._openai_protocol"]
    # only under TYPE_CHECKING there: not an edge
    assert "gen_agent.testing._model_server" not in graph["gen_agent.testing._openai_protocol"]


def test_a_cycle_is_found_when_there_is_one() -> None:
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_inside_the_package() -> None:
    cycle = _find_cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


# ---------------------------------------------------------------------- layers
RECORDS = {
    # values, errors and the leaf services every layer may use
    "gen_agent._cancel", "gen_agent._context", "gen_agent._deprecate", "gen_agent._reap",
    "gen_agent._reasons",
    "gen_agent._timers", "gen_agent._web",
    "gen_agent._tools", "gen_agent._accounting", "gen_agent._conversation", "gen_agent._debug",
    "gen_agent._errors", "gen_agent._event", "gen_agent._limits", "gen_agent._delivered",
    "gen_agent._output", "gen_agent._permission", "gen_agent._portable", "gen_agent._request_ref",
    "gen_agent._request_options", "gen_agent._response", "gen_agent._size", "gen_agent._status",
    "gen_agent.telemetry",
}
CONTRACT = {"gen_agent._agent", "gen_agent.backend"}
API = {
    "gen_agent._agent_tool", "gen_agent._child_spec", "gen_agent._host_aio",
    "gen_agent._pool_dispatch", "gen_agent._agent_ref", "gen_agent.aio", "gen_agent._client",
    "gen_agent._host", "gen_agent._pool", "gen_agent._streaming", "gen_agent._supervisor",
    "gen_agent._system",
}
NAMESPACE_ROOTS = ("gen_agent.backends", "gen_agent.cli", "gen_agent.observer", "gen_agent.ray",
                   "gen_agent.server",
                   "gen_agent.testing")
NAMESPACES = {"gen_agent", "gen_agent.__main__", "gen_agent.otel", "gen_agent.tools"}
LAYER_NAMES = ("records", "contract", "runtime", "api", "namespaces")
RUNTIME = "gen_agent._runtime"


def layer_of(module: str) -> int:
    """The layer index of `module` (0 = records); an unplaced module fails the test."""
    if module in RECORDS or module == "gen_agent.store" or module.startswith("gen_agent.store."):
        return 0  # the store's protocol and records: the runtime's durability writes to it
    if module in CONTRACT:
        return 1
    if module == RUNTIME or module.startswith(RUNTIME + "."):
        return 2
    if module in API:
        return 3
    if module in NAMESPACES or module.startswith(NAMESPACE_ROOTS):
        return 4
    raise AssertionError(f"{module} has no layer: add it to one in tests/test_layers.py")


def _runtime_exports() -> set[str]:
    tree = ast.parse((PACKAGE / "_runtime" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return {ast.literal_eval(e) for e in node.value.elts}  # type: ignore[attr-defined]
    raise AssertionError("gen_agent/_runtime/__init__.py has no __all__")


def _runtime_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """`(line, what)` for every import of the runtime in `tree`, as written."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names
                      if alias.name.startswith(RUNTIME)]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(RUNTIME):
            found += [(node.lineno, f"{node.module}:{alias.name}") for alias in node.names]
    return found


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import that points upward, and every one `backends/` may not make."""
    found = []
    for module, deps in sorted(graph.items()):
        mine = layer_of(module)
        for dep in sorted(deps):
            theirs = layer_of(dep)
            if theirs > mine:
                found.append(f"{module} ({LAYER_NAMES[mine]}) imports {dep} "
                             f"({LAYER_NAMES[theirs]})")
            elif (module.startswith("gen_agent.backends") and theirs == 3):
                found.append(f"{module} (a backend) imports {dep} (the API)")
    return found


def sealing_violations(modules: dict[str, Path]) -> list[str]:
    """Imports of a `_runtime` submodule, or of a name it does not export, from outside it."""
    exported = _runtime_exports()
    found = []
    for module, path in sorted(modules.items()):
        if module == RUNTIME or module.startswith(RUNTIME + "."):
            continue
        for line, what in _runtime_imports(ast.parse(path.read_text())):
            source, _, name = what.partition(":")
            if source != RUNTIME or name not in exported:
                found.append(f"{module}:{line}: {what}")
    return found


def test_every_import_points_down_the_layers() -> None:
    assert layer_violations(_graph()) == []


def test_outside_the_runtime_only_its_exported_names_are_imported() -> None:
    assert sealing_violations(_modules()) == []


def test_the_layer_checks_catch_a_violation(tmp_path: Path) -> None:
    # A record that calls the client, a backend that uses the API, a namespace reaching into
    # a runtime submodule: each is reported (this is what the checks above would say).
    graph = {"gen_agent._event": {"gen_agent._client"},
             "gen_agent.backends.mock": {"gen_agent._client", "gen_agent._event"},
             "gen_agent._client": {"gen_agent._runtime", "gen_agent._event"}}
    assert layer_violations(graph) == [
        "gen_agent._event (records) imports gen_agent._client (api)",
        "gen_agent.backends.mock (a backend) imports gen_agent._client (the API)",
    ]
    bad = tmp_path / "gen_agent" / "_pool.py"
    bad.parent.mkdir()
    bad.write_text("from gen_agent._runtime.turn import WORKERS\n"
                   "from gen_agent._runtime import WORKERS, not_exported\n")
    assert sealing_violations({"gen_agent._pool": bad}) == [
        "gen_agent._pool:1: gen_agent._runtime.turn:WORKERS",
        "gen_agent._pool:2: gen_agent._runtime:not_exported",
    ]


def test_every_module_has_a_layer() -> None:
    for module in _modules():
        layer_of(module)  # raises for an unplaced module
    assert layer_of("gen_agent._runtime.agent_actor") == 2
    assert layer_of("gen_agent.store._postgres") == 0  # a store: records and leaf services
    assert layer_of("gen_agent.ray._host") == layer_of("gen_agent.ray._host_node") == 4
    with pytest.raises(AssertionError, match="has no layer"):
        layer_of("gen_agent.brand_new")


def _pykka_internals(tree: ast.AST) -> list[str]:
    """Private pykka names `tree` reaches: `pykka._x` modules, `_Name`s imported from pykka."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pykka"):
            if "._" in f".{node.module}" or any(a.name.startswith("_") for a in node.names):
                found.append(node.module or "")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and isinstance(
                node.value, ast.Attribute | ast.Name) and ast.unparse(node.value).startswith(
                "pykka"):
            found.append(ast.unparse(node))
    return found


def test_only_the_actor_base_touches_pykka_internals() -> None:
    users = {module for module, path in _modules().items()
             if _pykka_internals(ast.parse(path.read_text()))}
    assert users == {"gen_agent._runtime.actor"}
    assert _pykka_internals(ast.parse("import pykka.messages\npykka.messages._ActorStop")) == [
        "pykka.messages._ActorStop"]
