"""What ``list``, ``show`` and ``diff`` report of a preserved change, as plain data (the CLI
prints it as text or JSON)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pygit2

from impyard.knowledge.integration import bulkdelete
from impyard.knowledge.store.repo import main_commit
from impyard.repair import kept
from impyard.repair.compare import MAX_FILES, against_main, diff_against_main
from impyard.repair.preserved import Preserved


def row(found: Preserved, repo: pygit2.Repository) -> dict[str, Any]:
    """One line of a listing."""
    change = found.change(repo)
    m = found.manifest
    data: dict[str, Any] = {
        "kind": found.kind,
        "run_id": found.run_id,
        "imp": found.imp,
        "ref": found.ref,
        "commit": found.commit,
        "base": found.base,
        "created_at": found.created_at,
        "checkpoint": m.checkpoint if m is not None else None,
        #: ``bulk-delete (N files)``: held for the owner's approval, not refused.
        "held": bulkdelete.held(found.violations) if found.kind == "candidate" else None,
        "reason": found.reason,
        "written": len(change.written),
        "deleted": len(change.deleted),
        "violations_total": found.violations_total,
    }
    if found.kind == "quarantine":
        data["checkout_kept"] = m is not None and kept.is_kept(m)
    return data


def details(found: Preserved, repo: pygit2.Repository) -> dict[str, Any]:
    """``show``: the listing's fields, the reasons, and every path against main now."""
    files = against_main(repo, found.change(repo))
    m = found.manifest
    data = row(found, repo)
    data.update(
        {
            "main": main_commit(repo),
            "mode": m.mode if m is not None else None,
            "namespace": m.namespace if m is not None else None,
            "violations": [v.as_dict() for v in found.violations],
            "not_kept": found.not_kept,
            "message": found.message.splitlines()[2:] if found.message else [],
            "status_counts": dict(sorted(Counter(f.status for f in files).items())),
            "files": [f.as_dict() for f in files[:MAX_FILES]],
            "files_total": len(files),
            "repairs": [r.model_dump(mode="json") for r in m.repairs] if m is not None else [],
        }
    )
    return data


def diff(found: Preserved, repo: pygit2.Repository) -> dict[str, Any]:
    """``diff``: unified diffs from main's files to the preserved ones, bounded."""
    shown = diff_against_main(repo, found.change(repo), found.kind)
    return {
        "kind": found.kind,
        "run_id": found.run_id,
        "imp": found.imp,
        "ref": found.ref,
        "commit": found.commit,
        "main": main_commit(repo),
        "files": [f.as_dict() for f in shown.files],
        "files_total": shown.total,
        "truncated": shown.truncated,
    }
