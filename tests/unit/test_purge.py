"""``knowledge purge`` against a data root and a local backup remote (no Docker): a string
planted in three commits, a candidate, a quarantine, a box log, a task file, the queue,
the journal and a backup is nowhere afterwards (scanned without Impyard's code), the
preview's counts are the purge's, every repository passes ``git fsck --strict``, and a
source purge keeps a record that rests on other sources too, naming it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pygit2
import pytest

from impyard.backup.sync import backup_imp
from impyard.home import Home
from impyard.journal.log import Journal
from impyard.knowledge.integration.lane import candidate_ref
from impyard.knowledge.integration.quarantine import quarantine, quarantine_ref
from impyard.knowledge.store.repo import main_commit
from impyard.purge.purge import purge
from impyard.purge.selector import Selector
from impyard.queue import tasks
from impyard.queue.db import opened
from tests.helpers import repo as knowledge
from tests.helpers.backup import set_remotes
from tests.helpers.cli import Cli
from tests.helpers.repo import namespace, run_id
from tests.helpers.runs import write_run
from tests.helpers.scan import fsck, holders

SECRET = "sk-live-4f9a2c"


def land(home: Home, repo: pygit2.Repository, n: int, body: str, **note: object) -> str:
    base = main_commit(repo)
    ns = namespace(n)
    text = knowledge.note_text(f"{ns}_1", body=body, **note)  # type: ignore[arg-type]
    result = knowledge.integrate_change(
        home,
        knowledge.change_of(repo, {knowledge.note_path(ns, 1, slug=f"n{n}"): text.encode()}),
        base,
        ns=ns,
        run=run_id(n),
    )
    assert result.checkpoint == "integrated", result
    return knowledge.note_path(ns, 1, slug=f"n{n}")


def a_run(home: Home, n: int, **fields: object) -> str:
    """A run record of run ``n`` (finished, unless ``state`` says otherwise)."""
    write_run(home, run_id(n), namespace=namespace(n), **({"state": "finished"} | fields))
    return run_id(n)


@pytest.fixture
def leaked(tmp_path: Path) -> tuple[Home, pygit2.Repository, Path]:
    home, repo = knowledge.make_imp(tmp_path)
    for n in (1, 2, 3):
        land(home, repo, n, f"The key is {SECRET}.\n")
    land(home, repo, 4, "Acme ships SSO.\n")
    base = main_commit(repo)
    refused = knowledge.integrate_change(
        home,
        knowledge.change_of(repo, {"README.md": f"mine {SECRET}\n".encode()}),
        base,
        ns=namespace(5),
        run=run_id(5),
    )
    assert refused.candidate_ref == candidate_ref(run_id(5))
    a_run(home, 5, checkpoint="rejected", candidate_ref=refused.candidate_ref)
    home.run_task(run_id(5)).write_text("Find vendors.\n")
    note = knowledge.note_text(f"{namespace(6)}_1", body=f"{SECRET}\n").encode()
    quarantine(
        repo,
        run_id(6),
        base,
        knowledge.change_of(repo, {knowledge.note_path(namespace(6)): note}),
        "died",
    )
    a_run(home, 6, checkpoint="quarantined", quarantine_ref=quarantine_ref(run_id(6)))
    logged = a_run(home, 7, checkpoint="empty")
    home.box_log(logged).write_text(f"agent: found {SECRET} in the page\n")
    home.run_task(logged).write_text(f"Research {SECRET}\n")
    Journal(home.journal).record("note.seen", text=f"quoted: {SECRET}")
    rotated = json.dumps({"event": "note.seen", "text": SECRET}) + "\n"
    (home.root / "journal.1.jsonl.gz").write_bytes(gzip.compress(rotated.encode()))
    with opened(home.db) as conn:
        tasks.add(conn, "yuko", f"Look up {SECRET} again")
    remote = tmp_path / "backups"
    set_remotes(home, [str(remote)])
    assert all(result.ok for result in backup_imp(home, "yuko"))
    return home, repo, remote


def test_a_purged_string_is_nowhere_and_the_preview_counted_it_right(
    leaked: tuple[Home, pygit2.Repository, Path],
) -> None:
    home, repo, remote = leaked
    needle = SECRET.encode()
    everywhere = holders(home.root, needle)
    assert any(h.endswith("(objects)") for h in everywhere) and "journal.jsonl" in everywhere
    assert holders(remote, needle)

    preview = purge(home, "yuko", Selector("text", SECRET), dry_run=True)
    assert holders(home.root, needle) == everywhere  # a preview changes nothing
    assert preview.counts()["commits"] >= 5 and preview.counts()["files"] == 5
    done = purge(home, "yuko", Selector("text", SECRET))
    assert done.counts() == preview.counts()
    assert done.complete, done.as_dict()

    assert holders(home.root, needle) == []
    assert holders(remote, needle) == []
    repo = pygit2.Repository(repo.path)
    for git_dir in (home.repo("yuko"), home.origin("yuko"), remote / "yuko.git"):
        assert fsck(git_dir) == "", git_dir
    # The clean note and the refs stay; the journal says what was done, not what it was.
    assert knowledge.note_path(namespace(4), 1, slug="n4") in knowledge.tree_paths(repo)
    assert {candidate_ref(run_id(5)), quarantine_ref(run_id(6))} <= set(repo.references)
    events = [json.loads(line) for line in home.journal.read_text().splitlines()]
    [purged] = [e for e in events if e["event"] == "knowledge.purged"]
    assert purged["selector"] == f"text ({len(SECRET)} characters)" and purged["complete"]
    assert "[purged]" in home.box_log(run_id(7)).read_text()
    rotated_back = gzip.decompress((home.root / "journal.1.jsonl.gz").read_bytes())
    assert json.loads(rotated_back) == {"event": "note.seen", "text": "[purged]"}
    # A candidate built on the old history is refused with why, and can be reworked.
    cli = Cli(home=home.root)
    retried = cli("candidates", "retry", run_id(5))
    assert retried.code != 0 and "gone from the history" in retried.stderr, retried.stderr
    assert cli("candidates", "rework", run_id(5), "--dry-run").code == 0


def test_a_source_purge_keeps_and_names_a_record_resting_on_other_sources(
    tmp_path: Path,
) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    leak = "https://leak.example/paste"
    only = land(home, repo, 1, "From the paste.\n", urls=[leak])
    both = land(home, repo, 2, "From both.\n", urls=[leak, "https://example.com/report"])
    other = land(home, repo, 3, "Unrelated.\n")
    preview = purge(home, "yuko", Selector("source", leak), dry_run=True)
    assert (preview.paths, preview.not_cleared) == ([only], [both])
    done = purge(home, "yuko", Selector("source", leak))
    assert done.counts() == preview.counts()
    paths = knowledge.tree_paths(pygit2.Repository(repo.path))
    assert only not in paths and {both, other} <= paths


def test_a_run_purge_removes_what_the_run_wrote_and_its_refs(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    wrote = land(home, repo, 1, "Run one's note.\n")
    kept = land(home, repo, 2, "Run two's note.\n")
    a_run(home, 1, checkpoint="integrated")
    home.box_log(run_id(1)).write_text("run one's log\n")
    done = purge(home, "yuko", Selector("run", run_id(1)))
    assert done.paths == [wrote] and [f.path for f in done.files] == [f"runs/{run_id(1)}/box.log"]
    paths = knowledge.tree_paths(pygit2.Repository(repo.path))
    assert wrote not in paths and kept in paths
    assert fsck(home.repo("yuko")) == ""


def test_purge_refuses_while_a_run_of_the_imp_is_unfinished(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    land(home, repo, 1, f"{SECRET}\n")
    a_run(home, 2, state="running")
    refused = Cli(home=home.root)("knowledge", "purge", "yuko", "--text", SECRET)
    assert refused.code != 0 and "has not finished" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert holders(home.root, SECRET.encode())  # nothing was touched


def test_the_console_previews_a_purge_with_the_purges_own_counts(
    leaked: tuple[Home, pygit2.Repository, Path],
) -> None:
    from tests.helpers.web import console_for, log_in

    home, _, _ = leaked
    console, client = console_for(home.root)
    csrf = log_in(console, client)
    assert 'href="/knowledge/yuko/purge"' in client.get("/knowledge/yuko").text
    assert 'id="purge-form"' in client.get("/knowledge/yuko/purge").text
    form = {"kind": "text", "value": SECRET}
    assert client.post("/knowledge/yuko/purge", data=form).status_code == 403
    page = client.post("/knowledge/yuko/purge", data=form | {"csrf": csrf}).text
    c = purge(home, "yuko", Selector("text", SECRET), dry_run=True).counts()
    assert f"would remove {c['files']} file version(s) at {c['paths']} path(s) from " in page
    assert f"{c['commits']} commit(s)" in page
    assert "impyard knowledge purge yuko --text -" in page
    assert SECRET not in page  # the text is not echoed back
    assert holders(home.root, SECRET.encode())  # nothing changed
    bad = client.post("/knowledge/yuko/purge", data={"kind": "text", "value": "ab", "csrf": csrf})
    assert "Refused: --text needs at least 4 characters" in bad.text
