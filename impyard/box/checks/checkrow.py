"""One row of ``impyard check box``, and the error for a check box that could not run."""

from __future__ import annotations

from dataclasses import dataclass

from impyard.box.docker import engine
from impyard.common.errors import EngineError


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


class CheckRunError(EngineError):
    """The check box could not be run at all (not: a check failed)."""

    def __init__(self, image: str, exit_code: int, stderr: str) -> None:
        tail = engine.stderr_tail(stderr)
        super().__init__(
            f"could not run the check box from {image} (docker exit {exit_code}): {tail}"
        )
        self.image = image
        self.exit_code = exit_code
        self.stderr_tail = tail
