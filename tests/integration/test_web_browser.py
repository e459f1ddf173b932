"""The console in a real headless browser (Debian's chromium): logging in with the token,
the overview following a run that lands under ``serve`` without a reload, a rejected
run in Review retried after a policy change, hostile note content rendered as text with
no script run, requests without a session or a CSRF token refused, and every page of
real runs fitting a phone's screen."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from impyard.home import Home
from impyard.runs.provision.rework import NEW_NAMESPACE
from tests.helpers import browser as chromium
from tests.helpers.cli import Cli
from tests.helpers.hostile import SCRIPT, commit_hostile_note
from tests.helpers.repo import NS, RUN, make_imp, note_path, note_text
from tests.unit.test_repair import LONG_BODY, deploy, rejected_candidate, set_max_file_chars

_missing = chromium.missing()
pytestmark = pytest.mark.skipif(
    _missing is not None and os.environ.get("CI") != "true", reason=_missing or ""
)
#: The README's screenshot, made by the test that shows a run landing.
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "console.png"
#: What ``fetch`` answers for a POST to the console without the CSRF token.
POST_WITHOUT_CSRF = """
const done = arguments[arguments.length - 1];
fetch(arguments[0], {method: "POST", credentials: "same-origin",
  headers: {"content-type": "application/x-www-form-urlencoded"}, body: "confirm=1"})
  .then(r => done(r.status), e => done(String(e)));
