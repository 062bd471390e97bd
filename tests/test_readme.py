"""The README's quick start really runs, and says what it prints."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _quick_start() -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Quick start", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]


def test_the_quick_start_runs_and_prints_what_its_comments_say() -> None:
    code = _quick_start()
    expected = [line.split("# ", 1)[1].strip() for line in code.splitlines()
                if line.startswith("print(") and "# " in line]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), {"__name__": "readme"})
    assert out.getvalue().splitlines() == expected == ["Hello, Ada!", "{'turns': 1}"]
