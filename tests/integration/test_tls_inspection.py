"""Inspected HTTPS from real boxes: curl and Node in the Pi image reach an owner's
internal HTTPS service (its own CA, configured as ``box.extra_ca_file``) through the
gateway, which terminates TLS with the data root's CA and applies method rules inside
the tunnel; nothing in the box can see the CA's key."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from impyard.home import Home
from tests.helpers.cli import Cli, json_lines
from tests.helpers.git import git
from tests.helpers.policy import edit_org
from tests.tls_server import HOST, TlsPageServer

pytestmark = pytest.mark.docker

PAGE = b"<html>inspected internal page 7c1d</html>\n"

# Node's own https client through the proxy (a CONNECT, then TLS verified against Node's
# roots plus NODE_EXTRA_CA_CERTS): no agent library, no verification switched off.
NODE_FETCH = r"""
const http = require('http'), tls = require('tls');
const proxy = new URL(process.env.HTTPS_PROXY);
const [host, port, path] = process.argv.slice(2);
http.request({host: proxy.hostname, port: proxy.port, method: 'CONNECT', path: host + ':' + port})
  .on('connect', (res, socket) => {
    if (res.statusCode !== 200) { console.log('connect ' + res.statusCode); process.exit(3); }
    const s = tls.connect({socket, servername: host}, () => {
      s.write('GET ' + path + ' HTTP/1.1\r\nHost: ' + host + ':' + port +
              '\r\nConnection: close\r\n\r\n');
    });
    let out = ''; s.on('data', d => out += d);
    s.on('end', () => {
      console.log('node: ' + out.split('\r\n')[0]);
      console.log(out.split('\r\n\r\n')[1]);
    });
    s.on('error', e => { console.log('node error: ' + e.code); process.exit(4); });
  }).end();
"""


@pytest.fixture
def sites(tmp_path: Path) -> Iterator[tuple[TlsPageServer, TlsPageServer]]:
    with (
        TlsPageServer(tmp_path / "trusted", {"/page.html": PAGE}) as trusted,
        TlsPageServer(tmp_path / "untrusted", {"/page.html": PAGE}) as untrusted,
    ):
        yield trusted, untrusted


@pytest.fixture
def yard(cli: Cli, sites: tuple[TlsPageServer, TlsPageServer]) -> Cli:
    trusted, untrusted = sites
    assert cli("init").code == 0
    edit_org(
        cli.home,
        'network = "none"\n',
        f'network = "none"\nextra_ca_file = "{trusted.ca_file}"\n',
    )
    org = cli.home / "policy" / "org.toml"
    org.write_text(
        org.read_text()
        + f'\n[[gateway.allow]]\nhost = "{HOST}"\nports = [{trusted.port}, {untrusted.port}]\n'
        'methods = ["GET", "HEAD"]\n'
    )
    deployed = cli("deploy")
    assert deployed.code == 0, deployed.stdout + deployed.stderr
    created = cli("imp", "create", "yuko", "--agent", "pi")
    assert created.code == 0, created.stderr
    return cli


def run(cli: Cli, script: str) -> tuple[dict[str, Any], str]:
    result = cli("run", "yuko", "--prompt", "p", "--json", "--command", script, timeout=180)
    assert "Traceback" not in result.stderr, result.stderr
    record = json.loads(result.stdout)
    return record, cli("runs", "logs", record["run_id"]).stdout


def test_method_rules_bind_inside_https_and_clients_verify_without_switches(
    yard: Cli, sites: tuple[TlsPageServer, TlsPageServer]
) -> None:
    trusted, untrusted = sites
    script = "; ".join(
        [
            f"curl -sS {trusted.url('/page.html')}",
            f"curl -sS -o /tmp/post.out -w 'post=%{{http_code}}\\n' -X POST -d secret=1 "
            f"{trusted.url('/upload')}; cat /tmp/post.out",
            f"curl -sS -o /tmp/bad.out -w 'untrusted=%{{http_code}}\\n' "
            f"{untrusted.url('/page.html')}; cat /tmp/bad.out",
            f"node /tmp/fetch.js {HOST} {trusted.port} /page.html",
            'echo "insecure=${NODE_TLS_REJECT_UNAUTHORIZED:-unset}"',
        ]
    )
    record, log = run(yard, f"cat > /tmp/fetch.js <<'JS'\n{NODE_FETCH}\nJS\n{script}")
    assert record["exit_code"] == 0, log
    assert log.count(PAGE.decode().strip()) == 2  # curl and node, both verified
    assert "node: HTTP/1.1 200 OK" in log
    assert "post=403" in log and "POST" in log  # refused inside the tunnel, one line
    assert "untrusted=502" in log and "failed verification" in log
    assert "insecure=unset" in log
    assert trusted.requests == [("GET", "/page.html"), ("GET", "/page.html")]
    assert trusted.uploaded == 0 and untrusted.requests == []
    events = json_lines(yard("journal", "--run", record["run_id"], "--json").stdout)
    inner = [
        (e["method"], e["path"], e["status"])
        for e in events
        if e["event"] == "gateway.request" and e["method"] != "CONNECT"
    ]
    assert ("POST", "/upload", 403) in inner and ("GET", "/page.html", 200) in inner


def test_the_inspection_ca_key_never_reaches_the_box(yard: Cli) -> None:
    key_file = Home(yard.home).gateway_ca_dir / "ca.key"
    # A line of the key's base64 body: it would show in any copy of the key.
    line = key_file.read_text().splitlines()[1]
    encoded = base64.b64encode(line.encode()).decode()
    probe = (
        f"s=$(echo {encoded} | base64 -d); hits=0; "
        "for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do "
        'grep -qaF -e "$s" "$f" 2>/dev/null && echo "hit $f" && hits=1; done; '
        'grep -rlaF -e "$s" / --exclude-dir=proc --exclude-dir=sys 2>/dev/null && hits=1; '
        'grep -q "BEGIN CERTIFICATE" "$SSL_CERT_FILE" && echo bundle=yes; '
        'grep -c "PRIVATE KEY" "$SSL_CERT_FILE" | sed "s/^/private=/"; '
        'grep -F gateway /proc/mounts | sed "s/^/mount /"; '
        'echo "hits=$hits"'
    )
    record, log = run(yard, probe)
    assert record["exit_code"] == 0, log
    assert "hits=0" in log and "hit /" not in log
    assert "bundle=yes" in log and "private=0" in log
    assert "mount " not in log


FETCH_AND_CITE = """
url={url}
receipt=$(curl -sS -D - -o /tmp/page "$url" | tr -d '\\r' |
    sed -n 's/^[Xx]-[Ii]mpyard-[Rr]eceipt: //p')
