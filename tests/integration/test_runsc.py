"""Boxes under gVisor (runsc), whatever runtime the rest of the suite runs under: the
check passes with gVisor's rows, a run lands a note whose commit names the runtime, the
box reaches its gateway and nothing else, and a timeout kills it."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator

import pytest

from tests.helpers.cli import Cli
from tests.helpers.git import git

pytestmark = pytest.mark.docker

NOTE = 'printf "body\\n" | impyard-note vendors acme-sso --source https://example.com/report'
#: Every direct way out the box tries, after asking the gateway; a proxy-less wget each.
PROBES = """\
echo "gateway: $(wget -q -O - http://example.com/ 2>&1 | tail -n 1)"
unset http_proxy HTTP_PROXY https_proxy HTTPS_PROXY
p() {{ n=$1; shift; if o=$("$@" 2>&1); then echo "$n: open $o"; else echo "$n: closed"; fi; }}
p hostport wget -q -O - http://127.0.0.1:{port}/
p otherport wget -q -O - http://127.0.0.1:3129/
p ipv4 wget -q -O - http://192.0.2.1/
p ipv6 wget -q -O - "http://[2001:db8::1]/"
p ipv6lo wget -q -O - "http://[::1]:3128/"
p dns nslookup example.com
p raw ping -c 1 127.0.0.1
"""


@pytest.fixture(autouse=True)
def _runsc(docker_engine: None) -> None:
    """These tests need gVisor registered with the engine; CI installs it, never skips."""
    import docker

    client = docker.from_env(timeout=10)
    try:
        runtimes = client.info().get("Runtimes") or {}
    finally:
        client.close()
    if "runsc" not in runtimes:
        message = "the engine has no runtime runsc: run `bash scripts/gvisor.sh`"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture
def yard(cli: Cli) -> Cli:
    created = cli("init", env={"IMPYARD_INIT_RUNTIME": "runsc"})
    assert created.code == 0, created.stderr
    assert 'runtime = "runsc"' in (cli.home / "policy" / "org.toml").read_text()
    assert cli("imp", "create", "yuko").code == 0
    return cli


@pytest.fixture
def host_listener() -> Iterator[int]:
    """A port on the host's loopback that answers anyone who connects."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield int(sock.getsockname()[1])


def run_json(cli: Cli, *args: str) -> dict[str, object]:
    result = cli("run", "yuko", "--prompt", "research acme", "--json", *args, timeout=180)
    assert "Traceback" not in result.stderr, result.stderr
    record: dict[str, object] = json.loads(result.stdout)
    return record


def test_check_box_under_runsc_passes_with_the_gvisor_rows(cli: Cli) -> None:
    result = cli("check", "box", "--runtime", "runsc", "--json")
    assert result.code == 0, result.stderr + result.stdout
    report = json.loads(result.stdout)
    assert report["runtime"] == "runsc" and report["ok"] is True
    checks = {c["name"]: c for c in report["checks"]}
    assert "mounted nosuid,nodev" not in checks
    assert "dmesg: Starting gVisor" in checks["kernel is gVisor"]["detail"]
    reach = checks["the gateway is reachable and nothing else is"]["detail"]
    for path in ("host loopback port", "IPv4", "IPv6 literal", "DNS", "raw socket"):
        assert path in reach
    assert (
        "Seccomp 2, NoNewPrivs 1"
        in checks["system calls meet gVisor, which is seccomp-filtered (gVisor)"]["detail"]
    )


def test_check_box_refuses_an_unknown_runtime(cli: Cli) -> None:
    result = cli("check", "box", "--runtime", "kata")
    assert result.code != 0
    assert result.stderr.strip() == "impyard: error: --runtime must be runc or runsc, not 'kata'"


def test_a_run_under_runsc_lands_a_note_whose_commit_names_the_runtime(yard: Cli) -> None:
    record = run_json(yard)  # the default box: a note, then impyard-check via the gateway
    assert record["checkpoint"] == "integrated", record
    assert record["runtime"] == "runsc"
    repo = yard("knowledge", "yuko").stdout.strip()
    message = git("-C", repo, "log", "-1", "--format=%B", "main").stdout
    assert "Impyard-Runtime: runsc" in message
    shown = yard("runs", "show", str(record["run_id"]))
    assert "runtime           runsc" in shown.stdout
    logs = yard("runs", "logs", str(record["run_id"])).stdout
    assert "impyard-check: ok" in logs


def test_a_runsc_box_reaches_its_gateway_and_nothing_else(yard: Cli, host_listener: int) -> None:
    record = run_json(yard, "--command", PROBES.format(port=host_listener) + NOTE)
    assert record["checkpoint"] == "integrated", record
    lines = yard("runs", "logs", str(record["run_id"])).stdout.splitlines()
    said = dict(line.split(": ", 1) for line in lines if ": " in line)
    # The gateway answered (default deny: 403), so the box reached it.
    assert "403" in said["gateway"], lines
    for path in ("hostport", "otherport", "ipv4", "ipv6", "ipv6lo", "dns", "raw"):
        assert said[path] == "closed", (path, lines)
    journal = yard("journal", "--json", "--event", "gateway.request").stdout
    assert "example.com" in journal


def test_a_timeout_kills_a_runsc_box(yard: Cli) -> None:
    record = run_json(yard, "--timeout", "2", "--command", "sleep 60")
    assert record["timed_out"] is True
    assert record["checkpoint"] == "quarantined"
    assert record["runtime"] == "runsc"


def test_an_overlay_moves_one_imp_to_runsc(cli: Cli) -> None:
    assert cli("init", env={"IMPYARD_INIT_RUNTIME": "runc"}).code == 0
    for imp in ("yuko", "kai"):
        assert cli("imp", "create", imp).code == 0
    (cli.home / "policy" / "imps" / "kai.toml").write_text('[box]\nruntime = "runsc"\n')
    assert cli("deploy").code == 0
    runtimes = {}
    for imp in ("yuko", "kai"):
        result = cli("run", imp, "--prompt", "p", "--json", "--command", NOTE, timeout=180)
        record = json.loads(result.stdout)
        assert record["checkpoint"] == "integrated", record
        runtimes[imp] = record["runtime"]
    assert runtimes == {"yuko": "runc", "kai": "runsc"}
