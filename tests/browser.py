"""Headless Chromium for the tests that open a page as a user would (Debian's `chromium` and
`chromium-driver`, driven by selenium; no browser download).

Where no Chromium is installed the browser tests skip, unless LLMBENCH_REQUIRE_BROWSER is
set (CI sets it), which turns a missing browser into a failure: in CI they must run.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest


def _find(*names: str) -> str | None:
    return next((path for name in names if (path := shutil.which(name))), None)


def chromium_driver():
    """A headless Chromium session that records the page's console messages."""
    browser, driver = _find("chromium", "chromium-browser"), _find("chromedriver")
    if browser is None or driver is None:
        message = ("no chromium/chromedriver on PATH (Debian: apt-get install chromium "
                   "chromium-driver)")
        if os.environ.get("LLMBENCH_REQUIRE_BROWSER"):
            pytest.fail(message)
        pytest.skip(message)
    webdriver = pytest.importorskip("selenium.webdriver")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1280,900", "--allow-file-access-from-files"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=webdriver.ChromeService(driver))


def console_errors(driver) -> list[str]:
    """The page's console messages of level SEVERE (a failed load, a JavaScript error)."""
    return [entry["message"] for entry in driver.get_log("browser")
            if entry["level"] == "SEVERE"]


def missing_assets(driver) -> list[str]:
    """Stylesheets, scripts and images the open page refers to that did not load."""
    return driver.execute_script("""
        const missing = [];
        for (const link of document.querySelectorAll('link[rel=stylesheet]'))
            if (!link.sheet) missing.push(link.href);
        for (const img of document.querySelectorAll('img'))
            if (!img.complete || img.naturalWidth === 0) missing.push(img.src);
        return missing;""")


def screenshot(driver, name: str, fallback: Path) -> Path:
    """Save a screenshot as NAME.png under LLMBENCH_SCREENSHOT_DIR (else `fallback`)."""
    folder = Path(os.environ.get("LLMBENCH_SCREENSHOT_DIR") or fallback)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    assert driver.save_screenshot(str(path)), f"no screenshot saved at {path}"
    return path
