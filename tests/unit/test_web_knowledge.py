"""The console's knowledge pages over HTTP: main's tree and history with trailers as
fields, a note with its frontmatter, provenance and trust, and everything an agent (or
anyone with a commit) wrote shown as text, never as markup."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest

from impyard.common.textcap import marker
from impyard.gateway.provenance.receipts import Receipt
from impyard.home import Home
from impyard.knowledge.imps import open_repo
from impyard.web.pages.commitview import SUMMARY_CHARS, TRAILERS
from tests.helpers.cli import Cli
from tests.helpers.hostile import IMG, MESSAGE, SCRIPT, commit_files, commit_hostile_note
from tests.helpers.repo import note_path
from tests.helpers.web import console_for, log_in
from tests.unit.test_provenance_cli import landed

__all__ = ["landed"]  # the fixture: a note landed citing one receipt


@pytest.fixture
def home(cli: Cli) -> Cli:
    assert cli("init").code == 0
    assert cli("imp", "create", "yuko").code == 0
    return cli


def test_a_hostile_note_renders_as_text(home: Cli, tmp_path: Path) -> None:
    path = commit_hostile_note(Home(home.home), "yuko", tmp_path / "work")
    console, client = console_for(home.home)
    log_in(console, client)
    pages = [
        client.get("/knowledge/yuko"),
        client.get("/knowledge/yuko", params={"path": "records/vendors"}),
        client.get("/knowledge/yuko/note", params={"path": path}),
    ]
    for page in pages:
        assert page.status_code == 200, page.text
        assert SCRIPT not in page.text and IMG not in page.text
        assert "onerror=window" not in page.text.replace("onerror=window.__pwned=2&gt;", "")
    tree, folder, note = (p.text for p in pages)
    assert "owner: &lt;script&gt;window.__pwned=1&lt;/script&gt;" in tree
    assert "&lt;img src=x onerror=window.__pwned=2&gt;" in folder
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;\n&lt;img src=x" in note
    assert 'href="javascript' not in note and "javascript:alert(1)" in note
    link = 'href="https://example.com/&lt;script&gt;window.__pwned=1&lt;/script&gt;"'
    assert f'{link} rel="noopener noreferrer"' in note
    assert "no fetched source" in note
    assert MESSAGE not in tree


def test_history_shows_trailers_as_fields_and_a_missing_note_is_404(home: Cli) -> None:
    console, client = console_for(home.home)
    log_in(console, client)
    tree = client.get("/knowledge/yuko").text
    assert 'id="history"' in tree and "README.md" in tree
    assert client.get("/knowledge/yuko/note", params={"path": "nope.md"}).status_code == 404
    assert client.get("/knowledge/NotAnImp").status_code == 404
    assert client.get("/knowledge/yuko", params={"path": "../../etc"}).status_code == 404
    assert 'href="/knowledge/yuko"' in client.get("/knowledge").text


def test_a_note_shows_its_receipts_and_trust_as_the_cli_does(
    landed: tuple[Cli, Receipt, str],
) -> None:
    cli, receipt, commit = landed
    console, client = console_for(cli.home)
    log_in(console, client)
    page = client.get("/knowledge/yuko/note", params={"path": note_path()}).text
    shown = cli("knowledge", "provenance", "yuko", note_path())
    assert "trust    1 independent source" in shown.stdout
    assert '<dd id="trust">1 independent source (distinct hosts' in page
    assert receipt.sha256 in page and commit[:12] in page and receipt.ended_at in page


def test_a_huge_commit_message_on_main_is_shown_cut_saying_how_much(home: Cli) -> None:
    """A commit the lane did not write (an owner's, or one a restore let through) may
    carry a summary of megabytes and hundreds of long trailers: the history shows a
    bounded part of each, and says how much it cut."""
    repo = open_repo(Home(home.home), "yuko")
    summary = "A" * 3_000_000
    trailers = "\n".join(f"Key-{n}: {'v' * 100_000}" for n in range(100))
    when = pygit2.Signature("owner", "owner@example.invalid")
    head = repo.references["refs/heads/main"]
    parent = head.peel(pygit2.Commit)
    oid = repo.create_commit(
        None, when, when, f"{summary}\n\n{trailers}\n", parent.tree.id, [parent.id]
    )
    head.set_target(oid)
    console, client = console_for(home.home)
    log_in(console, client)

    page = client.get("/knowledge/yuko")
    assert page.status_code == 200
    assert len(page.content) < 200_000, len(page.content)
    assert f"[cut {3_000_000 - SUMMARY_CHARS + len(marker(3_000_000)):,} characters]" in (page.text)
    assert f"{100 - TRAILERS} more trailers not shown" in page.text


def test_only_records_get_frontmatter_warnings(home: Cli, tmp_path: Path) -> None:
    bare = "records/vendors/acme--n_0123456789ab_1.md"
    commit_files(Home(home.home), "yuko", tmp_path / "work", {bare: "no frontmatter\n"}, "bare")
    console, client = console_for(home.home)
    log_in(console, client)
    warning = "the file must start with a &#39;---&#39; frontmatter line"
    for prose in ("README.md", "records/README.md", "organization/README.md"):
        page = client.get("/knowledge/yuko/note", params={"path": prose})
        assert page.status_code == 200 and "# " in page.text
        assert 'class="reasons"' not in page.text and warning not in page.text, prose
    record = client.get("/knowledge/yuko/note", params={"path": bare}).text
    assert f'<ul class="reasons"><li class="warn">{warning}</li></ul>' in record
