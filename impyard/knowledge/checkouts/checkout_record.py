"""The record of a run's checkout: where it is and what kind (plain data, no git).

Kept apart from ``checkout`` (which builds checkouts with pygit2) so that reading a
manifest, as ``runs list`` does, never loads the git library.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from impyard.common.checkoutkind import CheckoutKind
from impyard.common.errors import KnowledgeError


@dataclass(frozen=True)
class Checkout:
    kind: CheckoutKind
    base: str
    root: Path  # overlay: the upper dir; copy: the plain copy
    lowerdirs: tuple[Path, ...] = ()  # overlay only, top first
    workdir: Path | None = None  # overlay only

    @property
    def mounted_at(self) -> Path:
        """The host directory a box mounts when no volume carries the checkout: a copy's
        root, or the knowledge directory a ready box's overlay is mounted on, beside its
        upper dir in the box's space (``checkout.prefill_overlay``)."""
        return self.root.parent / "knowledge" if self.kind == "overlay" else self.root

    @property
    def index_path(self) -> Path:
        """Copy kind: the recorded lstat identities (beside the checkout, never inside)."""
        return self.root.parent / "checkout.idx"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "base": self.base,
            "root": str(self.root),
            "lowerdirs": [str(p) for p in self.lowerdirs],
            "workdir": None if self.workdir is None else str(self.workdir),
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Checkout:
        kind = raw.get("kind")
        if kind not in ("overlay", "copy"):
            raise KnowledgeError(f"checkout record has an unknown kind {kind!r}")
        workdir = raw.get("workdir")
        return cls(
            kind=kind,
            base=str(raw["base"]),
            root=Path(str(raw["root"])),
            lowerdirs=tuple(Path(str(p)) for p in raw.get("lowerdirs") or ()),
            workdir=None if workdir is None else Path(str(workdir)),
        )
