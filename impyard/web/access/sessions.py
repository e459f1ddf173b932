"""Console sessions: a random id in an HttpOnly, SameSite=Strict cookie, and each
session's CSRF token, which every state-changing form carries back.

Sessions live in this process's memory only: a console restart logs everyone out, and
nothing about a session is ever written to the data root.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

COOKIE = "impyard_session"
#: Form field (and header, for scripts) that carries the CSRF token.
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
#: Sessions kept at once; the oldest is forgotten past that.
MAX_SESSIONS = 64
#: A session ends this long after it began.
SESSION_SECONDS = 12 * 3600


@dataclass(frozen=True)
class Session:
    id: str
    csrf: str
    started: float

    def csrf_matches(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(self.csrf.encode(), given.encode())


class Sessions:
    def __init__(self, lifetime: float = SESSION_SECONDS) -> None:
        self._lifetime = lifetime
        self._lock = threading.Lock()
        self._by_id: OrderedDict[str, Session] = OrderedDict()

    def start(self) -> Session:
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), time.monotonic())
        with self._lock:
            self._by_id[session.id] = session
            while len(self._by_id) > MAX_SESSIONS:
                self._by_id.popitem(last=False)
        return session

    def find(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        with self._lock:
            session = self._by_id.get(session_id)
            if session is None:
                return None
            if time.monotonic() - session.started > self._lifetime:
                del self._by_id[session_id]
                return None
            return session

    def end(self, session_id: str) -> None:
        with self._lock:
            self._by_id.pop(session_id, None)
