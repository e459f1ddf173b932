"""Owner repair of preserved changes through the real CLI (no Docker): candidates and
quarantined runs are listed, shown, diffed, exported, dropped and retried through the
lane with every check, exactly once, recorded in the manifest and the journal."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pygit2
import pytest

from impyard.common.loopspace import loop_supported
from impyard.home import Home
from impyard.knowledge.change import Change, KnowledgeLimits, Violation
from impyard.knowledge.checkouts import runspace
from impyard.knowledge.checkouts.checkout import Checkout
from impyard.knowledge.checkouts.snapshot import snapshot
from impyard.knowledge.imps import create_imp
from impyard.knowledge.integration.lane import Trailers, candidate_ref, integrate, keep_candidate
from impyard.knowledge.integration.quarantine import quarantine, quarantine_ref
from impyard.knowledge.store.repo import main_commit
from impyard.knowledge.validation.increments import landed_by
from impyard.runs.records import manifest as manifests
from impyard.runs.records.model import CheckpointRecord, Manifest
from tests.helpers import repo as knowledge
from tests.helpers.backup import reject_note
from tests.helpers.cli import Cli
from tests.helpers.git import git
from tests.helpers.repo import NS, RUN, run_id
from tests.helpers.runs import write_run

OWNER = {"USER": "alice"}
TIGHT = KnowledgeLimits(max_file_chars=300)
LONG_BODY = "Acme ships SSO. " * 40 + "\n"  # about 640 characters: over TIGHT


def set_max_file_chars(home: Home, chars: int) -> None:
    text = home.org_policy.read_text()
    lines = [
        f"max_file_chars = {chars}" if line.startswith("max_file_chars =") else line
        for line in text.splitlines()
    ]
    home.org_policy.write_text("\n".join(lines) + "\n")


def deploy(cli: Cli) -> None:
    done = cli("deploy")
    assert done.code == 0, done.stderr


def write_manifest(home: Home, base: str, **fields: Any) -> Manifest:
    """Run RUN's record of task-1, finished on ``base`` under the tight limits."""
    fields = {"task_id": "task-1", "state": "finished", "limits": TIGHT} | fields
    return write_run(home, RUN, base_commit=base, **fields)


def refs(repo: pygit2.Repository) -> dict[str, str]:
    return {name: str(repo.lookup_reference(name).target) for name in repo.references}


def run_commits_on_main(home: Home) -> list[str]:
    log = git("-C", home.repo("yuko"), "log", "--format=%H %(trailers:key=Impyard-Run)", "main")
    return [line.split()[0] for line in log.stdout.splitlines() if RUN in line]


def journal(home: Home, event: str) -> list[dict[str, Any]]:
    lines = home.journal.read_text().splitlines() if home.journal.exists() else []
    return [e for e in map(json.loads, lines) if e["event"] == event]


def as_process(home: Home) -> Cli:
    """The CLI as a real process with a timeout: a test fails, not hangs, if a fifo blocks."""
    return Cli(home=home.root, in_process=False)


# -- candidates ------------------------------------------------------------------------


def rejected_candidate(
    home: Home, repo: pygit2.Repository, files: dict[str, bytes], limits: KnowledgeLimits = TIGHT
) -> tuple[str, Manifest]:
    """A run whose exit the lane refused: refs/candidates/<run> and a finished manifest."""
    base = main_commit(repo)
    result = knowledge.integrate_change(home, knowledge.change_of(repo, files), base, limits=limits)
    assert result.checkpoint == "rejected" and result.candidate_ref == candidate_ref(RUN)
    m = write_manifest(
        home,
        base,
        checkpoint="rejected",
        candidate_ref=result.candidate_ref,
        validation_errors=result.violations,
    )
    return base, m


def refused_long_note(tmp_path: Path) -> tuple[Home, pygit2.Repository, Cli]:
    """Imp yuko under max_file_chars 300 (deployed), with a 640-character note refused."""
    home, repo = knowledge.make_imp(tmp_path)
    cli = Cli(home=home.root)
    set_max_file_chars(home, 300)
    deploy(cli)
    text = knowledge.note_text(f"{NS}_1", body=LONG_BODY).encode()
    rejected_candidate(home, repo, {knowledge.note_path(): text})
    return home, repo, cli


@pytest.fixture
def long_note(tmp_path: Path) -> tuple[Home, pygit2.Repository, Cli]:
    return refused_long_note(tmp_path)


