"""The pages in a real browser (Debian's headless chromium through its chromedriver): they load with
no console error, tables sort, links lead to the trajectory pages and back, keys move between
steps and filter to failed calls, hostile content never runs (and the policy stops a script that
was not escaped), a served live session shows new steps on reload, and the screenshot is not blank."""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image
from selenium.webdriver.common.by import By

from harness.report import pages
from harness.report.html import page
from harness.report.serve import Server, routes
from harness.trajectory import Trajectory, TurnRecord
from tests.report.conftest import _turn, hostile_repo, run_session


def errors(browser) -> list[str]:
    """Console messages at error level since the last call (the log is drained by reading it)."""
    return [entry["message"] for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]


def pwned(browser) -> object:
    return browser.execute_script("return window.__pwned === undefined ? null : window.__pwned;")


def column(browser, index: int) -> list[str]:
    rows = browser.find_elements(By.CSS_SELECTOR, "table.runs tbody tr")
    return [row.find_elements(By.TAG_NAME, "td")[index].get_attribute("data-v") for row in rows]


def fits(browser) -> bool:
    """Nothing on the page is wider than the window (long ids wrap; a wide table scrolls in its box)."""
    return bool(browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth + 1;"))


def not_blank(png: bytes) -> None:
    image = Image.open(io.BytesIO(png)).convert("RGB")
    assert image.width > 500 and image.height > 500
    colours = image.resize((120, 120)).getcolors(maxcolors=120 * 120)
    assert colours is not None and len(colours) > 8, "the screenshot is (nearly) one colour"
    background = max(colours)[0] / (120 * 120)
    assert background < 0.97, f"{background:.0%} of the screenshot is one colour"


def test_the_report_and_a_trajectory_page_in_a_browser(browser, hostile_batch, tmp_path):
    report = pages.write_batch(hostile_batch.root)
    errors(browser)
    browser.get(report.as_uri())
    assert browser.title == "harness report"
    assert errors(browser) == []
    assert pwned(browser) is None
    assert browser.find_elements(By.CSS_SELECTOR, "svg rect.bar"), "the charts drew no bars"
    assert "scripted:/tmp/<b>answer</b>.yaml" in browser.find_element(By.TAG_NAME, "main").text  # as text
    assert fits(browser), "the page runs off its window sideways"

    cost = 8  # the cost column of the task-runs table
    header = browser.find_elements(By.CSS_SELECTOR, "table.runs thead button.sort")[cost]
    header.click()
    ascending = [float(v) for v in column(browser, cost)]
    assert ascending == sorted(ascending) and len(ascending) == 3
    header.click()
    assert [float(v) for v in column(browser, cost)] == sorted(ascending, reverse=True)
    assert header.find_element(By.XPATH, "..").get_attribute("aria-sort") == "descending"
    not_blank(browser.get_screenshot_as_png())

    links = browser.find_elements(By.CSS_SELECTOR, "table.runs a")
    assert len(links) == 2
    row = next(link for link in links if link.find_element(By.XPATH, "../..").text.split()[0:1] == ["fix-answer"])
    verified_row = [link for link in links if "yes" in link.find_element(By.XPATH, "../..").text.split()]
    (verified_row or [row])[0].click()
    assert browser.title.startswith("harness · fix-answer")
    assert errors(browser) == []
    assert pwned(browser) is None
    text = browser.find_element(By.TAG_NAME, "main").text
    assert '<script>window.__pwned = "script";</script>' in text  # the hostile file, shown as text
    browser.find_element(By.LINK_TEXT, "← report").click()
    assert browser.title == "harness report"


def test_keys_move_between_steps_and_the_filter_hides_calls_that_succeeded(browser, hostile_session):
    target = hostile_session / "view.html"
    target.write_text(pages.session_page(hostile_session), encoding="utf-8")
    errors(browser)
    browser.get(target.as_uri())
    assert errors(browser) == [] and pwned(browser) is None
    body = browser.find_element(By.TAG_NAME, "body")
    main = browser.find_element(By.TAG_NAME, "main").text
    assert '<script>window.__pwned = "script";</script>' in main and "</textarea></pre><b>bold?</b>" in main
    evil = browser.find_elements(By.ID, "evil")
    assert evil == [], "a link from the repository became a real element"

    body.send_keys("j")
    assert browser.execute_script("return location.hash") == "#step-1"
    body.send_keys("j")
    assert browser.execute_script("return location.hash") == "#step-2"
    body.send_keys("k")
    assert browser.execute_script("return location.hash") == "#step-1"
    body.send_keys("G")
    assert browser.execute_script("return location.hash") == "#step-4"
    body.send_keys("d")
    assert browser.execute_script("return location.hash") == "#patch"

    calls = browser.find_elements(By.CSS_SELECTOR, "details.call")
    failed = browser.find_elements(By.CSS_SELECTOR, "details.call.failed")
    assert len(calls) == 3 and len(failed) == 1
    body.send_keys("f")
    assert browser.find_element(By.ID, "only-failed").is_selected()
    assert [c.is_displayed() for c in calls] == [c in failed for c in calls]
    assert not browser.find_element(By.ID, "step-1").is_displayed()  # a step with no failed call
    browser.find_element(By.ID, "only-failed").click()
    assert all(c.is_displayed() for c in calls)
    body.send_keys("e")
    assert browser.execute_script("return location.hash").startswith("#call-")
    assert errors(browser) == []
    not_blank(browser.get_screenshot_as_png())


def test_the_policy_stops_a_script_that_was_not_escaped(browser, tmp_path):
    injected = tmp_path / "injected.html"
    injected.write_text(
        page("injected", '<p>x</p><script>window.__pwned = 1;</script><img src="x" onerror="window.__pwned = 2">'),
        encoding="utf-8",
    )
    errors(browser)
    browser.get(injected.as_uri())
    assert pwned(browser) is None
    refused = errors(browser)
    assert any("Content Security Policy" in message for message in refused), refused


def test_a_served_live_session_shows_new_steps_on_reload(browser, tmp_path: Path):
    turns = [_turn("Looking.", ("list_dir", {})), _turn("done\nBiggest obstacle: none")]
    folder = run_session(hostile_repo(tmp_path / "repo"), tmp_path / "state", "live-1", turns)
    server = Server(routes(folder, batch=False)).start()
    try:
        errors(browser)
        browser.get(server.url)
        assert browser.find_elements(By.ID, "step-2") and not browser.find_elements(By.ID, "step-3")
        log = Trajectory(folder)
        log.append(TurnRecord(step=3, turn=_turn("A third step came in.", ("list_dir", {}))))
        log.close()
        browser.refresh()
        assert "A third step came in." in browser.find_element(By.ID, "step-3").text
        assert "not committed yet" in browser.find_element(By.ID, "step-3").text
        assert errors(browser) == []
    finally:
        server.close()
