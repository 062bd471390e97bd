"""The observer in a real headless browser (Debian's chromium + chromium-driver, driven by
Selenium): the supervision tree, a live phase change during a turn, a restart after a crash
and an interrupt pressed on the page (with the keyboard) are all visible and take effect.

`make test` installs chromium and chromium-driver with apt where it can; elsewhere this test
skips and says what to install. Set `GEN_AGENT_OBSERVER_SCREENSHOT=docs/pages/observer.png`
to refresh the screenshot on the docs page (`make observer-screenshot`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import gen_agent
from gen_agent import GenAgent, NoReply
from gen_agent._event import Event
from gen_agent._supervisor import Supervisor, child_spec
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.telemetry import TURN_ERROR, TelemetryRecorder

pytest.importorskip("starlette", reason="the observer extra is not installed: "
                                        "pip install 'gen-agent[observer]'")
webdriver = pytest.importorskip("selenium.webdriver",
                                reason="selenium is not installed (the test extra has it)")
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from gen_agent import observer  # noqa: E402
from tests._browser import chromium, needs_browser  # noqa: E402

pytestmark = needs_browser

WAIT_S = 10.0
SCREENSHOT_ENV = "GEN_AGENT_OBSERVER_SCREENSHOT"


class Worker(GenAgent):
    """Hands its mock scripts through; crashes on a response reading "crash"."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": opts["scripts"]}, 0

    def handle_response(self, ref: Any, response: Any, state: Any) -> NoReply:
        if response.text == "crash":
            raise RuntimeError("crashing on purpose")
        return NoReply(state + 1)


def _turn(text: str, input_tokens: int, output_tokens: int, cost_usd: float) -> list[Event]:
    return [Event.new("text", {"text": text}),
            Event.new("usage", {"input_tokens": input_tokens, "output_tokens": output_tokens}),
            Event.new("result", {"text": text, "cost_usd": cost_usd})]


def _driver(tmp_path: Path) -> Any:
    return chromium(tmp_path, "1280,1000")


def _text(driver: Any, css: str) -> str:
    # The page redraws parts of itself as views arrive: read again if the node was replaced.
    for _ in range(5):
        try:
            return driver.find_element(By.CSS_SELECTOR, css).text
        except StaleElementReferenceException:
            continue
    raise AssertionError(f"{css} kept being replaced")


def _until(driver: Any, check: Any, what: str) -> Any:
    return WebDriverWait(driver, WAIT_S, poll_frequency=0.05,
                         ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda d: check(d), message=f"the page never showed {what}")


def _attr(driver: Any, css: str, name: str) -> str | None:
    for _ in range(5):
        found = driver.find_elements(By.CSS_SELECTOR, css)
        try:
            return found[0].get_attribute(name) if found else None
        except StaleElementReferenceException:
            continue
    raise AssertionError(f"{css} kept being replaced")