def test_a_candidate_lands_once_after_the_owner_raises_the_limit(
    long_note: tuple[Home, pygit2.Repository, Cli],
) -> None:
    home, repo, cli = long_note
    refused = cli("candidates", "retry", RUN, env=OWNER)
    assert refused.code == 3
    assert "file-too-large" in refused.stdout and knowledge.note_path() in refused.stdout
    assert candidate_ref(RUN) in repo.references

    set_max_file_chars(home, 1000)
    deploy(cli)
    landed = cli("candidates", "retry", RUN, "--json", env=OWNER)
    assert landed.code == 0, landed.stdout + landed.stderr
    result = json.loads(landed.stdout)
    assert result["outcome"] == "integrated" and result["landed"] and result["source"] == "ref"
    assert result["checkpoint"] == 1
    assert main_commit(repo) == result["commit"]
    assert knowledge.note_path() in knowledge.tree_paths(repo)
    assert candidate_ref(RUN) not in repo.references
    trailers = repo[result["commit"]].peel(pygit2.Commit).message_trailers
    assert trailers["Impyard-Run"] == RUN and trailers["Impyard-Checkpoint"] == "1 (exit)"

    again = cli("candidates", "retry", RUN, env=OWNER)
    assert again.code == 2
    assert "already landed" in again.stderr and result["commit"] in again.stderr
    assert run_commits_on_main(home) == [result["commit"]]

    m = manifests.read(home, RUN)
    assert (m.checkpoint, m.produced_commit, m.candidate_ref) == (
        "integrated",
        result["commit"],
        None,
    )
    assert [(r.action, r.kind, r.by, r.outcome) for r in m.repairs] == [
        ("retry", "candidate", "alice", "rejected"),
        ("retry", "candidate", "alice", "integrated"),
    ]
    events = journal(home, "repair.retried")
    assert [(e["outcome"], e["by"], e["run"], e["imp"]) for e in events] == [
        ("rejected", "alice", RUN, "yuko"),
        ("integrated", "alice", RUN, "yuko"),
    ]
    assert events[0]["violations"][0]["rule"] == "file-too-large"
    assert events[1]["commit"] == result["commit"]


def test_a_retry_whose_host_died_after_main_moved_does_not_land_twice(
    long_note: tuple[Home, pygit2.Repository, Cli], monkeypatch: pytest.MonkeyPatch
) -> None:
    from impyard.repair import retry

    home, repo, cli = long_note
    set_max_file_chars(home, 1000)
    deploy(cli)

    def die(*_args: object) -> None:
        raise KeyboardInterrupt  # the host goes away after the compare-and-swap

    with monkeypatch.context() as patch:
        patch.setattr(retry, "_settle_landed", die)
        assert cli("candidates", "retry", RUN, env=OWNER).code == 130
    [landed] = run_commits_on_main(home)
    # Main moved, the retry was not settled: the ref, the one other copy, is still there.
    assert candidate_ref(RUN) in repo.references
    pending = manifests.read(home, RUN).repairs
    assert [(r.outcome, r.checkpoint) for r in pending] == [("pending", 1)]

    done = cli("candidates", "retry", RUN, "--json", env=OWNER)
    assert done.code == 0, done.stderr
    assert json.loads(done.stdout)["commit"] == landed
    assert run_commits_on_main(home) == [landed]
    assert [(r.outcome, r.commit) for r in manifests.read(home, RUN).repairs] == [
        ("integrated", landed)
    ]
    assert candidate_ref(RUN) not in repo.references


def test_a_still_invalid_candidate_changes_nothing_and_prints_every_reason(
    tmp_path: Path,
) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    cli = Cli(home=home.root)
    bad = knowledge.note_text(f"{NS}_1", body="token ghp_" + "a" * 36 + "\n").encode()
    files = {
        knowledge.note_path(): bad,
        "records/vendors/wrong--n_0123456789ab_1.md": knowledge.note_text(
            "n_0123456789ab_1"
        ).encode(),
        "organization/index.md": b"# mine\n",
    }
    rejected_candidate(home, repo, files)
    before, head = refs(repo), main_commit(repo)
    refused = cli("candidates", "retry", RUN, env=OWNER)
    assert refused.code == 3
    for rule in ("credential", "namespace", "organization-in-append"):
        assert rule in refused.stdout
    assert f"{candidate_ref(RUN)} is kept as it was" in refused.stdout
    # The owner learns that retrying cannot fix content, in one line.
    [advice] = [line for line in refused.stdout.splitlines() if "policy change" in line]
    assert "re-validates the same files" in advice and "re-run the task" in advice
    assert refs(repo) == before and main_commit(repo) == head
    as_json = cli("candidates", "retry", RUN, "--json", env=OWNER)
    assert as_json.code == 3
    found = json.loads(as_json.stdout)
    assert found["landed"] is False and found["outcome"] == "rejected"
    assert "re-run the task" in found["advice"]
    assert {v["rule"] for v in found["violations"]} >= {
        "credential",
        "namespace",
        "organization-in-append",
    }
    assert refs(repo) == before and main_commit(repo) == head
    assert [r.outcome for r in manifests.read(home, RUN).repairs] == ["rejected", "rejected"]


