"""The console's access rules and headers, over HTTP: a token login, an HttpOnly
SameSite=Strict session, a CSRF token on every POST, and the security headers on every
response, whatever its status."""

from __future__ import annotations

import stat

import pytest

from tests.helpers.cli import Cli
from tests.helpers.web import console_for, log_in

PAGES = ("/", "/review", "/knowledge", "/metrics", "/overview/live", "/runs/run-x")


@pytest.fixture
def home(cli: Cli) -> Cli:
    assert cli("init").code == 0
    return cli


def test_init_creates_a_token_only_its_owner_reads(home: Cli) -> None:
    token = home.home / "web-token"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    printed = home("web", "--print-url")
    assert printed.code == 0
    secret = token.read_text().strip()
    assert printed.stdout.strip() == f"http://127.0.0.1:8470/login?token={secret}"


def test_the_first_web_on_an_older_data_root_makes_the_token(home: Cli) -> None:
    (home.home / "web-token").unlink()
    printed = home("web", "--print-url", "--listen", "127.0.0.1:9000")
    assert printed.code == 0
    token = home.home / "web-token"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert printed.stdout.strip().endswith(token.read_text().strip())
    assert printed.stdout.startswith("http://127.0.0.1:9000/login?token=")


def test_a_non_loopback_address_is_refused_at_start_with_one_line(home: Cli) -> None:
    refused = home("web", "--listen", "0.0.0.0:8470")
    assert refused.code != 0
    assert refused.stdout == ""
    assert len(refused.stderr.strip().splitlines()) == 1
    assert "--allow-remote" in refused.stderr and "0.0.0.0" in refused.stderr
    without_tls = home("web", "--listen", "0.0.0.0:8470", "--allow-remote")
    assert without_tls.code != 0
    assert len(without_tls.stderr.strip().splitlines()) == 1
    assert "--tls-cert" in without_tls.stderr


def test_every_page_refuses_a_request_without_a_session(home: Cli) -> None:
    _, client = console_for(home.home)
    for path in PAGES:
        answer = client.get(path, follow_redirects=False)
        assert answer.status_code == 401, path
    page = client.get("/", headers={"accept": "text/html"}, follow_redirects=False)
    assert page.status_code == 303 and page.headers["location"] == "/login"
    assert client.post("/logout", data={"csrf": "x"}).status_code == 401
    assert client.get("/static/console.js").status_code == 200


def test_a_wrong_token_gets_no_session(home: Cli) -> None:
    _, client = console_for(home.home)
    answer = client.get("/login?token=" + "A" * 43, follow_redirects=False)
    assert answer.status_code == 401
    assert "impyard_session" not in answer.headers.get("set-cookie", "")
    assert client.get("/", follow_redirects=False).status_code == 401


def test_logging_in_sets_an_httponly_samesite_strict_cookie(home: Cli) -> None:
    console, client = console_for(home.home)
    answer = client.get(f"/login?token={console.token}", follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == "/"
    cookie = next(
        c for c in answer.headers.get_list("set-cookie") if c.startswith("impyard_session=")
    )
    assert "HttpOnly" in cookie
    assert "samesite=strict" in cookie.lower()
    assert client.get("/").status_code == 200


def test_the_login_form_needs_its_csrf_token(home: Cli) -> None:
    console, client = console_for(home.home)
    client.get("/login")
    refused = client.post("/login", data={"token": console.token}, follow_redirects=False)
    assert refused.status_code == 403
    form = client.get("/login").text
    csrf = form.split('name="csrf" value="')[1].split('"')[0]
    taken = client.post(
        "/login", data={"token": console.token, "csrf": csrf}, follow_redirects=False
    )
    assert taken.status_code == 303


def test_a_post_without_the_csrf_token_is_refused(home: Cli) -> None:
    console, client = console_for(home.home)
    csrf = log_in(console, client)
    assert client.post("/logout", data={}).status_code == 403
    assert client.post("/logout", data={"csrf": csrf[:-1] + "x"}).status_code == 403
    assert client.get("/").status_code == 200, "a refused POST changed nothing"
    out = client.post("/logout", data={"csrf": csrf}, follow_redirects=False)
    assert out.status_code == 303
    assert client.get("/", follow_redirects=False).status_code == 401


def test_every_response_carries_the_security_headers(home: Cli) -> None:
    console, client = console_for(home.home)
    answers = [client.get(path, follow_redirects=False) for path in PAGES]
    answers.append(client.get("/login"))
    log_in(console, client)
    answers += [client.get(path) for path in ("/", "/metrics", "/static/console.js")]
    answers += [client.get("/no/such/page"), client.get("/runs/run-20260101T000000Z-0000000000")]
    answers.append(client.post("/logout", data={}))
    statuses = set()
    for answer in answers:
        statuses.add(answer.status_code)
        policy = answer.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "default-src 'none'" in policy
        assert "unsafe-inline" not in policy and "http" not in policy
        assert answer.headers["x-content-type-options"] == "nosniff"
    assert {200, 401, 403, 404} <= statuses


def test_pages_link_no_other_origin_and_hold_no_inline_script(home: Cli) -> None:
    console, client = console_for(home.home)
    log_in(console, client)
    page = client.get("/").text
    assert "<script>" not in page and " style=" not in page and "<style" not in page
    assert 'src="/static/console.js"' in page
    assert "//" not in page.replace("http://127.0.0.1", "").split("<main>")[0]


def test_the_token_file_is_never_followed_through_a_link(home: Cli) -> None:
    token = home.home / "web-token"
    token.unlink()
    elsewhere = home.home.parent / "elsewhere"
    elsewhere.write_text("x" * 50)
    token.symlink_to(elsewhere)
    refused = home("web", "--print-url")
    assert refused.code != 0
    assert "web-token" in refused.stderr


def test_serve_refuses_a_non_loopback_console_before_any_task(home: Cli) -> None:
    refused = home("serve", "--once", "--web", "0.0.0.0:8470")
    assert refused.code != 0
    assert len(refused.stderr.strip().splitlines()) == 1
    assert "--allow-remote" in refused.stderr
