"""`impyard knowledge provenance` through the real CLI, and `impyard knowledge <imp>` beside it."""

from __future__ import annotations

import json
from pathlib import Path

import pygit2
import pytest

from impyard.gateway.provenance.receipts import Receipt
from impyard.home import Home
from impyard.knowledge.imps import create_imp
from impyard.knowledge.store.repo import main_commit
from impyard.runs.checkpoints.landing import run_receipts
from tests.helpers import repo as knowledge
from tests.helpers.cli import Cli
from tests.helpers.receipts import fetched
from tests.helpers.repo import NS, RUN

URL = "https://example.com/report"
BODY = b"<html>report</html>"


@pytest.fixture
def landed(tmp_path: Path) -> tuple[Cli, Receipt, str]:
    """Imp yuko with one note on main citing a receipt of the run that landed it."""
    home, repo = knowledge.make_imp(tmp_path)
    receipt = fetched(home, URL, body=BODY, content_type="text/html; charset=utf-8")
    path = knowledge.note_path()
    text = knowledge.note_text(
        f"{NS}_1", urls=[URL, "https://example.com/more"], receipts=[receipt.id]
    )
    base = main_commit(repo)
    result = knowledge.integrate_change(
        home,
        knowledge.change_of(repo, {path: text.encode()}),
        base,
        receipts=run_receipts(home, RUN),
    )
    assert result.checkpoint == "integrated", result.violations
    _land_another(home, repo)  # the note's commit is no longer main's head
    return Cli(home=home.root), receipt, result.commit or ""


def _land_another(home: Home, repo: pygit2.Repository) -> None:
    base = main_commit(repo)
    other = knowledge.note_path(number=2, slug="later")
    result = knowledge.integrate_change(
        home,
        knowledge.change_of(repo, {other: knowledge.note_text(f"{NS}_2").encode()}),
        base,
        run="run-20260711T130000Z-0123456789",
    )
    assert result.checkpoint == "integrated", result.violations


def test_provenance_as_json(landed: tuple[Cli, Receipt, str]) -> None:
    cli, receipt, commit = landed
    shown = cli("knowledge", "provenance", "yuko", knowledge.note_path(), "--json")
    assert shown.code == 0, shown.stderr
    assert json.loads(shown.stdout) == {
        "imp": "yuko",
        "path": knowledge.note_path(),
        "source_urls": [URL, "https://example.com/more"],
        "source_receipts": [receipt.id],
        "partial_receipts": [],
        "commit": commit,
        "run": RUN,
        "independent_sources": 1,
        "receipts": [
            {
                "id": receipt.id,
                "url": URL,
                "sha256": receipt.sha256,
                "partial": False,
                "logged": True,
                "status": 200,
                "bytes": len(BODY),
                "content_type": "text/html; charset=utf-8",
                "started_at": receipt.started_at,
                "ended_at": receipt.ended_at,
            }
        ],
    }


def test_provenance_as_text(landed: tuple[Cli, Receipt, str]) -> None:
    cli, receipt, commit = landed
    shown = cli("knowledge", "provenance", "yuko", knowledge.note_path())
    assert shown.code == 0 and shown.stderr == ""
    assert shown.stdout.splitlines() == [
        f"path     {knowledge.note_path()}",
        f"commit   {commit}",
        f"run      {RUN}",
        "trust    1 independent source (distinct hosts of its verified receipts)",
        f"source   {URL}",
        "source   https://example.com/more",
        f"receipt  {receipt.id} {URL} sha256={receipt.sha256}",
        f"         status 200, {len(BODY)} bytes, text/html; charset=utf-8, "
        f"fetched {receipt.ended_at}",
    ]


def test_the_commit_alone_holds_the_receipt_once_the_run_is_gone(
    landed: tuple[Cli, Receipt, str],
) -> None:
    cli, receipt, _ = landed
    Home(cli.home).run_receipts(RUN).unlink()
    shown = cli("knowledge", "provenance", "yuko", knowledge.note_path(), "--json")
    [row] = json.loads(shown.stdout)["receipts"]
    assert (row["id"], row["url"], row["sha256"]) == (receipt.id, URL, receipt.sha256)
    assert row["logged"] is False and row["status"] is None
    text = cli("knowledge", "provenance", "yuko", knowledge.note_path()).stdout
    assert "no longer in the run's receipts" in text


def test_a_note_without_receipts(landed: tuple[Cli, Receipt, str]) -> None:
    cli, _, _ = landed
    later = knowledge.note_path(number=2, slug="later")
    report = json.loads(cli("knowledge", "provenance", "yuko", later, "--json").stdout)
    assert report["source_receipts"] == [] and report["receipts"] == []
    assert report["run"] == "run-20260711T130000Z-0123456789"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("bob", knowledge.note_path()), "no imp named 'bob'"),
        (("yuko", "records/vendors/nope--n_7f3c91a2d0e4_9.md"), "no file"),
        (("yuko", "records"), "is a directory"),
        (("yuko", ""), "no file"),
        (("Bad", knowledge.note_path()), "invalid imp name"),
    ],
)
def test_unknown_imps_and_paths_are_one_line_errors(
    landed: tuple[Cli, Receipt, str], args: tuple[str, ...], message: str
) -> None:
    cli, _, _ = landed
    result = cli("knowledge", "provenance", *args)
    assert result.code != 0 and result.stdout == ""
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_partial_citation_is_shown_as_partial(tmp_path: Path) -> None:
    """A note citing a fetch cut short (marked in partial_receipts) lands, and provenance
    says, from the commit alone, that the citation is partial."""
    home, repo = knowledge.make_imp(tmp_path)
    cut = b"<html>the first part"
    receipt = fetched(home, URL, body=cut, complete=False)
    text = knowledge.note_text(f"{NS}_1", urls=[URL], receipts=[receipt.id], partial=[receipt.id])
    base = main_commit(repo)
    result = knowledge.integrate_change(
        home,
        knowledge.change_of(repo, {knowledge.note_path(): text.encode()}),
        base,
        receipts=run_receipts(home, RUN),
    )
    assert result.checkpoint == "integrated", result.violations
    home.run_receipts(RUN).unlink()  # the run is gone: the commit alone says it
    cli = Cli(home=home.root)
    report = json.loads(
        cli("knowledge", "provenance", "yuko", knowledge.note_path(), "--json").stdout
    )
    assert report["partial_receipts"] == [receipt.id]
    [row] = report["receipts"]
    assert (row["id"], row["partial"], row["logged"]) == (receipt.id, True, False)
    shown = cli("knowledge", "provenance", "yuko", knowledge.note_path())
    assert shown.code == 0, shown.stderr
    line = f"receipt  {receipt.id} {URL} sha256={receipt.sha256} partial (the fetch was cut short)"
    assert line in shown.stdout.splitlines()


def test_knowledge_imp_still_prints_only_the_path(landed: tuple[Cli, Receipt, str]) -> None:
    cli, _, _ = landed
    located = cli("knowledge", "yuko")
    assert located.code == 0 and located.stderr == ""
    assert located.stdout == f"{(cli.home / 'knowledge/yuko/repo.git').resolve()}\n"


def test_an_imp_named_provenance_still_has_its_path(tmp_path: Path) -> None:
    home, _ = knowledge.make_imp(tmp_path)
    cli = Cli(home=home.root)
    missing = cli("knowledge", "provenance")
    assert missing.code == 2 and "impyard knowledge provenance <imp> <path>" in missing.stderr
    create_imp(home, "provenance")
    located = cli("knowledge", "provenance")
    assert located.code == 0
    assert located.stdout == f"{home.repo('provenance').resolve()}\n"
