"""The name of the one branch the host writes, defined once and importing nothing: the
pygit2-free reader of main (``mainref``) and the pygit2 side (``repo``) both need it."""

from __future__ import annotations

MAIN = "refs/heads/main"
