"""Headless Debian Chromium driven by Selenium, for tests that look at a page as a person would.

Selenium is given the browser and driver paths, so it never tries to download either. The
flags keep Chromium off the network (this machine's closed network refuses its background
connections) and give every start a fresh profile.
"""

from __future__ import annotations

import tempfile
from contextlib import contextmanager
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-quic", "--no-first-run", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--window-size=1280,1600",
)


def missing() -> str | None:
    for p in (CHROMIUM, CHROMEDRIVER):
        if not p.exists():
            return f"{p} is missing: `make test` installs Debian's chromium and chromium-driver"
    return None


@contextmanager
def chromium():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        opts = webdriver.ChromeOptions()
        opts.binary_location = str(CHROMIUM)
        for flag in (*FLAGS, f"--user-data-dir={profile}"):
            opts.add_argument(flag)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)
        try:
            yield driver
        finally:
            driver.quit()


def full_page_screenshot(driver, path: Path, width: int = 1280) -> None:
    """The whole page, not just the window: resize the window to the document first."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(width, min(height, 16000))
    driver.save_screenshot(str(path))
