"""Writing the unit file: never over a different unit unless forced, atomically."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from impyard.common.errors import ImpyardError
from impyard.common.fsutil import atomic_write_bytes


class UnitExistsError(ImpyardError):
    def __init__(self, path: Path) -> None:
        super().__init__(
            f"{path} exists and holds a different unit: compare with `impyard service print`, "
            "then pass --force to replace it"
        )
        self.path = path


@dataclass(frozen=True)
class InstallResult:
    path: Path
    #: ``written`` (there was none), ``replaced`` (forced over a different one) or
    #: ``unchanged`` (it already held this very unit).
    action: str


def install_unit(path: Path, text: str, *, force: bool) -> InstallResult:
    data = text.encode()
    try:
        existing: bytes | None = path.read_bytes()
    except FileNotFoundError:
        existing = None
    except OSError as exc:
        raise ImpyardError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if existing == data:
        return InstallResult(path, "unchanged")
    if existing is not None and not force:
        raise UnitExistsError(path)
    try:
        atomic_write_bytes(path, data, mode=0o644)
    except OSError as exc:
        hint = " (writing a systemd unit needs root)" if isinstance(exc, PermissionError) else ""
        raise ImpyardError(f"cannot write {path}: {exc.strerror or exc}{hint}") from exc
    return InstallResult(path, "written" if existing is None else "replaced")
