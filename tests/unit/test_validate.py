"""validate(): every rule, each rejection naming its path and rule, all listed together."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest

from impyard.common.errors import KnowledgeError
from impyard.knowledge.change import RULES, Change, KnowledgeLimits, Mode, Violation
from impyard.knowledge.store.repo import main_commit
from impyard.knowledge.validation.sizes import tree_bytes
from impyard.knowledge.validation.validate import (
    INSTRUCTION_FILES,
    is_storable_path,
    path_violations,
    validate,
)
from tests.helpers.repo import (
    NS,
    OTHER_NS,
    change_of,
    make_imp,
    note,
    note_path,
    note_text,
)

LIMITS = KnowledgeLimits()


@pytest.fixture
def repo(tmp_path: Path) -> pygit2.Repository:
    return make_imp(tmp_path)[1]


def check(
    repo: pygit2.Repository,
    change: Change,
    mode: Mode = "append",
    limits: KnowledgeLimits = LIMITS,
) -> set[tuple[str, str]]:
    found = validate(repo, main_commit(repo), change, namespace=NS, mode=mode, limits=limits)
    for v in found:
        assert v.rule in RULES, v
        assert v.message
    return {(v.path, v.rule) for v in found}


def test_a_valid_append_change_has_no_violations(repo: pygit2.Repository) -> None:
    files = dict([note(NS, 1), note(NS, 2, topic="papers", slug="x-2"), note(NS, 10)])
    assert check(repo, change_of(repo, files)) == set()


def test_a_valid_reorganize_change_has_no_violations(repo: pygit2.Repository) -> None:
    change = change_of(
        repo,
        {
            "organization/README.md": b"# new index\n",
            "organization/topics/vendors.md": b"- a\n",
            **dict([note(NS, 1)]),
        },
    )
    assert check(repo, change, mode="reorganize") == set()
    assert check(repo, change_of(repo, deleted={"organization/README.md"}), "reorganize") == set()


@pytest.mark.parametrize(
    ("path", "data", "rule"),
    [
        ("records/README.md", b"changed\n", "modified-existing"),
        ("organization/index.md", b"x\n", "organization-in-append"),
        ("README.md", b"mine now\n", "protected-path"),
        ("notes.md", b"x\n", "protected-path"),
        ("records", b"x\n", "protected-path"),
        ("src/x.py", b"x\n", "protected-path"),
        (note_path(OTHER_NS), note_text(f"{OTHER_NS}_1").encode(), "namespace"),
        ("records/vendors/acme--n_zz_1.md", note_text(f"{NS}_1").encode(), "namespace"),
        (f"records/vendors/acme--{NS}_01.md", note_text(f"{NS}_1").encode(), "bad-record-name"),
        ("records/vendors/acme.md", b"x\n", "bad-record-name"),
        (f"records/a/b/acme--{NS}_1.md", note_text(f"{NS}_1").encode(), "bad-record-name"),
        (note_path(), b"no frontmatter\n", "frontmatter"),
        (note_path(), note_text(f"{OTHER_NS}_1").encode(), "frontmatter"),
        (note_path(), note_text("../../x").encode(), "path-escape"),
        (note_path(), b"\xff\xfe bad", "not-utf8-text"),
        (note_path(), b"---\x00binary", "not-utf8-text"),
        (note_path(), note_text(f"{NS}_1", body="ghp_" + "a" * 36).encode(), "credential"),
        ("records/.hidden/x.md", b"x", "hidden-path"),
        ("records/t/.x.md", b"x", "hidden-path"),
        (".git/config", b"x", "git-metadata"),
        ("records/.GIT/config", b"x", "git-metadata"),
        ("records/.git /config", b"x", "git-metadata"),
        ("records/.git./hooks/pre-commit", b"x", "git-metadata"),
        ("records/.gitmodules", b"x", "git-metadata"),
        ("records/GIT~1/x", b"x", "git-metadata"),
        ("records/.g\u200cit/x", b"x", "git-metadata"),
        ("records/t/AGENTS.md", b"x", "instruction-file"),
        ("organization/claude.md", b"x", "instruction-file"),
        ("records/t/Gemini.MD", b"x", "instruction-file"),
        ("records/.cursorrules", b"x", "instruction-file"),
        ("records/.github/copilot-instructions.md", b"x", "instruction-file"),
        ("records/t/copilot-instructions.md", b"x", "instruction-file"),
        ("organization/topics/CONTEXT.md", b"x", "instruction-file"),
        ("organization/opencode.json", b"x", "instruction-file"),
        ("records/t/x\n.md", b"x", "bad-name"),
        ("records/../x.md", b"x", "path-escape"),
        ("/records/x.md", b"x", "path-escape"),
        ("records//x.md", b"x", "path-escape"),
    ],
)
def test_each_rule_names_its_path(
    repo: pygit2.Repository, path: str, data: bytes, rule: str
) -> None:
    assert (path, rule) in check(repo, change_of(repo, {path: data}))


def messages(repo: pygit2.Repository, change: Change) -> dict[tuple[str, str], str]:
    found = validate(repo, main_commit(repo), change, namespace=NS, mode="append", limits=LIMITS)
    return {(v.path, v.rule): v.message for v in found}


def test_a_bad_name_does_not_hide_the_other_faults_of_the_file(repo: pygit2.Repository) -> None:
    path = f"records/Linux FS/mounts--{NS}_1.md"
    text = note_text(f"{NS}_1").replace("created_at:", "title: Mounts\ncreated_at:")
    found = messages(repo, change_of(repo, {path: text.encode()}))
    assert set(found) == {(path, "bad-record-name"), (path, "frontmatter")}
    said = found[path, "bad-record-name"]
    assert "the topic 'Linux FS' has upper case and a space" in said, said
    assert f"expected records/<topic>/<slug>--{NS}_<n>.md" in said, said
    assert "'title'" in found[path, "frontmatter"]


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        (f"records/vendors/Acme--{NS}_1.md", "the slug 'Acme' has upper case"),
        (f"records/vendors/acme sso--{NS}_1.md", "the slug 'acme sso' has a space"),
        ("records/vendors/acme.md", "no namespace suffix"),
        ("records/vendors/acme--v2.md", "the suffix 'v2' after '--' is not the namespace"),
        (f"records/vendors/acme--{NS}_01.md", "the number '01' starts with 0 (write 1)"),
        (f"records/vendors/acme--{NS}_1.txt", "the extension '.txt' is not '.md'"),
        (f"records/vendors/acme--{NS}_1.MD", "the extension '.MD' is not lowercase '.md'"),
        (f"records/vendors/acme--{NS}_1", "no '.md' extension"),
        (f"records/acme--{NS}_1.md", "not in a topic directory"),
        (f"records/a/b/acme--{NS}_1.md", "2 directories deep"),
        (f"records/vendors/acme_x--{NS}_1.md", "the slug 'acme_x' has '_'"),
    ],
)
def test_a_bad_record_name_says_which_part_is_wrong(
    repo: pygit2.Repository, path: str, fragment: str
) -> None:
    data = note_text(f"{NS}_1").encode()
    said = messages(repo, change_of(repo, {path: data}))[path, "bad-record-name"]
    assert fragment in said, said
    assert f"records/<topic>/<slug>--{NS}_<n>.md" in said, said


def test_a_foreign_namespace_and_a_bad_name_are_both_listed(repo: pygit2.Repository) -> None:
    path = f"records/Vendors/acme--{OTHER_NS}_1.md"
    found = messages(repo, change_of(repo, {path: note_text(f"{OTHER_NS}_1").encode()}))
    # The file name's own id is not this run's, so the frontmatter id is not compared.
    assert set(found) == {(path, "namespace"), (path, "bad-record-name")}
    assert "Vendors" in found[path, "bad-record-name"]
    assert OTHER_NS not in found[path, "bad-record-name"]


def test_executable_record_is_refused(repo: pygit2.Repository) -> None:
    path, data = note()
    assert check(repo, change_of(repo, {path: (data, True)})) == {(path, "executable")}


def test_chmod_of_an_existing_record(repo: pygit2.Repository) -> None:
    blob = repo[main_commit(repo)].tree["records/README.md"]
    change = change_of(repo, {"records/README.md": (blob.data, True)})
    assert check(repo, change) == {
        ("records/README.md", "modified-existing"),
        ("records/README.md", "executable"),
    }


@pytest.mark.parametrize(
    ("path", "mode", "rule"),
    [
        ("records/README.md", "append", "deleted-existing"),
        ("records/README.md", "reorganize", "deleted-existing"),
        ("organization/README.md", "append", "organization-in-append"),
        ("README.md", "reorganize", "protected-path"),
    ],
)
def test_deletions(repo: pygit2.Repository, path: str, mode: Mode, rule: str) -> None:
    assert check(repo, change_of(repo, deleted={path}), mode=mode) == {(path, rule)}


def test_reorganize_still_protects_existing_records(repo: pygit2.Repository) -> None:
    change = change_of(repo, {"records/README.md": b"x\n"})
    assert check(repo, change, mode="reorganize") == {("records/README.md", "modified-existing")}


def test_duplicate_ids_within_a_run(repo: pygit2.Repository) -> None:
    a = note_path(NS, 3, topic="a")
    b = note_path(NS, 3, topic="b")
    text = note_text(f"{NS}_3").encode()
    found = check(repo, change_of(repo, {a: text, b: text}))
    assert found == {(b, "duplicate-id")}


def test_file_size_in_characters_and_bytes(repo: pygit2.Repository) -> None:
    header = len(note_text(f"{NS}_1", body=""))
    limits = KnowledgeLimits(max_file_chars=header + 20)
    path = note_path()
    ok = note_text(f"{NS}_1", body="é" * 20).encode()  # multibyte: characters count, not bytes
    assert len(ok) > limits.max_file_chars
    assert check(repo, change_of(repo, {path: ok}), limits=limits) == set()
    long = note_text(f"{NS}_1", body="x" * 21).encode()
    assert check(repo, change_of(repo, {path: long}), limits=limits) == {(path, "file-too-large")}


def test_oversize_files_are_not_read(repo: pygit2.Repository) -> None:
    limits = KnowledgeLimits(max_file_chars=10)
    change = change_of(repo, {note_path(): b"x" * 41})
    # a blob id that is not in the odb proves the content was never looked up
    state = change.written[note_path()]
    change.written[note_path()] = type(state)(blob="0" * 40, size=state.size, executable=False)
    assert check(repo, change, limits=limits) == {(note_path(), "file-too-large")}


def test_repository_size_limit(repo: pygit2.Repository) -> None:
    base_bytes = tree_bytes(repo, main_commit(repo))
    path, data = note()
    limits = KnowledgeLimits(max_repo_bytes=base_bytes + len(data) - 1)
    assert check(repo, change_of(repo, {path: data}), limits=limits) == {(".", "repo-too-large")}
    roomy = KnowledgeLimits(max_repo_bytes=base_bytes + len(data))
    assert check(repo, change_of(repo, {path: data}), limits=roomy) == set()


def test_snapshot_problems_are_violations_as_is(repo: pygit2.Repository) -> None:
    problem = Violation("records/t/link.md", "symlink", "a symlink")
    change = Change(problems=[problem])
    assert validate(
        repo, main_commit(repo), change, namespace=NS, mode="append", limits=LIMITS
    ) == [problem]


def test_file_and_directory_clash(repo: pygit2.Repository) -> None:
    assert ("README.md", "collision") in check(repo, change_of(repo, {"README.md/x": b"x"}))


def test_every_violation_is_listed_together(repo: pygit2.Repository) -> None:
    good = note(NS, 1)
    change = change_of(
        repo,
        {
            good[0]: good[1],
            "README.md": b"x",
            "organization/AGENTS.md": b"x",
            note_path(OTHER_NS, 2): note_text(f"{OTHER_NS}_2").encode(),
            note_path(NS, 3): (b"\xff", True),
        },
        deleted={"records/README.md"},
    )
    change.problems.append(Violation("records/fifo", "special-file", "a fifo"))
    found = check(repo, change)
    assert found == {
        ("README.md", "protected-path"),
        ("organization/AGENTS.md", "instruction-file"),
        ("organization/AGENTS.md", "organization-in-append"),
        (note_path(OTHER_NS, 2), "namespace"),
        (note_path(NS, 3), "executable"),
        (note_path(NS, 3), "not-utf8-text"),
        ("records/README.md", "deleted-existing"),
        ("records/fifo", "special-file"),
    }


def test_unknown_base_is_a_knowledge_error(repo: pygit2.Repository) -> None:
    with pytest.raises(KnowledgeError, match="base commit"):
        validate(repo, "1" * 40, Change(), namespace=NS, mode="append", limits=LIMITS)


@pytest.mark.parametrize("name", sorted(INSTRUCTION_FILES))
def test_every_instruction_file_is_refused_in_any_case(name: str) -> None:
    for variant in (name, name.upper(), name + ".", name + " "):
        rules = {v.rule for v in path_violations(f"organization/x/{variant}")}
        assert "instruction-file" in rules, variant
        assert not is_storable_path(f"organization/x/{variant}")


def test_ordinary_paths_are_storable() -> None:
    assert is_storable_path(note_path())
    assert is_storable_path("organization/topics/agents-of-change.md")
