"""A route's upstream on a loopback or private address needs the owner's
``allow_private = true`` however the address is spelled (a name, IPv4 and IPv6 literals,
mapped forms, decimal, octal and hex spellings), and preflight, ``deploy`` and the gateway
at request time judge it alike."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.cli import Cli
from tests.helpers.gateway import SECRET, Served, serve_on_loopback, via_proxy
from tests.helpers.policy import route_toml
from tests.helpers.upstream import Upstream

#: Hosts an upstream URL may carry that all name a non-public address.
NON_PUBLIC = (
    "localhost",
    "127.0.0.1",
    "127.1",
    "2130706433",
    "0x7f.1",
    "017700000001",
    "[::1]",
    "[::ffff:127.0.0.1]",
    "0.0.0.0",
    "10.0.0.5",
    "172.16.3.4",
    "192.168.1.10",
    "169.254.169.254",
    "100.64.0.1",
    "[fc00::1]",
    "[fe80::1]",
    "[64:ff9b::a00:5]",
)
#: The spellings of 127.0.0.1 itself, which reach the test's upstream once allowed.
LOOPBACK = ("127.0.0.1", "127.1", "2130706433", "0x7f.1", "017700000001")
ENV = "IMPYARD_SECRET_PRIVATE"
FIX = "set allow_private = true on the route to allow it"


def route(upstream: str, *extra: str) -> str:
    return route_toml(upstream, ENV, *extra)


@pytest.mark.parametrize("host", NON_PUBLIC)
def test_preflight_and_deploy_refuse_every_spelling_of_a_private_upstream(
    yuko: Cli, host: str
) -> None:
    org = yuko.home / "policy" / "org.toml"
    original = org.read_text()
    org.write_text(original + route(f"http://{host}:11434"))
    # The imp's model calls go to the route, so every run of it would fail.
    overlay = yuko.home / "policy" / "imps" / "yuko.toml"
    overlay.write_text('[box.env]\nIMPYARD_MODEL_ROUTE = "llm"\n')
    env = {ENV: "s"}
    deployed = yuko("deploy", env=env)
    assert deployed.code == 0, deployed.stderr
    warning = deployed.stderr.strip()
    assert warning.startswith(f"impyard: warning: route 'llm': upstream host {host.strip('[]')} ")
    assert "non-public" in warning and warning.endswith(FIX)
    ran = yuko("run", "yuko", "--prompt", "hi", env=env)
    assert ran.code != 0
    assert ran.stderr.splitlines() == [
        f"impyard: error: refusing to run imp 'yuko': {warning.removeprefix('impyard: warning: ')}"
    ]
    assert not (yuko.home / "runs").exists() or not any((yuko.home / "runs").iterdir())

    org.write_text(original + route(f"http://{host}:11434", "allow_private = true"))
    deployed = yuko("deploy", env=env)
    assert deployed.code == 0 and deployed.stderr == ""
    assert deployed.stdout.splitlines()[-1].split()[-1] == "allowed"
    # The check passes; the run stops at the next one here.
    ran = yuko("run", "yuko", "--prompt", "hi", "--timeout", "999999", env=env)
    assert ran.code == 2 and "box.timeout_seconds" in ran.stderr


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IMPYARD_TEST_GATEWAY_SECRET", SECRET)


def _served(tmp_path: Path, upstream: Upstream, host: str, **route: object) -> Served:
    llm = {
        "name": "llm",
        "upstream": f"http://{host}:{upstream.port}/v1",
        "header": "Authorization",
        "value": "Bearer {secret}",
        "secret_env": "IMPYARD_TEST_GATEWAY_SECRET",
        "methods": ["POST", "GET"],
        **route,
    }
    return serve_on_loopback(tmp_path, upstream, route=[llm])


@pytest.fixture
def closing() -> Iterator[list[Served]]:
    served: list[Served] = []
    yield served
    for each in served:
        each.gateway.close()


@pytest.mark.usefixtures("secret")
@pytest.mark.parametrize("host", NON_PUBLIC)
def test_the_gateway_refuses_a_private_upstream_at_request_time(
    tmp_path: Path, upstream: Upstream, host: str, closing: list[Served]
) -> None:
    served = _served(tmp_path, upstream, host)
    closing.append(served)
    status, headers, body = via_proxy(
        served.port, "GET", f"http://127.0.0.1:{served.port}/route/llm/x"
    )
    text = body.decode()
    assert status == 403 and headers["X-Impyard-Gateway-Rule"] == "gateway.route llm"
    assert "non-public" in text and "set allow_private = true on route 'llm'" in text
    assert upstream.seen == []


@pytest.mark.usefixtures("secret")
@pytest.mark.parametrize("host", LOOPBACK)
def test_the_gateway_reaches_a_private_upstream_the_route_allows(
    tmp_path: Path, upstream: Upstream, host: str, closing: list[Served]
) -> None:
    served = _served(tmp_path, upstream, host, allow_private=True)
    closing.append(served)
    status, _, _ = via_proxy(served.port, "GET", f"http://127.0.0.1:{served.port}/route/llm/x")
    assert status == 200 and [seen.path for seen in upstream.seen] == ["/v1/x"]


@pytest.mark.parametrize("rule", ["*.0.1", "*.1"])
def test_a_wildcard_allow_rule_never_reaches_a_private_address(
    tmp_path: Path, upstream: Upstream, rule: str, closing: list[Served]
) -> None:
    """Only an allow rule naming the IP itself lets a box reach a local service."""
    allow = [{"host": rule, "ports": [upstream.port], "methods": ["GET"]}]
    served = serve_on_loopback(tmp_path, upstream, allow=allow)
    closing.append(served)
    status, headers, body = via_proxy(served.port, "GET", upstream.url("/x"))
    assert status == 403 and headers["X-Impyard-Gateway-Rule"] == f"gateway.allow[0] {rule}"
    assert "127.0.0.1 is a non-public address; name the IP in an allow rule" in body.decode()
    assert upstream.seen == []
