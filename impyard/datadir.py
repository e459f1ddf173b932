"""Creating the data root: directories and the default owner policy."""

from __future__ import annotations

import importlib.resources

from impyard.errors import UsageError
from impyard.fsutil import atomic_write_bytes
from impyard.home import Home


def default_org_policy() -> bytes:
    # Package data, so an installed wheel carries it; the repository's top-level policy/
    # is a link to the same directory, where an owner reads the defaults.
    resource = importlib.resources.files("impyard.policy").joinpath("defaults", "org.toml")
    return resource.read_bytes()


def init_home(home: Home) -> bool:
    """Create what is missing; never overwrite an owner's edited policy. True if anything new."""
    if home.root.exists() and not home.root.is_dir():
        raise UsageError(f"the data root {home.root} exists and is not a directory")
    fresh = not home.is_initialized()
    try:
        for directory in (
            home.root,
            home.policy_dir,
            home.imp_policy_dir,
            home.knowledge_dir,
            home.runs_dir,
            home.memory_dir,
        ):
            directory.mkdir(parents=True, exist_ok=True)
        if not home.org_policy.exists():
            atomic_write_bytes(home.org_policy, default_org_policy())
    except OSError as exc:
        # A path under a regular file, a read-only mount, no permission: the owner's to fix.
        where = exc.filename or home.root
        raise UsageError(
            f"cannot create the data root {home.root}: {where}: {exc.strerror or exc}"
        ) from exc
    if not home.compiled_policy.exists():
        from impyard.policy.compile import deploy

        deploy(home)
    from impyard.queue.db import connect

    connect(home.db).close()  # creates the schema, so other tools can read it at once
    return fresh
