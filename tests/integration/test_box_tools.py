"""The box tools (impyard-note, imp, box-init) inside real boxes."""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

import pytest

from impyard.box.launcher.launch import remove_box, run_box, start_box, wait_box
from impyard.box.spec import BoxExit, BoxMount, BoxSpec, box_labels
from tests.helpers.images import BOX_IMAGE

pytestmark = pytest.mark.docker

NS = "n_0123456789ab"
KDIR = "/opt/impyard/knowledge"
FRONTMATTER = re.compile(
    r"\A---\nid: (n_[0-9a-f]{12}_\d+)\ncreated_at: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\n"
    r"source_urls:(?: \[\]\n|\n(?:- \S+\n)+)---\n"
)


def _knowledge(tmp_path: Path) -> Path:
    kdir = tmp_path / "knowledge"
    (kdir / "records").mkdir(parents=True)
    (kdir / "organization").mkdir()
    for path in (kdir, kdir / "records", kdir / "organization"):
        os.chown(path, 65532, 65532)
    return kdir


def _spec(kdir: Path, script: str, **kwargs: object) -> BoxSpec:
    env = {
        "IMPYARD_KNOWLEDGE_DIR": KDIR,
        "IMPYARD_KNOWLEDGE_NAMESPACE": NS,
        **kwargs.pop("env", {}),
    }
    mounts = [BoxMount(str(kdir), KDIR, read_only=False), *kwargs.pop("mounts", [])]
    return BoxSpec(
        image=BOX_IMAGE,
        command=["/bin/sh", "-c", script],
        labels=box_labels(f"test-{uuid.uuid4().hex[:12]}", "tester", root=kdir),
        env=env,
        mounts=mounts,
        timeout_seconds=60,
        **kwargs,
    )


def _run(spec: BoxSpec, tmp_path: Path) -> tuple[BoxExit, str]:
    log = tmp_path / f"{spec.run_id}.log"
    exit_ = run_box(spec, log)
    return exit_, log.read_text()


def test_note_files_are_named_numbered_and_have_frontmatter(tmp_path: Path) -> None:
    kdir = _knowledge(tmp_path)
    script = (
        "printf 'ACME supports SAML.\\n' | impyard-note vendors acme-sso"
        " --source https://example.com/report --source https://example.org/b\n"
        "echo second | impyard-note vendors acme-sso\n"
        "echo third | impyard-note papers x1\n"
    )
    exit_, log = _run(_spec(kdir, script), tmp_path)
    assert exit_.clean, log
    expected = [
        f"records/vendors/acme-sso--{NS}_1.md",
        f"records/vendors/acme-sso--{NS}_2.md",
        f"records/papers/x1--{NS}_3.md",
    ]
    assert log.split() == [f"{KDIR}/{p}" for p in expected]
    files = sorted(str(p.relative_to(kdir)) for p in kdir.rglob("*.md"))
    assert files == sorted(expected)
    first = (kdir / expected[0]).read_text()
    match = FRONTMATTER.match(first)
    assert match, first
    assert match.group(1) == f"{NS}_1"
    assert "- https://example.com/report\n- https://example.org/b\n" in first
    assert first.endswith("---\nACME supports SAML.\n")
    third = (kdir / expected[2]).read_text()
    assert FRONTMATTER.match(third) and f"id: {NS}_3\n" in third
    assert "source_urls: []\n" in third


