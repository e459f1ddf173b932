"""Notes citing fetch receipts (no Docker): a citation holds only for a receipt of the run
itself whose URL is one of the note's source_urls; the lane commit records each cited
receipt in a Source-Receipt trailer; the run's check, mid-run checkpoint and exit
checkpoint read the run's receipts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pygit2
import pytest

from impyard.common.errors import KnowledgeError
from impyard.gateway.provenance.receipts import Receipt, ReceiptLog, new_receipt_id
from impyard.home import Home
from impyard.knowledge.change import RULES, KnowledgeLimits
from impyard.knowledge.integration.lane import LaneResult
from impyard.knowledge.store.repo import main_commit
from impyard.knowledge.validation.citations import Citation, Receipts, parse_trailers, trailer_lines
from impyard.knowledge.validation.validate import validate
from impyard.runs.checkpoints.control import BoxControl
from impyard.runs.checkpoints.landing import run_receipts
from impyard.runs.drive import endings
from tests.helpers import repo as knowledge
from tests.helpers.git import git
from tests.helpers.receipts import fetched
from tests.helpers.repo import NS, RUN, run_id
from tests.helpers.runs import FakeRun
from tests.helpers.runs import running as running_run

LIMITS = KnowledgeLimits()
URL = "https://example.com/report"
OTHER_URL = "https://example.com/other"


def citing(
    number: int, *receipts: str, urls: tuple[str, ...] = (URL,), partial: tuple[str, ...] = ()
) -> tuple[str, bytes]:
    text = knowledge.note_text(f"{NS}_{number}", urls=urls, receipts=receipts, partial=partial)
    return knowledge.note_path(number=number), text.encode()


def validated(
    repo: pygit2.Repository, files: dict[str, bytes], receipts: Receipts | None
) -> set[tuple[str, str, str]]:
    change = knowledge.change_of(repo, files)
    found = validate(
        repo,
        main_commit(repo),
        change,
        namespace=NS,
        mode="append",
        limits=LIMITS,
        receipts=receipts,
    )
    assert all(v.rule in RULES for v in found)
    return {(v.path, v.rule, v.message) for v in found}


def land(
    home: Home,
    repo: pygit2.Repository,
    files: dict[str, bytes],
    *,
    base: str | None = None,
    number: int = 1,
    at_exit: bool = True,
    landed: dict[str, Any] | None = None,
) -> LaneResult:
    base = base or main_commit(repo)
    return knowledge.integrate_change(
        home,
        knowledge.change_of(repo, files),
        base,
        limits=LIMITS,
        checkpoint=number,
        at_exit=at_exit,
        landed=landed,
        keep_refused=at_exit,
        receipts=run_receipts(home, RUN),
    )


def receipt_trailers_git_reads(home: Home) -> list[str]:
    """The Source-Receipt trailers of the last commit on yuko's main as git itself reads
    them (``git log``, values only), one a line: what an owner without Impyard sees."""
    return git(
        "-C",
        home.repo("yuko"),
        "log",
        "-1",
        "--format=%(trailers:key=Source-Receipt,valueonly)",
        "main",
    ).stdout.split("\n")


def message_of(repo: pygit2.Repository, sha: str | None) -> str:
    assert sha is not None
    return repo[sha].peel(pygit2.Commit).message


# --- validation ---------------------------------------------------------------------


def test_a_receipt_of_the_run_for_a_listed_url_is_accepted(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    receipt = fetched(home)
    assert validated(repo, dict([citing(1, receipt.id)]), run_receipts(home, RUN)) == set()


def test_a_made_up_receipt_id_is_refused_naming_path_and_id(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    fetched(home)
    made_up = new_receipt_id()
    path, data = citing(1, made_up)
    [(where, rule, message)] = validated(repo, {path: data}, run_receipts(home, RUN))
    assert (where, rule) == (path, "source-receipt")
    assert made_up in message and "not a receipt of this run" in message


def test_a_receipt_of_another_run_is_refused(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    theirs = fetched(home, run=run_id(7))
    path, data = citing(1, theirs.id)
    [(where, rule, message)] = validated(repo, {path: data}, run_receipts(home, RUN))
    assert (where, rule) == (path, "source-receipt") and theirs.id in message


def test_a_line_naming_another_run_in_the_runs_own_log_is_not_its_receipt(tmp_path: Path) -> None:
    home, _ = knowledge.make_imp(tmp_path)
    ours = fetched(home)
    stray = Receipt.model_validate({**ours.model_dump(), "id": new_receipt_id(), "run": run_id(7)})
    ReceiptLog(home.run_receipts(RUN)).write(stray)
    assert set(run_receipts(home, RUN)) == {ours.id}
    assert run_receipts(home, run_id(8)) == {}  # no log at all: nothing to cite


def test_without_receipts_any_citation_is_refused(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    receipt = fetched(home)
    path, data = citing(1, receipt.id)
    assert {(p, r) for p, r, _ in validated(repo, {path: data}, None)} == {(path, "source-receipt")}


@pytest.mark.parametrize(
    "listed",
    [
        (OTHER_URL,),
        (URL + "/",),  # exact match: a trailing slash is another URL
        ("http://example.com/report",),
        ("https://EXAMPLE.com/report",),
        (),
    ],
)
def test_a_receipt_whose_url_is_not_a_source_url_is_refused(
    tmp_path: Path, listed: tuple[str, ...]
) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    receipt = fetched(home)
    path, data = citing(1, receipt.id, urls=listed)
    [(where, rule, message)] = validated(repo, {path: data}, run_receipts(home, RUN))
    assert (where, rule) == (path, "source-receipt")
    assert receipt.id in message and URL in message and "not in source_urls" in message


def test_every_bad_citation_is_listed_with_its_path(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    good, other_url = fetched(home), fetched(home, OTHER_URL)
    theirs, made_up = fetched(home, run=run_id(7)), new_receipt_id()
    files = dict(
        [
            citing(1, good.id),
            citing(2, made_up, theirs.id),
            citing(3, good.id, other_url.id),
            citing(4, "rcpt_not-an-id"),
        ]
    )
    found = validated(repo, files, run_receipts(home, RUN))
    named = {(path, rule, rid) for path, rule, message in found for rid in _ids(message)}
    assert named == {
        (knowledge.note_path(number=2), "source-receipt", made_up),
        (knowledge.note_path(number=2), "source-receipt", theirs.id),
        (knowledge.note_path(number=3), "source-receipt", other_url.id),
    }
    assert (knowledge.note_path(number=4), "frontmatter") in {(p, r) for p, r, _ in found}
    assert len(found) == 4


def _ids(message: str) -> list[str]:
    return [word for word in message.split() if word.startswith("rcpt_")]


def test_a_url_a_trailer_cannot_hold_is_refused(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    odd = "https://example.com/a\u00a0b"  # valid frontmatter, but whitespace in a trailer
    receipt = fetched(home, odd)
    path, data = citing(1, receipt.id, urls=(odd,))
    [(where, rule, message)] = validated(repo, {path: data}, run_receipts(home, RUN))
    assert (where, rule) == (path, "source-receipt") and "trailer" in message


@pytest.mark.parametrize(
    ("url", "sha256"),
    [("https://x/a\nForged: yes", "0" * 64), ("https://x/a\r", "0" * 64), ("https://x/a", "z")],
)
def test_a_trailer_never_holds_a_line_break_or_a_bad_hash(url: str, sha256: str) -> None:
    with pytest.raises(KnowledgeError):
        Citation("rcpt_0123456789abcdef0123", url, sha256).trailer()


CUT = b"<html>the first part of a long rep"  # what passed before the budget ran out


def test_citing_a_receipt_of_a_cut_short_fetch_is_refused_naming_it(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    cut = fetched(home, body=CUT, complete=False)
    path, data = citing(1, cut.id)
    [(where, rule, message)] = validated(repo, {path: data}, run_receipts(home, RUN))
    assert (where, rule) == (path, "source-receipt")
    assert cut.id in message and "incomplete fetch" in message
    assert f"after {len(CUT)} bytes" in message and "partial_receipts" in message


def test_a_cut_short_fetch_marked_partial_is_accepted(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    cut, whole = fetched(home, body=CUT, complete=False), fetched(home, OTHER_URL)
    files = dict([citing(1, cut.id, whole.id, urls=(URL, OTHER_URL), partial=(cut.id,))])
    assert validated(repo, files, run_receipts(home, RUN)) == set()


def test_a_complete_fetch_marked_partial_is_refused(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    whole = fetched(home)
    path, data = citing(1, whole.id, partial=(whole.id,))
    [(where, rule, message)] = validated(repo, {path: data}, run_receipts(home, RUN))
    assert (where, rule) == (path, "source-receipt")
    assert whole.id in message and "complete fetch" in message


def test_a_partial_mark_on_a_receipt_the_note_does_not_cite_is_a_frontmatter_error(
    tmp_path: Path,
) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    cut = fetched(home, body=CUT, complete=False)
    path, data = citing(1, partial=(cut.id,))
    [(where, rule, message)] = validated(repo, {path: data}, run_receipts(home, RUN))
    assert (where, rule) == (path, "frontmatter")
    assert f"partial_receipts entry {cut.id} is not in source_receipts" in message


# --- the lane -------------------------------------------------------------------------


def test_a_partial_citation_lands_with_a_trailer_that_says_partial(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    cut, whole = fetched(home, body=CUT, complete=False), fetched(home, OTHER_URL)
    urls = (URL, OTHER_URL)
    result = land(home, repo, dict([citing(1, cut.id, whole.id, urls=urls, partial=(cut.id,))]))
    assert result.checkpoint == "integrated", result.violations
    message = message_of(repo, result.commit)
    assert f"Source-Receipt: {cut.id} {URL} sha256={cut.sha256} partial" in message.splitlines()
    assert f"Source-Receipt: {whole.id} {OTHER_URL} sha256={whole.sha256}" in message.splitlines()
    assert set(parse_trailers(message)) == {
        Citation(cut.id, URL, cut.sha256, partial=True),
        Citation(whole.id, OTHER_URL, whole.sha256),
    }
    # git reads the marked one as a trailer too.
    assert f"{cut.id} {URL} sha256={cut.sha256} partial" in receipt_trailers_git_reads(home)
    knowledge.assert_fsck_clean(home.repo("yuko"))


def test_the_commit_carries_a_source_receipt_trailer_per_cited_receipt(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    first, second = fetched(home), fetched(home, OTHER_URL, body=b"other")
    urls = (URL, OTHER_URL)
    files = dict([citing(1, first.id, second.id, urls=urls), citing(2, second.id, urls=urls)])
    result = land(home, repo, files)
    assert result.checkpoint == "integrated", result.violations
    message = message_of(repo, result.commit)
    trailers = message.rstrip("\n").rsplit("\n\n", 1)[1].split("\n")
    assert [t.split(":")[0] for t in trailers[:8]] == [
        "Impyard-Imp",
        "Impyard-Run",
        "Impyard-Task",
        "Impyard-Channel",
        "Impyard-Base",
        "Impyard-Mode",
        "Impyard-Runtime",
        "Impyard-Checkpoint",
    ]
    expected = sorted(f"Source-Receipt: {r.id} {r.url} sha256={r.sha256}" for r in (first, second))
    assert trailers[8:] == expected  # one per receipt, sorted, after the Impyard-* ones
    assert set(parse_trailers(message)) == {
        Citation(r.id, r.url, r.sha256) for r in (first, second)
    }
    # git itself reads them as trailers: `git log` alone shows what a note was based on.
    shown = receipt_trailers_git_reads(home)
    assert [line for line in shown if line] == [line.split(": ", 1)[1] for line in expected]
    assert repo[result.commit or ""].peel(pygit2.Commit).message_trailers["Impyard-Run"] == RUN


def test_a_refused_citation_keeps_the_change_off_main(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    base = main_commit(repo)
    result = land(home, repo, dict([citing(1, new_receipt_id())]))
    assert result.checkpoint == "rejected"
    assert [v.rule for v in result.violations] == ["source-receipt"]
    assert main_commit(repo) == base


def test_a_note_without_citations_adds_no_receipt_trailer(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    fetched(home)
    result = land(home, repo, dict([citing(1)]))
    assert "Source-Receipt" not in message_of(repo, result.commit)


def test_each_checkpoint_records_only_the_receipts_of_the_notes_it_lands(tmp_path: Path) -> None:
    from impyard.knowledge.validation.increments import landed_by

    home, repo = knowledge.make_imp(tmp_path)
    base = main_commit(repo)
    first, second = fetched(home), fetched(home, body=b"again")
    one = citing(1, first.id)
    mid = land(home, repo, dict([one]), base=base, number=1, at_exit=False)
    assert mid.checkpoint == "integrated"
    landed = landed_by(repo, [mid.commit or ""])
    end = land(home, repo, dict([one, citing(2, second.id)]), base=base, number=2, landed=landed)
    assert end.checkpoint == "integrated", end.violations
    assert [c.receipt for c in parse_trailers(message_of(repo, mid.commit))] == [first.id]
    assert [c.receipt for c in parse_trailers(message_of(repo, end.commit))] == [second.id]


def test_trailer_lines_are_unique_and_sorted() -> None:
    a = Citation("rcpt_" + "b" * 20, "https://x/b", "1" * 64)
    b = Citation("rcpt_" + "a" * 20, "https://x/a", "2" * 64)
    assert trailer_lines([a, b, a]) == [b.trailer(), a.trailer()]


# --- the run: check, mid-run checkpoint, exit checkpoint --------------------------------


def running(tmp_path: Path) -> tuple[FakeRun, Path]:
    """A running run with a copy checkout of main; returns it and the checkout root."""
    home, _repo = knowledge.make_imp(tmp_path)
    return running_run(home)


def write(root: Path, path: str, data: bytes) -> None:
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


def test_the_boxs_check_and_checkpoint_read_the_runs_receipts(tmp_path: Path) -> None:
    run, root = running(tmp_path)
    control = BoxControl(run)  # type: ignore[arg-type]
    made_up = new_receipt_id()
    write(root, *citing(1, made_up))
    answer = control.check()
    assert not answer["ok"]
    [violation] = answer["violations"]
    assert violation["rule"] == "source-receipt" and made_up in violation["message"]
    assert violation["path"] == knowledge.note_path(number=1)

    receipt = fetched(run.home)  # the gateway relays a response: its receipt is now citable
    write(root, *citing(1, receipt.id))
    assert control.check()["ok"]
    landed = control.checkpoint()
    assert landed["outcome"] == "integrated", landed
    repo = pygit2.Repository(str(run.home.repo("yuko")))
    assert [c.receipt for c in parse_trailers(message_of(repo, landed["commit"]))] == [receipt.id]


def test_the_exit_checkpoint_reads_the_runs_receipts(tmp_path: Path) -> None:
    run, root = running(tmp_path)
    receipt = fetched(run.home)
    write(root, *citing(1, receipt.id))
    write(root, *citing(2, fetched(run.home, run=run_id(7)).id))
    endings.checkpoint(run)  # type: ignore[arg-type]
    assert run.finished["checkpoint"] == "rejected"
    assert [(v["path"], v["rule"]) for v in run.finished["validation_errors"]] == [
        (knowledge.note_path(number=2), "source-receipt")
    ]

    (root / knowledge.note_path(number=2)).unlink()
    run.manifest.state = "running"
    endings.checkpoint(run)  # type: ignore[arg-type]
    assert run.finished["checkpoint"] == "integrated", run.finished
    repo = pygit2.Repository(str(run.home.repo("yuko")))
    cited = parse_trailers(message_of(repo, run.finished["produced_commit"]))
    assert cited == [Citation(receipt.id, URL, receipt.sha256)]


def test_the_boxs_check_refuses_an_unmarked_cut_short_fetch_and_lands_a_marked_one(
    tmp_path: Path,
) -> None:
    """The box's own check (what impyard-check prints) and checkpoint answer as the lane."""
    run, root = running(tmp_path)
    control = BoxControl(run)  # type: ignore[arg-type]
    cut = fetched(run.home, body=CUT, complete=False)
    write(root, *citing(1, cut.id))
    answer = control.check()
    assert not answer["ok"]
    [violation] = answer["violations"]
    assert (violation["path"], violation["rule"]) == (
        knowledge.note_path(number=1),
        "source-receipt",
    )
    assert cut.id in violation["message"] and "partial_receipts" in violation["message"]
    assert control.checkpoint()["outcome"] == "rejected"

    write(root, *citing(1, cut.id, partial=(cut.id,)))
    assert control.check()["ok"]
    landed = control.checkpoint()
    assert landed["outcome"] == "integrated", landed
    repo = pygit2.Repository(str(run.home.repo("yuko")))
    assert parse_trailers(message_of(repo, landed["commit"])) == [
        Citation(cut.id, URL, cut.sha256, partial=True)
    ]
