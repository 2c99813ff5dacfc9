"""Headless Chromium driven by Selenium, for the browser tests (the Django admin's and
the official OJS admin UI's).

Needs the Debian packages ``chromium`` and ``chromium-driver`` (``make browser-deps``) and
selenium (the ``test`` dependency group). Without them a test using :func:`driver` fails
when ``CI=true`` and is skipped otherwise.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1440,900",
    "--force-device-scale-factor=1",
    "--hide-scrollbars",
)


def binaries() -> tuple[str | None, str | None]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    return chromium, shutil.which("chromedriver")


def driver(*, performance_log: bool = False) -> Iterator[Any]:
    """A fresh headless Chromium (its own profile), quit afterwards; for a fixture to
    ``yield from``. ``performance_log``: record the network in Chrome's performance log."""
    chromium, driver_path = binaries()
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing = "selenium is needed (it is in the 'test' dependency group)"
    else:
        missing = (
            ""
            if chromium and driver_path
            else "chromium and chromedriver are needed (make browser-deps installs them)"
        )
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true: {missing}")
        pytest.skip(missing)
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in FLAGS:
        options.add_argument(flag)
    if performance_log:
        options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    with tempfile.TemporaryDirectory(prefix="ojs-chromium-") as profile:
        options.add_argument(f"--user-data-dir={profile}")
        browser = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
        browser.implicitly_wait(30)  # generous: a loaded machine
        try:
            yield browser
        finally:
            browser.quit()
