"""The documentation site as a reader meets it: built with `mkdocs build --strict` (a broken
link or a page missing from the nav fails), then opened from file:// in headless Chromium:
the home page and the verdict-reading page render with every asset loaded and no console
error. Screenshots go to LLMBENCH_SCREENSHOT_DIR when it is set."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from browser import chromium_driver, console_errors, missing_assets, screenshot

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.xdist_group("browser")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                            str(out)], cwd=ROOT, capture_output=True, text=True,
                           env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert built.returncode == 0, built.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def browser():
    driver = chromium_driver()
    yield driver
    driver.quit()


def test_every_nav_page_is_built(site):
    for page in ("index.html", "getting-started.html", "verdicts.html",
                 "reference/cli.html", "reference/pytest.html", "reference/nox.html"):
        assert (site / page).is_file(), page


@pytest.mark.parametrize("page, heading", [("index.html", "llmbench"),
                                           ("verdicts.html", "verdict")])
def test_page_opens_in_a_browser(site, browser, tmp_path, page, heading):
    browser.get((site / page).as_uri())
    title = browser.find_element("css selector", "article h1").text
    assert heading.lower() in title.lower()
    assert not missing_assets(browser)
    assert not console_errors(browser)
    # The theme's stylesheet applied: the navigation sidebar is laid out, not a bare list.
    assert browser.find_element("css selector", ".md-sidebar--primary").is_displayed()
    screenshot(browser, "docs-" + page.removesuffix(".html"), tmp_path)
