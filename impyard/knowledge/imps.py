"""The imp catalogue: creating an imp (its canonical repository, published origin and
settings), listing imps, and the one check that an imp exists."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from impyard.common.errors import KnowledgeError, UsageError
from impyard.common.fsutil import atomic_write_json, fsync_dir
from impyard.common.names import check_imp_name
from impyard.home import Home
from impyard.imp_lookup import known_imps, require_imp_name
from impyard.knowledge.change import FileState

if TYPE_CHECKING:
    import pygit2

# pygit2 loads where a repository is opened or made, not with this module: a run reads
# its imp's settings and main before its box starts, and pygit2's import (libgit2 and
# every CA certificate) then loads beside the box's start instead. So the modules below
# this one that import pygit2 (repo, origin, sizes, trees) are imported in the two
# functions that open or make a repository; none of them imports this module.

README = """\
# Knowledge of {imp}

This repository is {imp}'s durable knowledge about the world. Impyard (the
trusted host) owns it: a run works in a plain checkout and the host validates
and integrates what the run leaves behind when it exits cleanly.

## Layout

- `records/` — immutable notes, one Markdown file each. Add new ones; never
  edit or delete an existing one.
- `organization/` — indexes, topic maps and navigation. Only a reorganization
  run (`IMPYARD_KNOWLEDGE_MODE=reorganize`) may change it.
- `README.md` — this file; nobody may change it.

Nothing else may be added at the top level.

## Adding a record

Name it `records/<topic>/<slug>--<namespace>_<number>.md` where:

- `<topic>` is one directory (no nesting) and `<slug>` a short name, both
  lowercase letters, digits and `-`;
- `<namespace>` is exactly `$IMPYARD_KNOWLEDGE_NAMESPACE` (issued by the
  host for this run) and `<number>` counts 1, 2, 3, ... (no leading zeros).

Start the file with this frontmatter (`source_urls` is optional):

```
---
id: <namespace>_<number>
created_at: 2026-07-11T12:00:00Z
source_urls:
- https://example.com/report
---
```

`id` must equal the `<namespace>_<number>` of the file name and
`created_at` must be UTC. You may rewrite your own new files as often as you
like before the run ends; only the final state counts.

## What is refused

A run is rejected, with every reason listed, if it modifies or deletes an
existing record, writes under `organization/` in append mode, uses another
namespace, repeats a note id, or adds links, special files, hidden paths,
Git metadata, agent instruction files (AGENTS.md, CLAUDE.md, ...),
executable files, non-UTF-8 or oversized files, or credentials.

Cite sources by URL; files under `/tmp` vanish when the run ends and are
never durable references.
"""

RECORDS_README = """\
# records/

Immutable notes: `records/<topic>/<slug>--<namespace>_<number>.md`, each
starting with `id` / `created_at` / `source_urls` frontmatter. See ../README.md.
"""

ORGANIZATION_README = """\
# organization/

Indexes, topic maps and navigation over `records/`. Rebuilt only by
reorganization runs; append runs may not write here. See ../README.md.
"""


@dataclass(frozen=True)
class ImpSettings:
    """Per-imp overrides of policy box.image / box.command, set at `imp create`."""

    image: str | None = None
    command: str | None = None
    agent: str | None = None  # set by `imp create --agent`, for the owner's eyes

    def as_dict(self) -> dict[str, str | None]:
        return {"image": self.image, "command": self.command, "agent": self.agent}


def create_imp(home: Home, imp: str, settings: ImpSettings | None = None) -> Path:
    """Create knowledge/<imp>/ (repo.git, origin.git, imp.json); return the canonical repo path.

    Everything is built in a hidden sibling directory and renamed into place, so a
    crash leaves either no imp or a complete one (never a repo without main).
    """
    import pygit2

    from impyard.knowledge.integration.origin import sync_origin
    from impyard.knowledge.store.repo import MAIN, configure_libgit2, host_signature
    from impyard.knowledge.store.trees import build_tree
    from impyard.knowledge.validation.sizes import tree_bytes_full, write_size_cache_entry

    check_imp_name(imp)
    if not home.knowledge_dir.is_dir():
        raise UsageError(f"no Impyard data root at {home.root}: run `impyard init` first")
    final = home.imp_dir(imp)
    if final.exists():
        raise UsageError(f"imp {imp!r} already exists ({final})")
    staging = home.knowledge_dir / f".creating-{imp}-{uuid.uuid4().hex[:8]}"
    staging_home_dir = staging
    try:
        staging.mkdir()
        repo_path = staging / "repo.git"
        configure_libgit2()
        repo = pygit2.init_repository(str(repo_path), bare=True, initial_head="main")
        strip_templates(repo_path)
        tree = build_tree(
            repo,
            None,
            {
                "README.md": _blob(repo, README.format(imp=imp)),
                "records/README.md": _blob(repo, RECORDS_README),
                "organization/README.md": _blob(repo, ORGANIZATION_README),
            },
            (),
        )
        sig = host_signature()
        commit = repo.create_commit(
            MAIN, sig, sig, f"Create knowledge repository for {imp}\n", tree, []
        )
        write_size_cache_entry(
            repo, str(commit), tree_bytes_full(repo, cast(pygit2.Tree, repo[tree]))
        )
        sync_origin(repo, staging / "origin.git")
        atomic_write_json(staging / Home.IMP_SETTINGS, (settings or ImpSettings()).as_dict())
        fsync_dir(staging)
        try:
            os.rename(staging_home_dir, final)
        except OSError as exc:  # a concurrent create won the race
            raise UsageError(f"imp {imp!r} already exists ({final})") from exc
        fsync_dir(home.knowledge_dir)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return home.repo(imp)


def _blob(repo: pygit2.Repository, text: str) -> FileState:
    data = text.encode()
    return FileState(blob=str(repo.create_blob(data)), size=len(data), executable=False)


def strip_templates(git_dir: Path) -> None:
    """No sample hooks, description or info/exclude: nothing in a repo dir that could run."""
    shutil.rmtree(git_dir / "hooks", ignore_errors=True)
    (git_dir / "hooks").mkdir()
    with contextlib.suppress(FileNotFoundError):
        (git_dir / "description").unlink()
    shutil.rmtree(git_dir / "info", ignore_errors=True)


def list_imps(home: Home) -> list[str]:
    return known_imps(home)


def require_imp(home: Home, imp: str) -> Path:
    """The canonical repository of ``imp``; a name that is no imp is refused in one line
    naming the closest imps."""
    return home.repo(require_imp_name(home, imp))


def read_imp_settings(home: Home, imp: str) -> ImpSettings:
    require_imp(home, imp)
    try:
        raw: Any = json.loads(home.imp_settings(imp).read_text())
    except FileNotFoundError:
        return ImpSettings()
    except (OSError, ValueError) as exc:
        raise KnowledgeError(f"imp {imp!r}: unreadable {home.imp_settings(imp)}: {exc}") from exc
    if not isinstance(raw, dict):
        raise KnowledgeError(f"imp {imp!r}: {home.imp_settings(imp)} is not a JSON object")
    image, command, agent = raw.get("image"), raw.get("command"), raw.get("agent")
    return ImpSettings(
        image=image if isinstance(image, str) else None,
        command=command if isinstance(command, str) else None,
        agent=agent if isinstance(agent, str) else None,
    )


def open_repo(home: Home, imp: str) -> pygit2.Repository:
    """The canonical repository of ``imp``, which must exist."""
    from impyard.knowledge.store.repo import open_repo_at

    return open_repo_at(require_imp(home, imp), f"imp {imp!r}: ")