def test_a_retry_with_nothing_to_land_keeps_the_candidate_and_fails(tmp_path: Path) -> None:
    # A candidate whose commit holds no file (what the box wrote was not kept) used to
    # "land" as empty, exit 0 and delete the ref: the record of the refusal was gone.
    home, repo = knowledge.make_imp(tmp_path)
    cli = Cli(home=home.root)
    base = main_commit(repo)
    refused = [
        Violation(knowledge.note_path(), "file-too-large", "300 bytes, over the 240-byte limit")
    ]
    keep_candidate(
        repo, Change(), Trailers("yuko", RUN, "task-1", None, base, "append"), "rejected", refused
    )
    write_manifest(
        home,
        base,
        checkpoint="rejected",
        candidate_ref=candidate_ref(RUN),
        validation_errors=refused,
    )
    before = refs(repo)
    for args in ((), ("--json",)):
        done = cli("candidates", "retry", RUN, *args, env=OWNER)
        assert done.code == 1, done.stdout + done.stderr
        assert done.stdout == ""
        [line] = done.stderr.splitlines()
        assert "nothing to land" in line and candidate_ref(RUN) in line and "kept" in line
        assert refs(repo) == before and main_commit(repo) == base
    assert manifests.read(home, RUN).repairs == []
    shown = cli("candidates", "show", RUN)
    assert shown.code == 0 and "file-too-large" in shown.stdout


