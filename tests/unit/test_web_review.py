"""The console's review queue over HTTP: a refused change is listed with its reasons and
diff, each action shows its preview first, refuses a POST without the CSRF token, and
does what the CLI's command does, recorded as done by ``web``."""

from __future__ import annotations

import json
from pathlib import Path

import pygit2
import pytest

from impyard.home import Home
from impyard.knowledge.integration.lane import candidate_ref
from impyard.queue import tasks
from impyard.queue.db import opened
from impyard.runs.provision.rework import NEW_NAMESPACE
from impyard.runs.records import manifest as manifests
from tests.helpers.cli import Cli
from tests.helpers.repo import NS, RUN, note_path, note_text
from tests.helpers.web import console_for, log_in
from tests.unit.test_repair import LONG_BODY, deploy, refs, rejected_candidate, set_max_file_chars

HOSTILE_NAME = note_path(slug="x<img src=x onerror=alert(1)>")


@pytest.fixture
def refused(tmp_path: Path) -> tuple[Home, pygit2.Repository, Cli]:
    from tests.helpers.repo import make_imp

    home, repo = make_imp(tmp_path)
    cli = Cli(home=home.root)
    set_max_file_chars(home, 300)
    deploy(cli)
    text = note_text(f"{NS}_1", body=LONG_BODY + "<script>window.__pwned=1</script>\n")
    rejected_candidate(home, repo, {note_path(): text.encode()})
    home.run_task(RUN).write_text("Find vendors.\n")
    return home, repo, cli


def journal_bytes(home: Home) -> bytes:
    return home.journal.read_bytes() if home.journal.exists() else b""


def queued(home: Home) -> list[tasks.Task]:
    with opened(home.db) as conn:
        return tasks.list_tasks(conn)


def test_a_refused_change_is_listed_with_its_reasons_and_diff(
    refused: tuple[Home, pygit2.Repository, Cli],
) -> None:
    home, _, _ = refused
    console, client = console_for(home.root)
    log_in(console, client)
    queue = client.get("/review").text
    assert f'href="/review/candidate/{RUN}"' in queue and "file-too-large" in queue
    item = client.get(f"/review/candidate/{RUN}").text
    assert f"{note_path()}</code>: file-too-large:" in item
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in item
    assert "<script>window" not in item
    for action in ("retry", "drop", "rework", "export"):
        assert f'href="/review/candidate/{RUN}/{action}"' in item


def test_each_action_previews_its_dry_run(
    refused: tuple[Home, pygit2.Repository, Cli],
) -> None:
    home, repo, cli = refused
    console, client = console_for(home.root)
    log_in(console, client)
    before = (dict(refs(repo)), home.manifest(RUN).read_bytes(), journal_bytes(home))
    retry = client.get(f"/review/candidate/{RUN}/retry").text
    assert "Dry run: would be rejected (checkpoint 1, from the ref): 1 violation(s)" in retry
    assert f"<code>{note_path()}</code>: file-too-large:" in retry
    drop = client.get(f"/review/candidate/{RUN}/drop").text
    commit = str(repo.lookup_reference(candidate_ref(RUN)).target)
    assert f"Deletes {candidate_ref(RUN)} ({commit[:12]}); main is untouched." in drop
    assert (
        f"Dry run: would delete <code>{candidate_ref(RUN)}</code> (<code>{commit}</code>)" in drop
    )
    rework = client.get(f"/review/candidate/{RUN}/rework").text
    assert "Dry run: would queue a task for imp yuko (mode append, attempt 1)" in rework
    assert f"- {note_path(NEW_NAMESPACE)}: file-too-large:" in rework
    assert "The owner&#39;s note" not in rework
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in rework
    assert "<script>window" not in rework
    noted = client.get(f"/review/candidate/{RUN}/rework", params={"note": "Keep <b>it</b> short"})
    assert "&gt; Keep &lt;b&gt;it&lt;/b&gt; short" in noted.text
    assert 'name="note" value="Keep &lt;b&gt;it&lt;/b&gt; short"' in noted.text
    assert (dict(refs(repo)), home.manifest(RUN).read_bytes(), journal_bytes(home)) == before

    set_max_file_chars(home, 1000)
    deploy(cli)
    retry = client.get(f"/review/candidate/{RUN}/retry").text
    assert "Dry run: would land as checkpoint 1 (from the ref): 1 file(s) written" in retry
    assert f"<li>write <code>{note_path()}</code></li>" in retry
    assert candidate_ref(RUN) in repo.references, "a preview changes nothing"


