"""Making a data root: the layout ``impyard.home`` names, created where missing, with the
default org policy compiled and deployed, the queue's schema, the gateway's CA and the
console's login token. Above the layout, so the layout itself calls none of them."""

from __future__ import annotations

import importlib.resources

from impyard.common.errors import UsageError
from impyard.common.fsutil import atomic_write_bytes
from impyard.gateway.wiring.ca import ensure_ca
from impyard.home import Home
from impyard.policy.compile import deploy
from impyard.queue.db import connect
from impyard.web.access.token import ensure_token


def init_home(home: Home, runtime: str | None = None) -> bool:
    """Create what is missing; never overwrite an owner's edited policy. True if anything new.

    A new org policy names ``runtime`` as the box runtime (default: the ``init_runtime``
    setting)."""
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
            if runtime is None:
                # Imported here, not at the top: the settings (pydantic) matter to a data
                # root only when one is created.
                from impyard.settings import load_settings

                runtime = load_settings().init_runtime
            atomic_write_bytes(home.org_policy, default_org_policy(runtime))
    except OSError as exc:
        # A path under a regular file, a read-only mount, no permission: the owner's to fix.
        where = exc.filename or home.root
        raise UsageError(
            f"cannot create the data root {home.root}: {where}: {exc.strerror or exc}"
        ) from exc
    if not home.compiled_policy.exists():
        deploy(home)
    connect(home.db).close()  # creates the schema, so other tools can read it at once
    ensure_ca(home.gateway_ca_dir)  # the key stays here, readable by this user only
    ensure_token(home.web_token)  # the console's login secret, readable by this user only
    return fresh


#: The line of the shipped org policy that names the box runtime.
_RUNTIME_LINE = b'\nruntime = "runc"\n'


def default_org_policy(runtime: str = "runc") -> bytes:
    """The shipped org policy, naming ``runtime`` as the box runtime."""
    # Package data, so an installed wheel carries it; the repository's top-level policy/
    # is a link to the same directory, where an owner reads the defaults.
    resource = importlib.resources.files("impyard.policy").joinpath("defaults", "org.toml")
    text = resource.read_bytes()
    if runtime == "runc":
        return text
    assert _RUNTIME_LINE in text, "the shipped org policy names the box runtime"
    return text.replace(_RUNTIME_LINE, f'\nruntime = "{runtime}"\n'.encode(), 1)