def test_a_quarantine_with_nothing_new_to_land_is_kept(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    cli = Cli(home=home.root)
    quarantined(home, repo, lambda root: (root / "records").mkdir())
    before = refs(repo)
    done = cli("quarantine", "retry", RUN, env=OWNER)
    assert done.code == 1, done.stdout + done.stderr
    assert "nothing to land" in done.stderr and quarantine_ref(RUN) in done.stderr
    assert refs(repo) == before
    assert home.run_checkout(RUN).is_dir()


def test_a_landing_retry_keeps_a_ref_that_moved_while_it_ran(
    long_note: tuple[Home, pygit2.Repository, Cli], monkeypatch: pytest.MonkeyPatch
) -> None:
    from impyard.repair import retry

    home, repo, cli = long_note
    set_max_file_chars(home, 1000)
    deploy(cli)
    base = main_commit(repo)
    integrate_run = retry.integrate_run

    def and_move_the_ref(*args: Any, **kwargs: Any) -> Any:
        result = integrate_run(*args, **kwargs)
        repo.references[candidate_ref(RUN)].set_target(base)
        return result

    monkeypatch.setattr(retry, "integrate_run", and_move_the_ref)
    done = cli("candidates", "retry", RUN, env=OWNER)
    assert done.code == 0, done.stdout + done.stderr
    assert "moved" in done.stderr and "kept" in done.stderr
    assert str(repo.lookup_reference(candidate_ref(RUN)).target) == base
    assert knowledge.note_path() in knowledge.tree_paths(repo)


def test_retry_help_says_it_is_for_a_policy_change(tmp_path: Path) -> None:
    home, _repo = knowledge.make_imp(tmp_path)
    cli = Cli(home=home.root)
    for noun in ("candidates", "quarantine"):
        shown = cli(noun, "retry", "--help")
        text = " ".join(shown.stdout.split())
        assert "policy since changed" in text and "re-run the task" in text, text


def test_list_show_diff_of_a_candidate_against_the_current_main(
    long_note: tuple[Home, pygit2.Repository, Cli],
) -> None:
    _home, repo, cli = long_note
    listed = cli("candidates", "list", "--json")
    assert listed.code == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert (row["run_id"], row["imp"], row["ref"], row["checkpoint"]) == (
        RUN,
        "yuko",
        candidate_ref(RUN),
        "rejected",
    )
    assert (row["written"], row["deleted"], row["violations_total"]) == (1, 0, 1)
    assert json.loads(cli("candidates", "list", "--imp", "yuko", "--json").stdout) == [row]
    table = cli("candidates", "list").stdout
    assert RUN in table and "+1 -0" in table
    assert cli("quarantine", "list", "--json").stdout.strip() == "[]"

    shown = json.loads(cli("candidates", "show", RUN, "--json").stdout)
    assert shown["main"] == main_commit(repo) and shown["base"] == main_commit(repo)
    assert [(f["path"], f["status"]) for f in shown["files"]] == [(knowledge.note_path(), "added")]
    assert shown["violations"][0]["rule"] == "file-too-large"
    assert shown["status_counts"] == {"added": 1}
    text = cli("candidates", "show", RUN).stdout
    assert "file-too-large" in text and f"added     {knowledge.note_path()}" in text

    diffed = json.loads(cli("candidates", "diff", RUN, "--json").stdout)
    [file] = diffed["files"]
    assert file["status"] == "added" and not file["binary"] and not diffed["truncated"]
    assert file["diff"].startswith(f"--- /dev/null\n+++ candidate/{knowledge.note_path()}")
    assert "+Acme ships SSO." in file["diff"]
    assert "+Acme ships SSO." in cli("candidates", "diff", RUN).stdout


def test_show_and_diff_say_what_landing_would_do_now_and_escape_control_characters(
    tmp_path: Path,
) -> None:
    """Main moved on since the base: an organization file the candidate rewrites is
    'modified' against main, a file main already has identically is 'unchanged'."""
    home, repo = knowledge.make_imp(tmp_path)
    cli = Cli(home=home.root)
    index = "organization/README.md"
    same = knowledge.note_text(f"{NS}_2").encode()
    hostile = b"line one\n\x1b]0;pwned\x07 line two\n"
    base = main_commit(repo)
    result = knowledge.integrate_change(
        home, knowledge.change_of(repo, {index: hostile, knowledge.note_path(number=2): same}), base
    )
    assert result.checkpoint == "rejected"
    write_manifest(home, base, checkpoint="rejected", candidate_ref=result.candidate_ref)
    other = "run-20260711T130000Z-0123456789"
    landed = integrate(
        home,
        "yuko",
        knowledge.change_of(repo, {knowledge.note_path(number=2): same}),
        base=base,
        namespace=NS,
        mode="append",
        limits=KnowledgeLimits(),
        trailers=Trailers("yuko", other, "task-2", None, base, "append"),
    )
    assert landed.checkpoint == "integrated"
    shown = json.loads(cli("candidates", "show", RUN, "--json").stdout)
    assert {f["path"]: f["status"] for f in shown["files"]} == {
        index: "modified",
        knowledge.note_path(number=2): "unchanged",
    }
    diffed = cli("candidates", "diff", RUN)
    assert "\x1b" not in diffed.stdout and "\x07" not in diffed.stdout
    assert "+\\x1b]0;pwned\\x07 line two" in diffed.stdout
    assert f"--- a/{index}" in diffed.stdout and knowledge.note_path(number=2) not in diffed.stdout


def checkpointed_then_refused(tmp_path: Path) -> tuple[Home, pygit2.Repository, Cli]:
    """Under max_file_chars 300: checkpoint 1 landed note 1 mid-run; the exit rewrote it
    and added a too-long note 2, refused (refs/candidates/<run>, a finished manifest)."""
    home, repo = knowledge.make_imp(tmp_path)
    cli = Cli(home=home.root)
    set_max_file_chars(home, 300)
    deploy(cli)
    base = main_commit(repo)
    one, two = knowledge.note_path(number=1), knowledge.note_path(number=2)
    first = knowledge.integrate_change(
        home,
        knowledge.change_of(repo, {one: knowledge.note_text(f"{NS}_1").encode()}),
        base,
        limits=TIGHT,
        checkpoint=1,
        at_exit=False,
        keep_refused=False,
    )
    assert first.checkpoint == "integrated" and first.commit
    rewritten = knowledge.note_text(f"{NS}_1", body="Rewritten.\n").encode()
    long_two = knowledge.note_text(f"{NS}_2", body=LONG_BODY).encode()
    exit_change = knowledge.change_of(repo, {one: rewritten, two: long_two})
    refused = knowledge.integrate_change(
        home,
        exit_change,
        base,
        limits=TIGHT,
        checkpoint=2,
        at_exit=True,
        landed=landed_by(repo, [first.commit]),
    )
    assert refused.checkpoint == "rejected"
    write_manifest(
        home,
        base,
        checkpoint="rejected",
        candidate_ref=refused.candidate_ref,
        produced_commit=first.commit,
        checkpoints=[
            CheckpointRecord(
                number=1, state="integrated", requested_at="t", commit=first.commit, files=[one]
            )
        ],
    )
    return home, repo, cli


def test_a_retry_lands_the_rest_and_keeps_back_changes_to_checkpointed_files(
    tmp_path: Path,
) -> None:
    """Checkpoint 1 landed note 1 mid-run; the exit rewrote it and added a too-long note 2.
    With the limit raised, a retry lands note 2 as checkpoint 2 and keeps note 1's rewrite
    at the candidate ref: checkpointed files are final for the run."""
    home, repo, cli = checkpointed_then_refused(tmp_path)
    one, two = knowledge.note_path(number=1), knowledge.note_path(number=2)
    set_max_file_chars(home, 1000)
    deploy(cli)
    done = cli("candidates", "retry", RUN, "--json", env=OWNER)
    assert done.code == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["outcome"] == "integrated" and result["checkpoint"] == 2
    assert [(v["path"], v["rule"]) for v in result["violations"]] == [(one, "checkpointed")]
    assert result["candidate_ref"] == candidate_ref(RUN)
    assert git("-C", home.repo("yuko"), "show", f"main:{one}").stdout.encode() == (
        knowledge.note_text(f"{NS}_1").encode()
    )
    assert two in knowledge.tree_paths(repo)
    # The candidate holds the box's final tree: against main, only the refused edit differs.
    kept = knowledge.tree_paths(repo, candidate_ref(RUN))
    assert one in kept and two in kept
    differs = git("-C", home.repo("yuko"), "diff", "--name-status", "main", candidate_ref(RUN))
    assert differs.stdout.splitlines() == [f"M\t{one}"]
    m = manifests.read(home, RUN)
    assert m.candidate_ref == candidate_ref(RUN) and m.produced_commit == result["commit"]

    before, head = refs(repo), main_commit(repo)
    again = cli("candidates", "retry", RUN, env=OWNER)
    assert again.code == 3 and "rejected" in again.stdout and "checkpointed" in again.stdout
    assert refs(repo) == before and main_commit(repo) == head


def test_drop_and_export_of_a_candidate(
    long_note: tuple[Home, pygit2.Repository, Cli], tmp_path: Path
) -> None:
    home, repo, cli = long_note
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    refused = cli("candidates", "export", RUN, str(busy))
    assert refused.code == 2 and "not empty" in refused.stderr

    out = tmp_path / "out"
    exported = cli("candidates", "export", RUN, str(out), "--json", env=OWNER)
    assert exported.code == 0, exported.stderr
    doc = json.loads(exported.stdout)
    assert doc["directory"] == str(out) and doc["ref"] == candidate_ref(RUN)
    written = out / "files" / knowledge.note_path()
    assert written.read_bytes() == knowledge.note_text(f"{NS}_1", body=LONG_BODY).encode()
    assert written.stat().st_mode & 0o777 == 0o644
    on_disk = json.loads((out / "export.json").read_text())
    assert [w["path"] for w in on_disk["written"]] == [knowledge.note_path()]
    assert on_disk["deleted"] == [] and on_disk["written"][0]["status"] == "added"

    head = main_commit(repo)
    dropped = cli("candidates", "drop", RUN, "--json", env=OWNER)
    assert dropped.code == 0, dropped.stderr
    assert json.loads(dropped.stdout)["ref"] == candidate_ref(RUN)
    assert candidate_ref(RUN) not in repo.references and main_commit(repo) == head
    gone = cli("candidates", "drop", RUN)
    assert gone.code == 2 and "no refs/candidates" in gone.stderr
    assert "dropped by alice" in cli("candidates", "retry", RUN).stderr

    m = manifests.read(home, RUN)
    assert [(r.action, r.outcome, r.by) for r in m.repairs] == [
        ("export", "exported", "alice"),
        ("drop", "dropped", "alice"),
    ]
    assert m.candidate_ref is None
    assert [e["by"] for e in journal(home, "repair.exported")] == ["alice"]
    assert [e["outcome"] for e in journal(home, "repair.dropped")] == ["dropped"]
    shown = cli("runs", "show", RUN)
    assert "repairs:" in shown.stdout and "drop candidate by alice: dropped" in shown.stdout
    as_json = json.loads(cli("runs", "show", RUN, "--json").stdout)
    assert [r["action"] for r in as_json["repairs"]] == ["export", "drop"]


def test_a_ref_whose_run_is_gone_is_still_listed_shown_and_dropped(
    long_note: tuple[Home, pygit2.Repository, Cli],
) -> None:
    home, repo, cli = long_note
    home.manifest(RUN).unlink()
    [row] = json.loads(cli("candidates", "list", "--json").stdout)
    assert row["checkpoint"] is None and row["imp"] == "yuko"
    assert cli("candidates", "show", RUN).code == 0
    refused = cli("candidates", "retry", RUN)
    assert refused.code == 2 and "no run" in refused.stderr
    assert cli("candidates", "drop", RUN).code == 0
    assert candidate_ref(RUN) not in repo.references
    assert [e["run"] for e in journal(home, "repair.dropped")] == [RUN]


def test_a_candidate_is_named_by_a_prefix_or_last_and_by_its_id_once_its_run_is_gone(
    long_note: tuple[Home, pygit2.Repository, Cli],
) -> None:
    home, _repo, cli = long_note
    for text in ("last", RUN[:16], RUN[4:20]):
        shown = cli("candidates", "show", text, "--json")
        assert shown.code == 0, shown.stderr
        assert json.loads(shown.stdout)["run_id"] == RUN
    shutil.rmtree(home.run_dir(RUN))  # a restore from a backup brings refs, not runs
    assert json.loads(cli("candidates", "show", RUN, "--json").stdout)["run_id"] == RUN
    gone = cli("candidates", "show", RUN[:16])
    assert gone.code == 2 and gone.stderr == f"impyard: error: no run matches {RUN[:16]!r}\n"


def test_last_means_the_newest_of_the_kind_and_a_run_of_the_other_kind_is_pointed_to(
    long_note: tuple[Home, pygit2.Repository, Cli],
) -> None:
    """RUN was refused; a later run was quarantined and the newest one landed: `last` is
    RUN for the candidate commands and the quarantined run for the quarantine ones."""
    home, repo, cli = long_note
    killed = "run-20260711T130000Z-aaaaaaaaaa"
    quarantine(repo, killed, main_commit(repo), Change(), "timed out and killed")
    write_run(home, killed, checkpoint="quarantined", state="finished")
    write_run(home, "run-20260711T140000Z-bbbbbbbbbb", checkpoint="integrated", state="finished")
    for args, expected in (
        (("candidates", "show", "last"), RUN),
        (("candidates", "retry", "last", "--dry-run"), RUN),
        (("quarantine", "show", "last"), killed),
    ):
        shown = cli(*args, "--json", env=OWNER)
        assert shown.code == 0, shown.stderr
        assert json.loads(shown.stdout)["run_id"] == expected, args
    for command in ("show", "diff", "retry", "drop", "export"):
        extra = [str(home.root.parent / "out")] if command == "export" else []
        asked = cli("candidates", command, killed, *extra, env=OWNER)
        assert asked.code != 0, command
        assert asked.stderr == (
            f"impyard: error: run {killed} was quarantined, not refused: "
            f"see `impyard quarantine show {killed}`\n"
        ), command
    back = cli("quarantine", "show", RUN)
    assert back.code != 0
    assert f"run {RUN} was refused, not quarantined: see `impyard candidates show {RUN}`" in (
        back.stderr
    )
    assert quarantine_ref(killed) in repo.references and candidate_ref(RUN) in repo.references


def test_last_with_nothing_of_its_kind_kept_says_so(tmp_path: Path) -> None:
    home, _repo = knowledge.make_imp(tmp_path)
    write_run(home, RUN, checkpoint="integrated", state="finished")
    shown = Cli(home=home.root)("candidates", "show", "last")
    assert shown.code == 2
    assert shown.stderr == "impyard: error: no candidates kept: `last` names the newest one\n"


# -- quarantine ------------------------------------------------------------------------


def quarantined(home: Home, repo: pygit2.Repository, fill: Callable[[Path], None]) -> Manifest:
    """A quarantined run with a plain space whose kept checkout ``fill`` writes."""
    base = main_commit(repo)
    space = runspace.create(home, RUN, 64 * 2**20, loop=False)
    root = home.run_checkout(RUN)
    root.mkdir()
    fill(root)
    checkout = Checkout(kind="overlay", base=base, root=root)
    change = snapshot(repo, checkout, TIGHT)
    quarantine(repo, RUN, base, change, "timed out and killed")
    return write_manifest(
        home,
        base,
        checkpoint="quarantined",
        quarantine_ref=quarantine_ref(RUN),
        reason="timed out and killed",
        checkout=checkout,
        space=space,
        validation_errors=change.problems,
    )


def hostile(root: Path) -> None:
    topic = root / "records" / "vendors"
    topic.mkdir(parents=True)
    (topic / f"acme--{NS}_1.md").write_bytes(knowledge.note_text(f"{NS}_1").encode())
    os.symlink("/etc/passwd", topic / f"passwd--{NS}_2.md")
    os.mkfifo(topic / f"fifo--{NS}_3.md")


def test_a_quarantine_retry_refuses_links_and_fifos_without_following_or_blocking(
    tmp_path: Path,
) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    cli = Cli(home=home.root)
    quarantined(home, repo, hostile)
    before, head = refs(repo), main_commit(repo)
    refused = as_process(home)("quarantine", "retry", RUN, "--json", env=OWNER, timeout=60)
    assert refused.code == 3, refused.stderr
    result = json.loads(refused.stdout)
    assert result["source"] == "checkout"
    assert {(v["path"], v["rule"]) for v in result["violations"]} == {
        (f"records/vendors/passwd--{NS}_2.md", "symlink"),
        (f"records/vendors/fifo--{NS}_3.md", "special-file"),
    }
    assert refs(repo) == before and main_commit(repo) == head
    assert os.path.islink(home.run_checkout(RUN) / "records/vendors" / f"passwd--{NS}_2.md")

    # The ref holds only what the host could read: that lands, and the space goes.
    landed = cli("quarantine", "retry", RUN, "--from-ref", env=OWNER)
    assert landed.code == 0, landed.stdout + landed.stderr
    assert "from the ref" in landed.stdout
    assert f"records/vendors/acme--{NS}_1.md" in knowledge.tree_paths(repo)
    assert quarantine_ref(RUN) not in repo.references
    assert not home.run_space(RUN).exists()
    m = manifests.read(home, RUN)
    assert m.checkpoint == "integrated" and m.quarantine_ref is None
    assert [(r.kind, r.outcome, r.detail) for r in m.repairs] == [
        ("quarantine", "rejected", "checkout"),
        ("quarantine", "integrated", "ref"),
    ]


def test_a_quarantine_whose_checkout_is_gone_retries_from_its_ref(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    cli = Cli(home=home.root)

    def fine(root: Path) -> None:
        (root / "records" / "vendors").mkdir(parents=True)
        (root / "records" / "vendors" / f"acme--{NS}_1.md").write_bytes(
            knowledge.note_text(f"{NS}_1").encode()
        )

    quarantined(home, repo, fine)
    listed = json.loads(cli("quarantine", "list", "--json").stdout)
    assert [(r["run_id"], r["checkout_kept"]) for r in listed] == [(RUN, True)]
    shown = json.loads(cli("quarantine", "show", RUN, "--json").stdout)
    assert shown["reason"] == "timed out and killed" and shown["checkout_kept"] is True
    space = manifests.read(home, RUN).space
    assert space is not None
    runspace.release(space)
    assert json.loads(cli("quarantine", "list", "--json").stdout)[0]["checkout_kept"] is False
    landed = cli("quarantine", "retry", RUN, "--json", env=OWNER)
    assert landed.code == 0, landed.stdout + landed.stderr
    assert json.loads(landed.stdout)["source"] == "ref"
    assert f"records/vendors/acme--{NS}_1.md" in knowledge.tree_paths(repo)


def test_quarantine_export_writes_blobs_never_box_files_and_drop_removes_the_space(
    tmp_path: Path,
) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    cli = Cli(home=home.root)
    quarantined(home, repo, hostile)
    out = tmp_path / "export"
    exported = as_process(home)("quarantine", "export", RUN, str(out), env=OWNER, timeout=60)
    assert exported.code == 0, exported.stderr
    assert "exported 1 file(s) and 0 deletion(s)" in exported.stdout
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if not p.is_dir())
    assert files == ["export.json", f"files/records/vendors/acme--{NS}_1.md"]
    doc = json.loads((out / "export.json").read_text())
    assert {v["rule"] for v in doc["violations"]} == {"symlink", "special-file"}

    head = main_commit(repo)
    dropped = cli("quarantine", "drop", RUN, env=OWNER)
    assert dropped.code == 0, dropped.stderr
    assert "the kept checkout is removed" in dropped.stdout
    assert quarantine_ref(RUN) not in repo.references and main_commit(repo) == head
    assert not home.run_space(RUN).exists() and not home.run_checkout_record(RUN).exists()
    assert manifests.read(home, RUN).quarantine_ref is None
    assert cli("quarantine", "drop", RUN).code == 2


def test_a_kept_loop_image_is_mounted_read_only_to_retry_and_removed_after(
    tmp_path: Path,
) -> None:
    problem = loop_supported()
    if problem is not None:
        pytest.skip(f"loop spaces unavailable: {problem}")
    home, repo = knowledge.make_imp(tmp_path)
    cli = Cli(home=home.root)
    base = main_commit(repo)
    space = runspace.create(home, RUN, runspace.space_size(2**20), loop=True)
    try:
        root = home.run_checkout(RUN)
        (root / "records" / "vendors").mkdir(parents=True)
        (root / "records" / "vendors" / f"acme--{NS}_1.md").write_bytes(
            knowledge.note_text(f"{NS}_1").encode()
        )
        checkout = Checkout(kind="overlay", base=base, root=root)
        quarantine(repo, RUN, base, snapshot(repo, checkout, TIGHT), "killed")
        runspace.unmount(space)  # as a quarantined run keeps it
        write_manifest(
            home,
            base,
            checkpoint="quarantined",
            quarantine_ref=quarantine_ref(RUN),
            reason="killed",
            checkout=checkout,
            space=space,
        )
        landed = cli("quarantine", "retry", RUN, "--json", env=OWNER)
        assert landed.code == 0, landed.stdout + landed.stderr
        assert json.loads(landed.stdout)["source"] == "checkout"
        assert f"records/vendors/acme--{NS}_1.md" in knowledge.tree_paths(repo)
        assert not os.path.ismount(space.mount) and space.image is not None
        assert not space.image.exists()
    finally:
        runspace.release(space)


def test_repairs_refuse_an_unfinished_run_and_unknown_ids(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    cli = Cli(home=home.root)
    write_manifest(home, main_commit(repo)).model_copy()
    m = manifests.read(home, RUN)
    m.state = "running"
    manifests.write(home, m)
    quarantine(repo, RUN, main_commit(repo), Change(), "x")
    busy = cli("quarantine", "retry", RUN)
    assert busy.code == 1 and "not finished" in busy.stderr
    assert cli("quarantine", "show", "../../heads/main").code == 2
    assert cli("candidates", "show", RUN).code == 2


def test_diffs_are_bounded_and_name_deletions_and_binary_files(tmp_path: Path) -> None:
    from impyard.repair.compare import MAX_LINES_PER_FILE, against_main, diff_against_main

    _home, repo = knowledge.make_imp(tmp_path)
    long_text = "".join(f"line {n}\n" for n in range(MAX_LINES_PER_FILE * 2)).encode()
    change = knowledge.change_of(
        repo,
        {"organization/long.md": long_text, "organization/blob.bin": b"\x00\x01\x02"},
        deleted={"organization/README.md"},
    )
    statuses = {c.path: c.status for c in against_main(repo, change)}
    assert statuses == {
        "organization/long.md": "added",
        "organization/blob.bin": "added",
        "organization/README.md": "deleted",
    }
    shown = {f.path: f for f in diff_against_main(repo, change, "candidate").files}
    deleted = shown["organization/README.md"].text
    assert deleted.startswith("--- a/organization/README.md\n+++ /dev/null")
    assert shown["organization/blob.bin"].binary
    long = shown["organization/long.md"]
    assert long.truncated and long.text.endswith("more line(s) not shown")
    assert len(long.text.splitlines()) == MAX_LINES_PER_FILE + 1


def test_candidates_list_newest_first_across_imps(tmp_path: Path) -> None:
    home, _repo = knowledge.make_imp(tmp_path)
    create_imp(home, "abe")
    for n, imp in ((1, "yuko"), (3, "abe"), (2, "yuko")):
        reject_note(home, n, imp)
    cli = Cli(home=home.root)
    listed = json.loads(cli("candidates", "list", "--json").stdout)
    assert [(r["run_id"], r["imp"]) for r in listed] == [
        (run_id(3), "abe"),
        (run_id(2), "yuko"),
        (run_id(1), "yuko"),
    ]
    table = cli("candidates", "list").stdout
    shown = [run for run in (run_id(n) for n in (1, 2, 3)) if run in table]
    assert sorted(shown, key=table.index) == [run_id(3), run_id(2), run_id(1)]