def test_a_retry_that_would_be_rejected_is_off_and_lists_each_reason_once(
    refused: tuple[Home, pygit2.Repository, Cli],
) -> None:
    home, _, cli = refused
    console, client = console_for(home.root)
    csrf = log_in(console, client)
    retry = client.get(f"/review/candidate/{RUN}/retry").text
    assert "Dry run: would be rejected" in retry
    assert '<button type="submit" disabled>Retry</button>' in retry
    assert retry.count("exceeds max_file_chars (300)") == 1, "one list of the reasons"
    assert "`" not in retry and "then <code>impyard deploy</code>)" in retry
    done = client.post(f"/review/candidate/{RUN}/retry", data={"csrf": csrf}).text
    assert "`" not in done and "<code>impyard deploy</code>" in done
    set_max_file_chars(home, 1000)
    deploy(cli)
    retry = client.get(f"/review/candidate/{RUN}/retry").text
    assert '<button type="submit">Retry</button>' in retry
    assert retry.count("exceeds max_file_chars (300)") == 1, "why it was refused"


def test_the_rework_preview_names_the_new_runs_namespace_where_it_says_so(
    refused: tuple[Home, pygit2.Repository, Cli],
) -> None:
    home, _, _ = refused
    console, client = console_for(home.root)
    log_in(console, client)
    rework = client.get(f"/review/candidate/{RUN}/rework").text
    task = rework.split('id="task-text">')[1].split("</pre>")[0]
    assert f"renamed into your namespace {NEW_NAMESPACE} where" in task
    assert f"- {note_path(NEW_NAMESPACE)} (was {note_path()})" in task
    assert NS not in task.replace(f"(was {note_path()})", "")
    assert f"<code>{NEW_NAMESPACE}</code> stands for the new run's namespace" in rework


def test_a_rework_is_queued_from_the_console_as_web_with_its_note(
    refused: tuple[Home, pygit2.Repository, Cli],
) -> None:
    home, _repo, _ = refused
    console, client = console_for(home.root)
    csrf = log_in(console, client)
    item = client.get(f"/review/candidate/{RUN}").text
    assert f'href="/review/candidate/{RUN}/rework"' in item
    forged = client.post(f"/review/candidate/{RUN}/rework", data={"note": "x"})
    assert forged.status_code == 403
    assert queued(home) == [] and manifests.read(home, RUN).repairs == []
    note = "Shorten it."
    done = client.post(f"/review/candidate/{RUN}/rework", data={"csrf": csrf, "note": note})
    assert done.status_code == 200, done.text
    [task] = queued(home)
    assert f"queued <code>{task.id}</code>: rework of {RUN} (attempt 1)" in done.text
    assert task.rework is not None and task.rework["note"] == note
    [record] = manifests.read(home, RUN).repairs
    assert (record.action, record.by, record.detail) == ("rework", "web", task.id)
    events = [json.loads(line) for line in home.journal.read_text().splitlines()]
    assert [(e["by"], e["task"]) for e in events if e["event"] == "task.rework_queued"] == [
        ("web", task.id)
    ]


def test_a_retry_is_refused_without_csrf_and_lands_after_a_policy_change(
    refused: tuple[Home, pygit2.Repository, Cli],
) -> None:
    home, repo, cli = refused
    console, client = console_for(home.root)
    csrf = log_in(console, client)
    assert client.post(f"/review/candidate/{RUN}/retry", data={}).status_code == 403
    assert manifests.read(home, RUN).repairs == []
    again = client.post(f"/review/candidate/{RUN}/retry", data={"csrf": csrf})
    assert again.status_code == 200
    assert "rejected" in again.text and "file-too-large" in again.text
    set_max_file_chars(home, 1000)
    deploy(cli)
    landed = client.post(f"/review/candidate/{RUN}/retry", data={"csrf": csrf})
    assert "integrated" in landed.text
    assert candidate_ref(RUN) not in repo.references
    m = manifests.read(home, RUN)
    assert [(r.action, r.by, r.outcome) for r in m.repairs] == [
        ("retry", "web", "rejected"),
        ("retry", "web", "integrated"),
    ]
    events = [json.loads(line) for line in home.journal.read_text().splitlines()]
    retried = [e for e in events if e["event"] == "repair.retried"]
    assert [(e["by"], e["outcome"]) for e in retried] == [
        ("web", "rejected"),
        ("web", "integrated"),
    ]
    assert "Nothing waits for review" in client.get("/review").text


def test_drop_and_export_from_the_console(
    refused: tuple[Home, pygit2.Repository, Cli],
) -> None:
    home, repo, _ = refused
    console, client = console_for(home.root)
    csrf = log_in(console, client)
    exported = client.post(f"/review/candidate/{RUN}/export", data={"csrf": csrf})
    assert exported.status_code == 200 and "exported to" in exported.text
    written = list(home.exports_dir.glob(f"{RUN}/*/files/{note_path()}"))
    assert len(written) == 1
    dropped = client.post(f"/review/candidate/{RUN}/drop", data={"csrf": csrf})
    assert f"dropped {candidate_ref(RUN)}" in dropped.text
    assert candidate_ref(RUN) not in repo.references
    gone = client.post(f"/review/candidate/{RUN}/drop", data={"csrf": csrf})
    assert gone.status_code == 409 and "Refused:" in gone.text
    by = [(r.action, r.by) for r in manifests.read(home, RUN).repairs]
    assert by == [("export", "web"), ("drop", "web")]