"""


@pytest.fixture
def driver(tmp_path: Path) -> Iterator[WebDriver]:
    assert _missing is None, _missing
    with chromium.browser(tmp_path / "profile") as d:
        yield d


def log_in(driver: WebDriver, base: str, home: Path) -> None:
    """Log in as an owner does: the token typed into the login form."""
    driver.get(base + "/")
    assert driver.current_url == base + "/login", "no session: the console asks for a login"
    token = (home / "web-token").read_text().strip()
    driver.find_element(By.NAME, "token").send_keys(token)
    chromium.follow(driver, By.CSS_SELECTOR, "form.login button")
    assert chromium.text(driver, By.CSS_SELECTOR, "h1") == "Overview"


def test_no_session_and_no_csrf_token_are_refused(cli: Cli, driver: WebDriver) -> None:
    assert cli("init").code == 0
    with chromium.console_process(cli.home, "web", "--listen", "127.0.0.1:0") as base:
        driver.get(base + "/review")
        assert driver.current_url == base + "/login"
        status = driver.execute_async_script(POST_WITHOUT_CSRF, base + "/logout")
        assert status == 401, "no session: refused"
        log_in(driver, base, cli.home)
        status = driver.execute_async_script(POST_WITHOUT_CSRF, base + "/logout")
        assert status == 403, "a session but no CSRF token: refused"
        driver.get(base + "/review")
        assert chromium.text(driver, By.CSS_SELECTOR, "h1").startswith("Review")
        # A phone-width screen: the pages reflow instead of scrolling sideways.
        driver.set_window_size(390, 844)
        for page in ("/", "/review", "/knowledge"):
            driver.get(base + page)
            overflow = driver.execute_script(
                "return document.documentElement.scrollWidth - window.innerWidth"
            )
            assert overflow <= 0, f"{page} is wider than a phone's screen by {overflow}px"


def test_a_hostile_note_renders_as_text_and_runs_no_script(
    cli: Cli, driver: WebDriver, tmp_path: Path
) -> None:
    assert cli("init").code == 0 and cli("imp", "create", "yuko").code == 0
    path = commit_hostile_note(Home(cli.home), "yuko", tmp_path / "work")
    with chromium.console_process(cli.home, "web", "--listen", "127.0.0.1:0") as base:
        log_in(driver, base, cli.home)
        driver.get(base + "/knowledge/yuko")
        history = chromium.text(driver, By.ID, "history")
        assert f"owner: {SCRIPT}" in history
        chromium.follow(driver, By.PARTIAL_LINK_TEXT, "records")
        chromium.follow(driver, By.PARTIAL_LINK_TEXT, "vendors")
        chromium.follow(driver, By.PARTIAL_LINK_TEXT, "<img src=x")
        body = chromium.text(driver, By.ID, "note-body")
        assert SCRIPT in body and "<img src=x onerror=window.__pwned=2>" in body
        assert driver.find_elements(By.TAG_NAME, "img") == []
        assert chromium.text(driver, By.ID, "trust") == "no fetched source"
        links = [a.get_attribute("href") for a in driver.find_elements(By.TAG_NAME, "a")]
        assert not any(href and href.startswith("javascript") for href in links)
        outside = driver.find_element(By.PARTIAL_LINK_TEXT, "https://example.com/")
        assert outside.get_attribute("rel") == "noopener noreferrer"
        for page in ("/knowledge/yuko", f"/knowledge/yuko/note?path={path}"):
            driver.get(base + page)
            assert driver.execute_script("return typeof window.__pwned") == "undefined"


def test_a_rejected_run_is_in_review_and_a_retry_lands_it_after_a_policy_change(
    driver: WebDriver, tmp_path: Path
) -> None:
    home, repo = make_imp(tmp_path)
    cli = Cli(home=home.root)
    set_max_file_chars(home, 300)
    deploy(cli)
    rejected_candidate(home, repo, {note_path(): note_text(f"{NS}_1", body=LONG_BODY).encode()})
    home.run_task(RUN).write_text("Find vendors.\n")
    with chromium.console_process(home.root, "web", "--listen", "127.0.0.1:0") as base:
        log_in(driver, base, home.root)
        chromium.follow(driver, By.LINK_TEXT, "Review")
        row = chromium.text(driver, By.ID, "review")
        assert RUN in row and "file-too-large" in row
        chromium.follow(driver, By.LINK_TEXT, RUN)
        chromium.follow(driver, By.LINK_TEXT, "Rework…")
        task = chromium.text(driver, By.ID, "task-text")
        assert f"{note_path(NEW_NAMESPACE)}: file-too-large:" in task and "Find vendors." in task
        chromium.back(driver)
        chromium.follow(driver, By.LINK_TEXT, "Retry…")
        assert "would be rejected" in chromium.text(driver, By.ID, "dry-run")
        button = driver.find_element(By.CSS_SELECTOR, "form.actions button")
        assert not button.is_enabled(), "a retry that would change nothing is off"
        set_max_file_chars(home, 1000)
        deploy(cli)
        driver.get(f"{base}/review/candidate/{RUN}/retry")
        assert note_path() in chromium.text(driver, By.ID, "dry-run")
        chromium.follow(driver, By.CSS_SELECTOR, "form.actions button")
        assert chromium.text(driver, By.ID, "outcome").startswith("integrated")
        driver.get(base + "/review")
        assert "Nothing waits for review" in chromium.text(driver, By.TAG_NAME, "main")


@pytest.mark.one_runtime
@pytest.mark.docker
def test_the_overview_shows_a_run_landing_under_serve_without_a_reload(
    cli: Cli, driver: WebDriver
) -> None:
    assert cli("init").code == 0 and cli("imp", "create", "yuko").code == 0
    serve = ("serve", "--concurrency", "1", "--web", "127.0.0.1:0")
    with chromium.console_process(cli.home, *serve, stream="stderr") as base:
        log_in(driver, base, cli.home)
        before = driver.execute_script("return performance.timeOrigin")
        added = subprocess.run(
            [*_impyard(cli.home), "task", "add", "yuko", "--prompt", "the console watched this"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert added.stdout.strip()
        chromium.wait(driver, 120).until(
            lambda d: "integrated" in d.find_element(By.ID, "outcomes").text
        )
        assert driver.execute_script("return performance.timeOrigin") == before, "no reload"
        outcome = chromium.text(driver, By.ID, "outcomes")
        assert "yuko" in outcome
        SCREENSHOT.parent.mkdir(exist_ok=True)
        driver.save_screenshot(str(SCREENSHOT))


def _impyard(home: Path) -> list[str]:
    return [sys.executable, "-m", "impyard", "--home", str(home)]


#: A phone's screen (CSS pixels).
PHONE = (390, 844)
#: Most pixels an imp's knowledge page with five commits on main may take on that screen
#: (about 950 with their trailers folded; 3,500 when each showed its eight).
KNOWLEDGE_HEIGHT = 1600
#: How much wider than the window the page is, with the elements past its right edge
#: and those that scroll sideways inside themselves (a table in a scrolling section).
OVERFLOW = """
const w = window.innerWidth;
const name = e => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") +
  (typeof e.className === "string" && e.className ? "." + e.className : "");
