"""The dashboard in a real browser (headless Chromium through selenium): the index and one
benchmark page of a site built from a seeded synthetic history, opened from file:// as a
user opens them, with their rows, the planted change point, a working filter, every
picture loaded and no console error; and every page of a site built from real runs of the
tiny model. Screenshots go to LLMBENCH_SCREENSHOT_DIR when set."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from browser import chromium_driver, console_errors, missing_assets, screenshot
from gate_runs import tiny_runs
from test_dashboard import DECODE, ENV, PREFILL, write_history

from llmbench.dashboard import build_site

pytestmark = pytest.mark.xdist_group("browser")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("dashboard")
    write_history(root / "baselines" / ENV, [1.0] * 6 + [1.4] * 6, injected_at=9)
    build_site(root / "baselines", root / "site")
    return root / "site"


@pytest.fixture(scope="module")
def browser():
    driver = chromium_driver()
    yield driver
    driver.quit()


def _visible_rows(browser) -> list[str]:
    return [row.get_attribute("data-name") for row in
            browser.find_elements("css selector", "tr[data-name]") if row.is_displayed()]


def test_the_index_in_a_browser(site, browser, tmp_path):
    browser.get((site / "index.html").as_uri())
    names = [name.rsplit(" ", 1)[0] for name in _visible_rows(browser)]
    assert sorted(names) == sorted(DECODE + PREFILL)
    change = browser.find_element("css selector", "li.change")
    assert change.get_attribute("data-run") == "7"
    assert all(name in change.text for name in DECODE)
    assert len(browser.find_elements("css selector", "svg.spark")) == 4
    assert not missing_assets(browser)
    assert not console_errors(browser)
    screenshot(browser, "dashboard-index", tmp_path)
    box = browser.find_element("id", "filter")
    box.send_keys("ctx=128")
    assert [n.rsplit(" ", 1)[0] for n in _visible_rows(browser)] == ["test_decode_steps[ctx=128]"]
    box.clear()
    box.send_keys("x")  # clear() fires no input event: type, then erase, as a user does
    box.send_keys("\b")
    assert len(_visible_rows(browser)) == 4
    assert not console_errors(browser)


def test_a_benchmark_page_in_a_browser(site, browser, tmp_path):
    browser.get((site / "index.html").as_uri())
    browser.find_element("link text", "test_decode_steps[ctx=16]").click()
    assert browser.find_element("tag name", "h1").text == "test_decode_steps[ctx=16]"
    rows = browser.find_elements("css selector", "table.runs tbody tr")
    assert len(rows) == 12
    marked = browser.find_elements("css selector", "tr.changepoint")
    assert len(marked) == 1 and marked[0].text.startswith("0007")
    assert "injected: decode_step x1.15" in rows[8].text
    images = browser.find_elements("css selector", "img.figure")
    assert len(images) == 2 and not missing_assets(browser)
    assert not console_errors(browser)
    browser.set_window_size(1280, 1500)
    screenshot(browser, "dashboard-benchmark", tmp_path)
    browser.set_window_size(1280, 900)


@pytest.fixture(scope="module")
def real_site(tmp_path_factory) -> Path:
    """A site built elsewhere (LLMBENCH_DASHBOARD_SITE=reports/dashboard, after `nox -s
    dashboard` on a machine's runs), else one built here from real runs of the tiny model:
    the gate tests' three (a baseline, the same code again, every decode step slowed)."""
    site = os.environ.get("LLMBENCH_DASHBOARD_SITE")
    if site:
        return Path(site).resolve()
    made = tiny_runs(tmp_path_factory)
    out = tmp_path_factory.mktemp("real-dashboard") / "site"
    build_site(Path(made.baseline_dir), out)
    return out


def test_a_site_of_real_runs_opens_whole(real_site, browser, tmp_path):
    """Every benchmark page the index links opens, with its pictures and no console error;
    the index and the first page are screenshotted."""
    browser.get((real_site / "index.html").as_uri())
    assert not console_errors(browser) and not missing_assets(browser)
    screenshot(browser, "dashboard-real-index", tmp_path)
    links = [a.get_attribute("href") for a in
             browser.find_elements("css selector", "tr[data-name] a")]
    assert links, "the index lists no benchmark"
    for i, link in enumerate(links):
        browser.get(link)
        assert browser.find_elements("css selector", "table.runs tbody tr"), link
        assert not missing_assets(browser) and not console_errors(browser), link
        if i == 0:
            browser.set_window_size(1280, 1500)
            screenshot(browser, "dashboard-real-benchmark", tmp_path)
            browser.set_window_size(1280, 900)
