"""A fetch cut short by the run's budget, cited from inside a real box: refused as a plain
citation (``impyard-check`` says so), landed when ``impyard-note --partial`` marks it, and
the commit's trailer and ``knowledge provenance`` say the citation is partial."""

from __future__ import annotations

import json

import pytest

from tests.helpers.cli import Cli
from tests.helpers.git import git
from tests.helpers.images import BOX_IMAGE
from tests.helpers.policy import edit_org
from tests.helpers.repo import assert_fsck_clean
from tests.helpers.upstream import Upstream

pytestmark = pytest.mark.docker

BUDGET = 10_000
BODY = 200_000

FETCH_AND_CITE = """
url={url}
receipt=$(wget -S -O /tmp/page "$url" 2>&1 | tr -d '\\r' |
    sed -n 's/^ *[Xx]-[Ii]mpyard-[Rr]eceipt: //p')
echo "receipt=$receipt"
echo "Half a report still says something." |
    impyard-note sources report --source "$url" --receipt "$receipt" >/dev/null
impyard-check; echo "plain-check=$?"
rm "$IMPYARD_KNOWLEDGE_DIR"/records/sources/report--*
echo "Half a report still says something." |
    impyard-note sources report --source "$url" --partial "$receipt"
impyard-check; echo "partial-check=$?"
"""


@pytest.fixture
def yard(cli: Cli, upstream: Upstream) -> Cli:
    assert cli("init").code == 0
    edit_org(
        cli.home,
        "response_bytes_per_run = 104857600",
        f"response_bytes_per_run = {BUDGET}",
    )
    org = cli.home / "policy" / "org.toml"
    org.write_text(
        org.read_text() + f'\n[[gateway.allow]]\nhost = "127.0.0.1"\nports = [{upstream.port}]\n'
        'methods = ["GET"]\n'
    )
    deployed = cli("deploy")
    assert deployed.code == 0, deployed.stderr
    created = cli("imp", "create", "yuko", "--image", BOX_IMAGE)
    assert created.code == 0, created.stderr
    return cli


def test_a_cut_short_fetch_is_refused_as_a_source_and_lands_marked_partial(
    yard: Cli, upstream: Upstream
) -> None:
    # Chunked, so the length is unknown and the budget cuts the body as it passes (a
    # Content-Length over the budget is refused before a byte is relayed).
    url = upstream.url(f"/gen/{BODY}?chunked=1")
    result = yard(
        "run", "yuko", "--prompt", "p", "--json", "--command", FETCH_AND_CITE.format(url=url)
    )
    assert "Traceback" not in result.stderr, result.stderr
    record = json.loads(result.stdout)
    log = yard("runs", "logs", record["run_id"]).stdout
    assert result.code == 0 and record["checkpoint"] == "integrated", (record, log)

    receipt = log.split("receipt=", 1)[1].split()[0]
    receipts = json.loads(yard("runs", "receipts", record["run_id"], "--json").stdout)
    (fetched,) = [r for r in receipts if r["id"] == receipt]
    assert fetched["complete"] is False and fetched["bytes"] < BODY

    # The box's own check refuses the plain citation, naming the rule and the receipt.
    assert "plain-check=1" in log, log
    refusal = [line for line in log.splitlines() if ": source-receipt: " in line]
    assert len(refusal) == 1 and receipt in refusal[0], log
    assert "incomplete fetch" in refusal[0] and "partial_receipts" in refusal[0]
    assert "partial-check=0" in log, log

    repo = yard("knowledge", "yuko").stdout.strip()
    message = git("-C", repo, "log", "-1", "--format=%B", "main").stdout
    trailer = f"Source-Receipt: {receipt} {url} sha256={fetched['sha256']} partial"
    assert trailer in message.splitlines(), message
    path = f"records/sources/report--{record['namespace']}_2.md"
    shown = json.loads(yard("knowledge", "provenance", "yuko", path, "--json").stdout)
    assert shown["partial_receipts"] == [receipt]
    assert [(r["id"], r["partial"]) for r in shown["receipts"]] == [(receipt, True)]
    text = yard("knowledge", "provenance", "yuko", path).stdout
    assert "partial (the fetch was cut short)" in text
    assert_fsck_clean(repo)
