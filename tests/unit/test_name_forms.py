"""The per-tree index of names by form that name-clash checks use: carried over from a
directory's previous version by the lane, it equals the index built from scratch."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from impyard.knowledge.change import KnowledgeLimits
from impyard.knowledge.imps import open_repo
from impyard.knowledge.store.repo import main_commit
from impyard.knowledge.validation import clashes
from impyard.knowledge.validation.clashes import carry_name_forms
from impyard.knowledge.validation.pathnames import normalize_segment
from impyard.knowledge.validation.validate import validate
from tests.helpers.repo import change_of, integrate_change, make_imp, namespace, run_id

NAMES = ["a.md", "A.md", "b.md", "B.MD", "\u00e9.md", "e\u0301.md", "c", "C", "d", "d."]


def tree_of(repo: pygit2.Repository, names: set[str]) -> pygit2.Tree:
    builder = repo.TreeBuilder()
    blob = repo.create_blob(b"x\n")
    for name in names:
        builder.insert(name, blob, pygit2.enums.FileMode.BLOB)
    return repo[builder.write()].peel(pygit2.Tree)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    before=st.sets(st.sampled_from(NAMES), min_size=1),
    after=st.sets(st.sampled_from(NAMES), min_size=1),
)
def test_a_carried_index_equals_one_built_afresh(
    before: set[str], after: set[str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    repo = pygit2.init_repository(str(tmp_path_factory.mktemp("r")), bare=True)
    old, new = tree_of(repo, before), tree_of(repo, after)
    clashes._FORMS.of(old)
    came = {name: name in after for name in before ^ after}
    carry_name_forms(old.id.raw, new.id.raw, came)
    assert new.id.raw in clashes._FORMS._known
    carried = clashes._FORMS.of(new)
    fresh = clashes._DirectoryForms(max_names=1 << 10).of(new)
    assert carried == fresh


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    names=st.sets(st.sampled_from(NAMES), min_size=1),
    ours=st.sets(st.sampled_from(NAMES)),
    form=st.sampled_from(sorted({normalize_segment(name) for name in NAMES} | {"zz"})),
)
def test_the_names_of_a_form_are_exactly_those_in_the_tree(
    names: set[str], ours: set[str], form: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    repo = pygit2.init_repository(str(tmp_path_factory.mktemp("r")), bare=True)
    tree = tree_of(repo, names)
    hint = [name for name in ours if normalize_segment(name) == form]
    found = clashes._FORMS.named(tree, form, hint)
    assert sorted(found) == sorted(n for n in names if normalize_segment(n) == form)


def test_the_index_stays_within_its_bound(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "r"), bare=True)
    forms = clashes._DirectoryForms(max_names=25)
    trees = [tree_of(repo, {f"n{i}-{j}.md" for j in range(10)}) for i in range(5)]
    for tree in trees:
        forms.of(tree)
    assert sum(len(hashes) for hashes in forms._known.values()) <= 25
    assert trees[-1].id.raw in forms._known, "the newest index is kept"


def test_validation_against_a_main_the_lane_made_sees_names_it_landed(tmp_path: Path) -> None:
    home, repo = make_imp(tmp_path)
    base = main_commit(repo)
    # Index organization/ at base, as validating any run writing there does.
    assert (
        validate(
            repo,
            base,
            change_of(repo, {"organization/x.md": b"x\n"}),
            namespace=namespace(9),
            mode="reorganize",
            limits=KnowledgeLimits(),
        )
        == []
    )
    landed = integrate_change(
        home,
        change_of(repo, {"organization/Index.md": b"a\n"}),
        base,
        ns=namespace(1),
        run=run_id(1),
        mode="reorganize",
    )
    assert landed.checkpoint == "integrated"
    head = main_commit(open_repo(home, "yuko"))
    organization = open_repo(home, "yuko")[head].peel(pygit2.Tree)["organization"]
    assert organization.id.raw in clashes._FORMS._known  # carried by the lane, not listed
    before = open_repo(home, "yuko")[base].peel(pygit2.Tree)["organization"]
    assert before.id.raw not in clashes._FORMS._known, "the version main left is forgotten"
    found = validate(
        open_repo(home, "yuko"),
        head,
        change_of(repo, {"organization/index.md": b"b\n"}),
        namespace=namespace(2),
        mode="reorganize",
        limits=KnowledgeLimits(),
    )
    assert [(v.path, v.rule) for v in found] == [("organization/index.md", "name-clash")]