def test_a_note_body_is_kept_whole_its_trailing_newlines_dropped(tmp_path: Path) -> None:
    """Short bodies are read by the shell in pieces, long ones partly by `cat`: each ends up
    as it was given, its trailing newlines dropped (as `$(cat)` drops them) and one added,
    in a UTF-8 locale too (where the shell counts characters, not the bytes read)."""
    kdir = _knowledge(tmp_path)
    long_lines = "".join(f"line {i} of a long note \\ kept\n" for i in range(120))
    bodies = {
        "bare": ("printf 'no newline'", "no newline\n"),
        "trailing": ("printf 'a\\n\\n\\n\\n'", "a\n"),
        "spaces": ("printf '  lead \\\\n and trail  \\n'", "  lead \\n and trail  \n"),
        "long": ("cat /feed/long", long_lines),
        "one-line": ("cat /feed/wide", "w" * 5000 + "\n"),
        "a-piece": ("cat /feed/piece", "p" * 256 + "\nafter\n"),
        "accents": ("cat /feed/accents", "\u00e9t\u00e9 " * 200 + "\n\u00e0 la ligne\n"),
        "empty": ("printf ''", ""),
    }
    files = {
        "long": long_lines,
        "wide": "w" * 5000,
        "piece": "p" * 256 + "\nafter\n\n",
        "accents": "\u00e9t\u00e9 " * 200 + "\n\u00e0 la ligne",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    mounts = [BoxMount(str(tmp_path / name), f"/feed/{name}", read_only=True) for name in files]
    script = "".join(f"{feed} | impyard-note bodies {slug}\n" for slug, (feed, _) in bodies.items())
    spec = _spec(kdir, script, env={"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}, mounts=mounts)
    exit_, log = _run(spec, tmp_path)
    assert exit_.clean, log
    for number, (slug, (_, expected)) in enumerate(bodies.items(), start=1):
        text = (kdir / f"records/bodies/{slug}--{NS}_{number}.md").read_text()
        assert text.split("---\n", 2)[2] == expected, slug


def test_a_number_whose_path_is_taken_is_skipped(tmp_path: Path) -> None:
    kdir = _knowledge(tmp_path)
    (kdir / "records/new").mkdir()
    os.chown(kdir / "records/new", 65532, 65532)
    (kdir / f"records/new/s--{NS}_1.md").write_text("written by hand")
    (kdir / "records/new/s--n_ffffffffffff_2.md").write_text("other namespace")
    exit_, log = _run(
        _spec(kdir, "echo b | impyard-note new s; echo c | impyard-note new s"), tmp_path
    )
    assert exit_.clean, log
    assert log.split() == [f"{KDIR}/records/new/s--{NS}_2.md", f"{KDIR}/records/new/s--{NS}_3.md"]
    assert (kdir / f"records/new/s--{NS}_1.md").read_text() == "written by hand"


def test_concurrent_notes_never_clash(tmp_path: Path) -> None:
    kdir = _knowledge(tmp_path)
    # 10 writers in each of two boxes at once, sharing the checkout and namespace.
    script = "for i in 1 2 3 4 5 6 7 8 9 10; do echo $i | impyard-note t s & done; wait"
    boxes = [start_box(_spec(kdir, script)) for _ in range(2)]
    exits = []
    try:
        for number, box in enumerate(boxes):
            exits.append(wait_box(box.container_id, 60, tmp_path / f"{number}.log"))
    finally:
        for box in boxes:
            remove_box(box.container_id)
    assert all(e.clean for e in exits)
    names = sorted(p.name for p in (kdir / "records/t").iterdir())
    numbers = sorted(int(re.fullmatch(rf"s--{NS}_(\d+)\.md", n).group(1)) for n in names)
    assert numbers == list(range(1, 21))
    ids = {
        re.search(r"^id: (\S+)$", (kdir / "records/t" / n).read_text(), re.M).group(1)
        for n in names
    }
    assert len(ids) == 20


@pytest.mark.parametrize("topic", ["Bad", "a/b", "x_y", ""])
def test_bad_topic_is_refused(tmp_path: Path, topic: str) -> None:
    kdir = _knowledge(tmp_path)
    exit_, log = _run(_spec(kdir, f"echo body | impyard-note '{topic}' slug"), tmp_path)
    assert exit_.exit_code == 2
    assert "impyard-note: invalid topic" in log or "usage" in log
    assert list((kdir / "records").iterdir()) == []


def test_imp_appends_then_reorganizes(tmp_path: Path) -> None:
    kdir = _knowledge(tmp_path)
    task = tmp_path / "task.md"
    task.write_text("Research ACME's SSO options, please!\n")
    task_mount = BoxMount(str(task), "/opt/impyard/task.md", read_only=True)
    exit_, log = _run(_spec(kdir, "imp", mounts=[task_mount]), tmp_path)
    assert exit_.clean, log
    note = f"records/tasks/research-acme-s-sso-options-please--{NS}_1.md"
    assert log.strip() == f"imp: wrote note {note}"
    assert (kdir / note).read_text().endswith("---\nResearch ACME's SSO options, please!\n")

    exit_, log = _run(
        _spec(kdir, "imp", mounts=[task_mount], env={"IMPYARD_KNOWLEDGE_MODE": "reorganize"}),
        tmp_path,
    )
    assert exit_.clean, log
    assert "indexed 1 records" in log
    index = (kdir / "organization/index.md").read_text()
    assert f"- [{note}](../{note}): Research ACME's SSO options, please!" in index


def test_box_init_waits_for_the_ready_file(tmp_path: Path) -> None:
    kdir = _knowledge(tmp_path)
    ready = tmp_path / "ready"
    ready.mkdir()
    (ready / "gateway").write_text("ok")
    ready_mount = BoxMount(str(ready), "/opt/impyard/ready", read_only=True)
    entry = ["/opt/impyard/bin/box-init"]
    exit_, log = _run(
        _spec(
            kdir,
            "echo running",
            entrypoint=entry,
            mounts=[ready_mount],
            env={"IMPYARD_WAIT_FOR": "/opt/impyard/ready/gateway"},
        ),
        tmp_path,
    )
    assert exit_.clean and log == "running\n"

    exit_, log = _run(
        _spec(
            kdir,
            "echo never",
            entrypoint=entry,
            mounts=[ready_mount],
            env={"IMPYARD_WAIT_FOR": "/opt/impyard/ready/missing", "IMPYARD_WAIT_SECONDS": "1"},
        ),
        tmp_path,
    )
    assert exit_.exit_code == 125
    assert "did not appear within 1s" in log and "never" not in log
