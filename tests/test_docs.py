"""The documentation site (docs/mkdocs.yml): it builds with `--strict`, every recipe has its
page, and every public docstring parses as Google style (what the API reference renders).

The build runs only where mkdocs is installed (the `test` extra brings it, so CI builds it).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RECIPES = sorted(p.stem for p in (DOCS / "examples").glob("*.py") if p.stem != "choose_backend")

needs_mkdocs = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None,
    reason="mkdocs / mkdocstrings not installed (pip install '.[docs]')")


@needs_mkdocs
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(DOCS / "mkdocs.yml"),
         "-d", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "WARNING" not in output, output
    for page in ("index.html", "patterns/fan-out/index.html", "reference/client/index.html",
                 "cli/index.html"):
        assert (tmp_path / "site" / page).is_file()
    # The recipes' code really was included (not an empty fence).
    retry_page = (tmp_path / "site" / "patterns" / "retry" / "index.html").read_text()
    assert "GIVE_UP_AT_ONCE" in retry_page


def test_every_recipe_has_a_page_that_includes_its_code() -> None:
    pages = {p.name: p.read_text(encoding="utf-8")
             for p in (DOCS / "pages" / "patterns").glob("*.md")}
    for name in RECIPES:
        assert any(f'--8<-- "docs/examples/{name}.py:' in text for text in pages.values()), name


def test_the_nav_lists_every_pattern_page() -> None:
    config = (DOCS / "mkdocs.yml").read_text(encoding="utf-8")
    for page in (DOCS / "pages" / "patterns").glob("*.md"):
        assert f"patterns/{page.name}" in config


def _docstring_warnings() -> list[str]:
    griffe = pytest.importorskip("griffe")
    package = griffe.load("gen_agent", search_paths=[str(ROOT)], docstring_parser="google",
                          resolve_aliases=False)
    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    handler = Collect(level=logging.WARNING)
    logger = logging.getLogger("griffe")
    logger.addHandler(handler)
    try:
        stack = [package]
        while stack:
            obj = stack.pop()
            if obj.is_alias or obj.name.startswith("_"):
                continue                            # the reference shows public names only
            if obj.docstring is not None:
                obj.docstring.parse("google")
            stack.extend(obj.members.values())
    finally:
        logger.removeHandler(handler)
    return records


def test_public_docstrings_parse_as_google_style() -> None:
    assert _docstring_warnings() == []
