"""What one console process holds: the data root and settings, its listener, the token,
the sessions, and the caches its pages share."""

from __future__ import annotations

from dataclasses import dataclass, field

from impyard.home import Home
from impyard.settings import Settings
from impyard.web.access.listen import Listen
from impyard.web.access.sessions import Sessions
from impyard.web.access.token import ensure_token
from impyard.web.pages.overview import EngineCache
from impyard.web.pages.render import Pages
from impyard.web.pages.runindex import RunIndex


@dataclass
class Console:
    home: Home
    settings: Settings
    listen: Listen
    token: str
    sessions: Sessions = field(default_factory=Sessions)
    pages: Pages = field(default_factory=Pages)
    engines: EngineCache = field(default_factory=EngineCache)
    index: RunIndex = field(init=False)

    def __post_init__(self) -> None:
        self.index = RunIndex(self.home)


def open_console(home: Home, settings: Settings, listen: Listen) -> Console:
    """The console of ``home``, its token made first on a data root older than the console."""
    return Console(home, settings, listen, ensure_token(home.web_token))
