"""The chat page in a real headless browser (Debian's chromium + chromium-driver, driven by
Selenium, as the observer's test): pick a host, a streamed reply, a tool call behind a
permission prompt answered on the page, a reconnect after the server drops the stream, and an
interrupt. Skips, saying what to install, without chromium."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ag_ui", reason="the server extra is not installed: "
                                    "pip install 'gen-agent[server]'")
webdriver = pytest.importorskip("selenium.webdriver",
                                reason="selenium is not installed (the test extra has it)")
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

import gen_agent  # noqa: E402
from gen_agent._event import Event  # noqa: E402
from gen_agent.backends import mock  # noqa: E402
from gen_agent.backends.mock import MockBackend  # noqa: E402
from gen_agent.server import chat  # noqa: E402
from gen_agent.server._app import create_app  # noqa: E402
from gen_agent.tools import tool  # noqa: E402
from tests._browser import chromium, needs_browser  # noqa: E402
from tests.server_protocols.support import Chat, serving  # noqa: E402

pytestmark = needs_browser
WAIT_S = 10.0


@tool
def lookup(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def _driver(tmp_path: Path) -> Any:
    return chromium(tmp_path, "1000,900")


def _until(driver: Any, check: Any, what: str) -> Any:
    return WebDriverWait(driver, WAIT_S, poll_frequency=0.05,
                         ignored_exceptions=(StaleElementReferenceException, IndexError)).until(
        lambda d: check(d), message=f"the page never showed {what}")


def _last(driver: Any) -> Any:
    return driver.find_elements(By.CSS_SELECTOR, ".msg.assistant")[-1]


def _say(driver: Any, text: str) -> None:
    box = driver.find_element(By.ID, "prompt")
    box.send_keys(text)
    box.send_keys(Keys.ENTER)


def test_chat_page_streams_tools_permissions_reconnects_and_interrupts(
        agent_system: gen_agent.AgentSystem, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    go_on = threading.Event()

    def long_turn(prompt: str) -> Any:
        yield Event.new("text", {"text": "part one, "})
        go_on.wait(WAIT_S)
        yield Event.new("text", {"text": "part two"})
        yield Event.new("result", {"text": "part one, part two"})

    held = mock.gate(mock.text_turn("never"), timeout=WAIT_S)
    scripts = [mock.text_turn(["Hi ", "there"]),
               mock.tool_round([("lookup", {"city": "Oslo"})], mock.text_turn("Sunny.")),
               long_turn, held]
    host = gen_agent.AgentHost(Chat, backend=MockBackend, name="chat", agent_system=agent_system,
                               scripts=scripts, tools=[lookup])
    other = gen_agent.AgentHost(Chat, backend=MockBackend, name="other",
                                agent_system=agent_system, scripts=[])
    app = create_app({"chat": host, "other": other}, protocols=[chat])  # loopback, no tokens
    with serving(app) as served:
        driver = _driver(tmp_path)
        try:
            driver.get(served.url + "/")
            _until(driver, lambda d: d.find_element(By.ID, "conn").get_attribute("data-hosts")
                   == "2", "the two hosts")
            Select(driver.find_element(By.ID, "host")).select_by_value("chat")

            # A streamed reply.
            _say(driver, "hello")
            _until(driver, lambda d: _last(d).get_attribute("data-state") == "done", "a reply")
            assert _last(driver).find_element(By.CSS_SELECTOR, ".text").text == "Hi there"
            (key,) = host.live_keys()
            assert key.startswith("local/web-")  # the tab's thread, in the local tenant

            # A tool call behind a permission prompt, allowed on the page.
            _say(driver, "weather?")
            approval = driver.find_element(By.ID, "approval")
            _until(driver, lambda d: approval.is_displayed(), "the permission prompt")
            assert "lookup" in approval.text and '"Oslo"' in approval.text
            driver.find_element(By.ID, "approve-allow").send_keys(Keys.ENTER)
            _until(driver, lambda d: _last(d).get_attribute("data-state") == "done",
                   "the tool's turn done")
            box = _last(driver).find_element(By.CSS_SELECTOR, ".tool[data-name='lookup']")
            assert "sunny in Oslo" in box.text and '"Oslo"' in box.text
            assert _last(driver).find_element(By.CSS_SELECTOR, ".text").text == "Sunny."

            # The server drops the stream mid-turn; the page reconnects from its last event.
            monkeypatch.setattr(chat, "MAX_STREAM_S", 0.3)
            _say(driver, "a long one")
            _until(driver, lambda d: "part one" in _last(d).text, "the first part")
            conn = driver.find_element(By.ID, "conn")
            _until(driver, lambda d: int(conn.get_attribute("data-reconnects")) >= 2,
                   "two reconnects")
            go_on.set()
            _until(driver, lambda d: _last(d).get_attribute("data-state") == "done",
                   "the long turn done")
            assert _last(driver).find_element(By.CSS_SELECTOR, ".text").text == \
                "part one, part two"  # every part once
            monkeypatch.setattr(chat, "MAX_STREAM_S", 300.0)

            # Interrupt, pressed on the page.
            _say(driver, "never mind")
            assert held.wait_blocked(WAIT_S)
            stop = driver.find_element(By.ID, "interrupt")
            _until(driver, lambda d: stop.is_enabled(), "the interrupt button")
            stop.send_keys(Keys.ENTER)
            _until(driver, lambda d: _last(d).get_attribute("data-state") == "cancelled",
                   "the interrupted turn")
            assert held.cancelled

            # Readable on a phone.
            driver.set_window_size(390, 844)
            _until(driver, lambda d: d.execute_script(
                "return document.documentElement.scrollWidth <= window.innerWidth"),
                "a page that fits a phone")
        finally:
            go_on.set()
            driver.quit()
    host.close()
    other.close()
