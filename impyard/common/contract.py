"""Constants of the box contract that several layers need (policy defaults, the box
launcher, ``check box``), defined once and importing nothing."""

from __future__ import annotations

#: The image a box runs unless policy or the imp says otherwise.
DEFAULT_IMAGE = "impyard-box:latest"
#: The box's non-root user (policy ``box.user``'s default).
DEFAULT_USER = "65532:65532"
#: The size of the box's tmpfs /tmp: a runtime constant, not policy.
TMP_SIZE_BYTES = 2 * 1024**3


def parse_user(value: str) -> tuple[int, int]:
    """``"65532:65532"`` → ``(65532, 65532)``; ValueError unless numeric ``uid:gid``."""
    uid, sep, gid = value.partition(":")
    if not sep or not uid.isdigit() or not gid.isdigit():
        raise ValueError(f"box user {value!r} must be numeric 'uid:gid'")
    return int(uid), int(gid)
