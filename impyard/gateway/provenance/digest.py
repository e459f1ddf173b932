"""SHA-256 of a relayed body, computed beside the relay once the body is large.

Hashing is a third of the gateway's CPU on a large inspected download (after
one decryption and before one encryption of every byte). ``hashlib`` releases
the GIL for large updates, so past ``PARALLEL_AFTER`` bytes the pieces go to a
thread of their own: the relay reads and writes the next piece while the last
one is hashed. A bounded queue keeps memory flat when hashing falls behind.
Small bodies (most requests) are hashed inline: a thread would cost more than
it saves.
"""

from __future__ import annotations

import hashlib
import queue
import threading

PARALLEL_AFTER = 1024 * 1024
# Pieces in flight at most (each at most one relay chunk, 64 KiB).
MAX_PENDING = 32


class BodyDigest:
    def __init__(self) -> None:
        self._sha = hashlib.sha256()
        self._seen = 0
        self._queue: queue.SimpleQueue[bytes | None] | None = None
        self._slots = threading.BoundedSemaphore(MAX_PENDING)
        self._thread: threading.Thread | None = None

    def update(self, piece: bytes) -> None:
        self._seen += len(piece)
        if self._queue is None:
            if self._seen <= PARALLEL_AFTER:
                self._sha.update(piece)
                return
            self._queue = queue.SimpleQueue()
            self._thread = threading.Thread(target=self._drain, name="gateway-hash", daemon=True)
            self._thread.start()
        self._slots.acquire()
        self._queue.put(piece)

    def hexdigest(self) -> str:
        """The digest of every piece given (waits for the hashing thread, if any)."""
        if self._queue is not None and self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._queue = None
        return self._sha.hexdigest()

    def _drain(self) -> None:
        assert self._queue is not None
        pieces = self._queue
        while (piece := pieces.get()) is not None:
            self._sha.update(piece)
            self._slots.release()
