"""The Makefile's install sets: `make demo` installs only what the demo needs, `make test` adds
the rest, in either order, and neither installs twice.

Read through `make -n` (print the commands, run none) on a copy of the Makefile and
pyproject.toml beside a stand-in `.venv` whose stamps each case sets.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAKE = shutil.which("make")

pytestmark = pytest.mark.skipif(MAKE is None, reason="GNU make is not installed")

DEMO_SET = "pip install --quiet -e '.[anthropic]'"
FULL_SET = "pip install --quiet -e '.[test,dev]'"


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / ".venv").mkdir()
    return tmp_path


def _stamp(checkout: Path, name: str) -> None:
    # Newer than pyproject.toml, as after an install.
    stamp = checkout / ".venv" / name
    stamp.touch()
    later = time.time() + 10
    os.utime(stamp, (later, later))


def _dry_run(checkout: Path, target: str) -> str:
    assert MAKE is not None
    # Run as a top-level make even under `make test`: a nested one would inherit MAKEFLAGS and
    # MAKELEVEL and print "Entering/Leaving directory" lines around the commands.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    done = subprocess.run([MAKE, "--no-print-directory", "-n", target], cwd=checkout,
                          capture_output=True, text=True, timeout=60, check=True, env=env)
    return done.stdout


def test_a_fresh_demo_installs_only_the_demo_set_and_says_so(checkout: Path):
    commands = _dry_run(checkout, "demo")
    assert DEMO_SET in commands
    assert FULL_SET not in commands
    assert "Installing what the demo needs" in commands
    assert commands.rstrip().splitlines()[-1].startswith(".venv/bin/python -m gen_agent demo")


def test_a_demo_after_the_full_install_installs_nothing(checkout: Path):
    _stamp(checkout, ".installed")
    commands = _dry_run(checkout, "demo")
    assert "pip install" not in commands
    assert ".venv/bin/python -m gen_agent demo --backend anthropic" in commands


def test_a_test_run_after_the_demo_installs_the_rest(checkout: Path):
    _stamp(checkout, ".installed-demo")
    commands = _dry_run(checkout, "test")
    assert FULL_SET in commands
    assert "Installing gen-agent and its test and dev extras" in commands
    assert ".venv/bin/python -m pytest -q" in commands


def test_a_second_demo_installs_nothing(checkout: Path):
    _stamp(checkout, ".installed-demo")
    assert "pip install" not in _dry_run(checkout, "demo")


def test_a_changed_pyproject_reinstalls_the_demo_set(checkout: Path):
    _stamp(checkout, ".installed-demo")
    later = time.time() + 20
    os.utime(checkout / "pyproject.toml", (later, later))
    assert DEMO_SET in _dry_run(checkout, "demo")


def test_a_test_run_installs_postgresql_once_with_apt(checkout: Path):
    # Without the stamp the recipe installs Debian's server (as root with apt, no
    # recommends) unless its binaries are there already; with the stamp nothing is done.
    commands = _dry_run(checkout, "test")
    assert "apt-get install -y -qq --no-install-recommends" in commands
    assert "postgresql >/dev/null && touch .venv/.postgresql" in commands
    _stamp(checkout, ".postgresql")
    assert "postgresql >/dev/null" not in _dry_run(checkout, "test")


def test_the_browser_and_postgresql_installs_share_one_apt_get_update(checkout: Path):
    # Both apt installs are due: one `apt-get update`, before either install.
    commands = _dry_run(checkout, "test")
    assert commands.count("apt-get update -qq") == 1
    assert commands.index("apt-get update -qq") < commands.index("chromium chromium-driver")
    assert commands.index("apt-get update -qq") < commands.index("postgresql >/dev/null")
    # It runs only when a stamp is missing and its binaries too (checked when it runs).
    assert 'if [ ! -e .venv/.chromium ] && ! { command -v chromium' in commands
    assert 'if [ ! -e .venv/.postgresql ] && ! { ls /usr/lib/postgresql/' in commands