echo "receipt=$receipt"
echo "The internal page says hello." |
    impyard-note sources internal-page --source "$url" --receipt "{cite}"
"""


def test_a_note_cites_the_receipt_of_what_it_fetched_and_git_log_shows_the_bytes(
    yard: Cli, sites: tuple[TlsPageServer, TlsPageServer]
) -> None:
    trusted, _ = sites
    url = trusted.url("/page.html")
    record, log = run(yard, FETCH_AND_CITE.format(url=url, cite="$receipt"))
    assert record["checkpoint"] == "integrated", (record, log)
    receipt = log.split("receipt=", 1)[1].split()[0]
    digest = hashlib.sha256(PAGE).hexdigest()
    receipts = json.loads(yard("runs", "receipts", record["run_id"], "--json").stdout)
    (fetched,) = [r for r in receipts if r["id"] == receipt]
    assert (fetched["url"], fetched["sha256"], fetched["bytes"]) == (url, digest, len(PAGE))
    repo = yard("knowledge", "yuko").stdout.strip()
    message = git("-C", repo, "log", "-1", "--format=%B", "main").stdout
    assert f"Source-Receipt: {receipt} {url} sha256={digest}" in message
    path = f"records/sources/internal-page--{record['namespace']}_1.md"
    shown = json.loads(yard("knowledge", "provenance", "yuko", path, "--json").stdout)
    assert receipt in json.dumps(shown) and digest in json.dumps(shown)

    # Another run may not cite that receipt, nor one nobody issued.
    for cite in (receipt, "rcpt_" + "0" * 20):
        again, log = run(yard, FETCH_AND_CITE.format(url=url, cite=cite))
        assert again["checkpoint"] == "rejected", (again, log)
        errors = [(e["rule"], cite in e["message"]) for e in again["validation_errors"]]
        assert ("source-receipt", True) in errors