const all = [...document.querySelectorAll("body *")];
const past = all.filter(e => e.getBoundingClientRect().right > w + 0.5)
  .map(e => name(e) + " to " + Math.round(e.getBoundingClientRect().right) + "px");
const scrolled = all.filter(e => e.scrollWidth > e.clientWidth + 1 && e.clientWidth > 0 &&
  getComputedStyle(e).overflowX !== "visible").map(e => name(e) + " scrolls sideways");
return [document.documentElement.scrollWidth - w, past.slice(0, 6).concat(scrolled)];
"""
NOTE = (
    "echo 'Acme ships SSO to every customer on its enterprise plan.' | impyard-note vendors "
    "acme-enterprise-single-sign-on --source https://example.com/reports/2026/acme/sso >/dev/null"
)
# 400 bytes of body under a limit of 300 characters.
LONG_NOTE = 'head -c 400 /dev/zero | tr "\\0" "a" | impyard-note vendors long >/dev/null'


def too_wide(driver: WebDriver, url: str | None = None) -> list[str]:
    """The page at ``url`` loaded (None: the one shown); by how much and where it is
    wider than the window."""
    if url is not None:
        driver.get(url)
    over, where = driver.execute_script(OVERFLOW)
    return [f"{driver.current_url} by {over}px: {where}"] if over > 0 or where else []


def foreground(cli: Cli, script: str, code: int) -> str:
    done = cli("run", "yuko", "--prompt", "p", "--json", "--command", script, timeout=120)
    assert done.code == code, done.stdout + done.stderr
    run_id: str = json.loads(done.stdout)["run_id"]
    return run_id


@pytest.mark.one_runtime
@pytest.mark.docker
@pytest.mark.timeout(300)
def test_every_page_fits_a_phone_screen(cli: Cli, driver: WebDriver) -> None:
    assert cli("init").code == 0 and cli("imp", "create", "yuko").code == 0
    (cli.home / "policy" / "imps" / "yuko.toml").write_text("[knowledge]\nmax_file_chars = 300\n")
    assert cli("deploy").code == 0
    # Running while the overview is looked at, then ended by its timeout: a quarantine.
    hold = ("--detach", "--timeout", "30", "--command", NOTE + "; sleep 300")
    detached = cli("run", "yuko", "--prompt", "p", *hold)
    assert detached.code == 0, detached.stderr
    held = detached.stdout.strip()
    try:
        with chromium.console_process(cli.home, "web", "--listen", "127.0.0.1:0") as base:
            log_in(driver, base, cli.home)
            driver.set_window_size(*PHONE)
            driver.get(base + "/")
            assert held in chromium.text(driver, By.CSS_SELECTOR, "#live table.runs")
            wide = too_wide(driver)
            landed = [foreground(cli, NOTE, 0) for _ in range(4)]
            rejected = foreground(cli, LONG_NOTE, 3)
            for page in (
                "/",
                f"/runs/{landed[0]}",
                f"/runs/{rejected}",
                "/review",
                f"/review/candidate/{rejected}",
                f"/review/candidate/{rejected}/retry",
                f"/review/candidate/{rejected}/rework",
                f"/review/candidate/{rejected}/drop",
                "/knowledge",
                "/knowledge/yuko?path=records/vendors",
                "/knowledge/yuko",
            ):
                wide += too_wide(driver, base + page)
            height = driver.execute_script("return document.documentElement.scrollHeight")
            assert height < KNOWLEDGE_HEIGHT, f"the knowledge page is {height}px tall"
            trailers = (By.CSS_SELECTOR, "#history details.trailers")
            assert "Impyard-Run" not in chromium.text(driver, *trailers), "collapsed"
            driver.find_element(By.CSS_SELECTOR, "#history details.trailers summary").click()
            assert landed[-1] in chromium.text(driver, *trailers), "shown on demand"
            driver.get(base + "/knowledge/yuko?path=records/vendors")
            chromium.follow(driver, By.PARTIAL_LINK_TEXT, "acme-enterprise")
            wide += too_wide(driver)
            assert cli("runs", "logs", "-f", held, timeout=60).code == 0
            for page in (
                f"/runs/{held}",
                "/review",
                f"/review/quarantine/{held}",
                f"/review/quarantine/{held}/retry",
            ):
                wide += too_wide(driver, base + page)
            assert wide == [], "wider than a phone's screen:\n" + "\n".join(wide)
    finally:
        cli("runs", "logs", "-f", held, timeout=60)
