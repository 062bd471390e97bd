"""The public surface: one sorted `__all__`, every name present and documented."""

from __future__ import annotations

import importlib.util
import inspect

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


PUBLIC_MODULES = (
    "gen_agent.backend", "gen_agent.telemetry", "gen_agent._supervisor", "gen_agent._pool",
    "gen_agent._host",
    "gen_agent.backends.mock", "gen_agent.backends.claude", "gen_agent.backends.codex",
    "gen_agent.backends.anthropic", "gen_agent.backends.openai", "gen_agent.testing",
    "gen_agent.testing._model_server", "gen_agent._portable",
    *(("gen_agent.ray", "gen_agent.ray._client", "gen_agent.ray._pool", "gen_agent.ray._local",
       "gen_agent.ray._node", "gen_agent.ray._directory")
      if importlib.util.find_spec("ray") is not None else ()),
)


def test_every_public_module_documents_its_public_names_and_methods() -> None:
    import importlib

    undocumented = []
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        assert inspect.getdoc(module), module_name
        for name in module.__all__:
            obj = getattr(module, name)
            if callable(obj) and not inspect.getdoc(obj):
                undocumented.append(f"{module_name}.{name}")
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


def test_docstrings_citing_the_contract_name_the_docs_page() -> None:
    # Users never see the contract: a public docstring that cites "contract §N" also names
    # the page of the docs that explains it (issue #15).
    import pathlib
    root = pathlib.Path(gen_agent.__file__).parent
    missing = []
    for path in root.rglob("*.py"):
        relative = path.relative_to(root)
        if relative.parts[0] == "cli" or any(
                part.startswith("_") and part != "__init__.py" for part in relative.parts):
            continue  # private modules, and the command line (its docs are the CLI page)
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines):
            if "contract §" in line and "docs:" not in " ".join(lines[number:number + 2]):
                missing.append(f"{relative}:{number + 1}: {line.strip()}")
    assert missing == []
