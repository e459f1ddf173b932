"""Debian's chromium, headless, driven by selenium through Debian's chromedriver (never
a browser or driver a tool downloads), and the console as a real process to point it at.

The flags are what this machine needs: no sandbox as root, no GPU, and none of
Chromium's background connections (a closed network refuses them, many at a time);
each browser gets a fresh profile directory.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.expected_conditions import staleness_of
from selenium.webdriver.support.ui import WebDriverWait

from tests.helpers.git import GIT_ENV

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,800",
)
_URL = re.compile(r"console: (http://127\.0\.0\.1:\d+)")


def missing() -> str | None:
    for path in (CHROMIUM, CHROMEDRIVER):
        if not path.exists():
            return f"{path} is missing: apt-get install chromium chromium-driver"
    return None


@contextmanager
def browser(profile: Path) -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        driver.set_page_load_timeout(30)
        # A page a click led to may still be loading on a loaded machine (parallel tests):
        # looking up an element waits for it rather than failing at once.
        driver.implicitly_wait(10)
        yield driver
    finally:
        driver.quit()


def wait(driver: WebDriver, seconds: float = 20) -> WebDriverWait[WebDriver]:
    # The live parts of a page replace their elements: one found a moment before may be
    # gone when it is read, which means "look again", not "failed".
    return WebDriverWait(
        driver,
        seconds,
        poll_frequency=0.1,
        ignored_exceptions=(NoSuchElementException, StaleElementReferenceException),
    )


def follow(driver: WebDriver, by: str, value: str) -> None:
    """Click the element and wait until the page it leads to has replaced this one: an
    element looked up straight after a click may otherwise belong to the old page (both
    have an ``h1``) and be gone by the time it is read."""
    _navigate(driver, lambda: driver.find_element(by, value).click())


def back(driver: WebDriver) -> None:
    _navigate(driver, driver.back)


def _navigate(driver: WebDriver, action: Callable[[], None]) -> None:
    page = driver.find_element(By.TAG_NAME, "html")
    action()
    wait(driver).until(staleness_of(page))


def text(driver: WebDriver, by: str, value: str) -> str:
    """The element's text, looked up again if a live part of the page replaced it
    between the lookup and the read (a one-element tuple is truthy even for "")."""
    found: tuple[str] = wait(driver).until(lambda d: (d.find_element(by, value).text,))
    return found[0]


@contextmanager
def console_process(home: Path, *args: str, stream: str = "stdout") -> Iterator[str]:
    """``impyard --home HOME <args>`` started (``web`` or ``serve --web``), its console's
    URL read from the line it prints; stopped with SIGTERM afterwards."""
    process = subprocess.Popen(
        [sys.executable, "-m", "impyard", "--home", str(home), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **GIT_ENV},
    )
    try:
        pipe = process.stdout if stream == "stdout" else process.stderr
        assert pipe is not None
        yield _read_url(process, pipe)
    finally:
        process.terminate()
        try:
            process.communicate(timeout=30)  # reads the rest, closes both pipes
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


def _read_url(process: subprocess.Popen[str], pipe: IO[str]) -> str:
    deadline = time.monotonic() + 30
    seen: list[str] = []
    while time.monotonic() < deadline:
        line = pipe.readline()
        if not line:
            break
        seen.append(line)
        found = _URL.search(line)
        if found:
            return found.group(1)
    process.kill()
    raise AssertionError(f"the console printed no URL: {''.join(seen)!r}")