def test_tree_live_phase_restart_and_interrupt_in_a_real_browser(
        agent_system: gen_agent.AgentSystem, tmp_path: Path) -> None:
    first = mock.gate(_turn("first answer", 120, 34, 0.0021))
    held = mock.gate(_turn("never finished", 1, 1, 0.0))
    queued = _turn("third answer", 10, 2, 0.0001)
    tree = Supervisor([
        child_spec(Worker, name="alpha", backend=MockBackend, restart="permanent",
                   scripts=[first, held, queued], watchdog_ms=60_000),
        child_spec(Worker, name="beta", backend=MockBackend, restart="permanent",
                   scripts=[mock.text_turn("crash")]),
    ], name="tree", max_restarts=3, max_seconds=60)
    pool = gen_agent.Pool(Worker, size=2, backend=MockBackend, name_prefix="pool",
                          scripts=[mock.text_turn("pooled")])
    obs = observer.serve(system=agent_system)
    driver = _driver(tmp_path)
    try:
        driver.get(obs.url)
        _until(driver, lambda d: _attr(d, "#conn", "data-state") == "live", "a live stream")

        # The tree: both children, no restart yet, the whole intensity left.
        _until(driver, lambda d: _attr(d, "#child-tree-beta", "data-restarts") == "0",
               "the tree")
        assert _attr(driver, "#child-tree-alpha", "data-running") == "true"
        assert _attr(driver, "#sup-tree", "data-intensity-left") == "3"
        assert "intensity left 3/3" in _text(driver, "#sup-tree")
        assert _attr(driver, "#pool-pool", "data-pool") == "pool"
        assert "pool-0" in _text(driver, "#pool-pool")

        # The charts start empty: no turn in the window yet.
        _until(driver, lambda d: _attr(d, "#chart-all-all", "data-turns") == "0",
               "an empty chart")

        # A live phase change during a turn: processing while the gate holds it, then idle
        # with the turn's outcome, tokens and cost.
        ref = gen_agent.tell("alpha", "first question", timeout=5)
        assert first.wait_blocked(WAIT_S)
        _until(driver, lambda d: _attr(d, "#agent-alpha", "data-phase") == "processing",
               "alpha processing")
        assert "tell, attempt 1" in _text(driver, "#agent-alpha .current")
        first.release()
        _until(driver, lambda d: _attr(d, "#agent-alpha", "data-phase") == "idle",
               "alpha idle again")
        assert gen_agent.poll("alpha", ref).status == "completed"
        _until(driver, lambda d: "120/34" in _text(d, "#agent-alpha"), "the turn's tokens")
        assert "$0.0021" in _text(driver, "#agent-alpha")
        # The charts follow: one turn, its 154 tokens drawn as a bar, alpha charted alone.
        _until(driver, lambda d: _attr(d, "#chart-all-all", "data-turns") == "1",
               "the turn in the chart")
        assert _attr(driver, "#chart-all-all .m-tokens", "data-sum") == "154"
        assert driver.find_elements(By.CSS_SELECTOR, "#chart-all-all .m-tokens rect.bar")
        assert _attr(driver, "#chart-agent-alpha", "data-turns") == "1"
        assert "1 turn in 5 min" in _text(driver, "#chart-all-all")

        # A restart after a crash: beta's handle_response raises, its supervisor restarts it.
        beta = gen_agent.whereis("beta")
        gen_agent.tell("beta", "please crash", timeout=5)
        _until(driver, lambda d: _attr(d, "#child-tree-beta", "data-restarts") == "1",
               "beta restarted once")
        assert "callback_failed:error:RuntimeError" in _text(driver, "#child-tree-beta")
        assert _attr(driver, "#sup-tree", "data-intensity-left") == "2"
        assert gen_agent.whereis("beta") not in (None, beta)

        # An interrupt pressed on the page, with the keyboard, behind a confirmation.
        held_ref = gen_agent.tell("alpha", "second question", timeout=5)
        assert held.wait_blocked(WAIT_S)
        _until(driver, lambda d: _attr(d, "#agent-alpha", "data-phase") == "processing",
               "alpha processing the second turn")
        third = gen_agent.tell("alpha", "third question", timeout=5)  # waits in the queue
        _until(driver, lambda d: _text(d, "#agent-alpha .queue") == "1", "a queued prompt")
        _screenshot(driver, tmp_path)
        with TelemetryRecorder([TURN_ERROR]) as recorder:
            driver.find_element(By.ID, "act-interrupt-alpha").send_keys(Keys.ENTER)
            dialog = driver.find_element(By.ID, "confirm")
            _until(driver, lambda d: dialog.get_attribute("open") is not None,
                   "the confirmation")
            assert "Interrupt alpha?" in dialog.text
            assert gen_agent.runtime_snapshot("alpha").phase == "processing"  # not yet
            driver.find_element(By.ID, "confirm-ok").send_keys(Keys.ENTER)
            record = recorder.wait_for(lambda r: r.metadata["agent"] == "alpha", WAIT_S)
        assert record.metadata["reason_kind"] == "interrupted"
        assert held.cancelled
        _until(driver, lambda d: "interrupt sent to alpha" in _text(d, "#notice"),
               "the action's result")
        _until(driver, lambda d: "interrupted" in _text(d, "#agent-alpha"),
               "the interrupted turn")
        assert gen_agent.poll("alpha", held_ref).reason == "interrupted"
        # The queued prompt runs next; the page follows it to the end.
        _until(driver, lambda d: "10/2" in _text(d, "#agent-alpha"), "the queued turn")
        _until(driver, lambda d: _attr(d, "#agent-alpha", "data-phase") == "idle"
               and _text(d, "#agent-alpha .queue") == "0", "alpha idle with nothing queued")
        assert gen_agent.poll("alpha", third).status == "completed"

        # Readable on a phone: nothing wider than a 390 px screen.
        driver.set_window_size(390, 844)
        _until(driver, lambda d: d.execute_script(
            "return document.documentElement.scrollWidth <= window.innerWidth"),
            "a page that fits a phone")
    finally:
        driver.quit()
        obs.stop()
        pool.stop(10)
        tree.stop(10)


def _screenshot(driver: Any, tmp_path: Path) -> None:
    path = tmp_path / "observer.png"
    driver.save_screenshot(str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    target = os.environ.get(SCREENSHOT_ENV)
    if target:
        driver.execute_script("window.scrollTo(0, 0)")
        driver.save_screenshot(target)
