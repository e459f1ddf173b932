"""Work a run does beside its main path, joined before the step that depends on it.

A run's steps are mostly waits on the engine and the disk (fsync, mount, unmount), so
two of them overlap well on threads. Each piece of work is joined explicitly by the
step that needs it done; its exception is raised there, as if it had run inline.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Beside(Generic[T]):
    """One call running on its own thread; ``result`` waits for it."""

    def __init__(self, name: str, fn: Callable[[], T]) -> None:
        self._fn = fn
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._fn()
        except BaseException as exc:  # re-raised in the thread that joins
            self._error = exc

    def result(self) -> T:
        self._thread.join()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return self._value  # type: ignore[return-value]
