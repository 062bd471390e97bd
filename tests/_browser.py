"""The real browser of the browser tests: Debian's chromium, headless, driven by its
chromedriver through Selenium (the test extra has it; `make test` installs both as root)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
needs_browser = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="needs Debian's chromium and chromium-driver "
           "(apt-get install -y chromium chromium-driver; `make test` does it as root)")


def chromium(tmp_path: Path, window: str) -> Any:
    """A headless chromium with its own profile under `tmp_path` and a `window` size
    ("width,height"); the caller quits it."""
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                 f"--user-data-dir={tmp_path / 'chromium-profile'}", f"--window-size={window}"):
        options.add_argument(flag)
    service = webdriver.ChromeService(executable_path=CHROMEDRIVER,
                                      log_output=str(tmp_path / "chromedriver.log"))
    return webdriver.Chrome(service=service, options=options)
