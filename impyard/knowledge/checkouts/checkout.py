"""A run's checkout of its base commit: an overlay over shared layers, or a plain copy.

Overlay (preferred): the run gets an empty upper dir and a workdir; the base is the
layer chain of its commit (see ``layers``), mounted read-only below the upper dir
by Docker's ``local`` volume driver. Preparing costs two mkdirs once the base layer
exists, and the run's change *is* its upper dir.

Copy (fallback, for engines without overlay volumes): the whole tree is written
into the run dir, and each file's lstat identity is recorded outside the checkout
so the snapshot only hashes files the box touched.

A ready box (``runs.ready``) mounts its knowledge directory before any run claims it,
so its checkout is made there: the overlay of a cold run, mounted there by the host when
serve fills the box ahead of a run (``prefill_overlay``), or a copy written at the claim.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from impyard.common.checkoutkind import CheckoutKind
from impyard.common.fsutil import atomic_write_bytes, atomic_write_json, remove_tree
from impyard.home import Home
from impyard.knowledge.checkouts import loopmount
from impyard.knowledge.checkouts.checkout_record import Checkout
from impyard.knowledge.checkouts.layers import (
    MOUNT_DATA_LIMIT,
    ensure_layer_locked,
    layers_lock,
    mounted_chain,
)
from impyard.knowledge.checkouts.treefs import (
    CheckoutError,
    Identity,
    Owner,
    open_dir,
    parse_owner,
    write_tree,
)
from impyard.knowledge.imps import open_repo

__all__ = [
    "Checkout",
    "CheckoutError",
    "CheckoutKind",
    "mount_options",
    "prefill_overlay",
    "prepare_checkout",
    "read_identities",
    "release_checkout",
]

# Characters overlay's option parser would split on (',' between options, ':'
# between lowers) or unescape ('\\'); refused rather than escaped.
_BAD_PATH_CHARS = frozenset(",:\\=\n")


def mount_options(checkout: Checkout) -> str:
    """The overlay mount data for this checkout (Docker local driver ``o=``).

    ``redirect_dir=off``: renaming a lower dir is copy + whiteout, never a redirect
    xattr the snapshot would have to interpret. ``metacopy=off``: a chmod copies
    up the data too, so every regular file in the upper dir is complete.
    ``index=off``: copy-up breaks hard links, so upper files have one link.
    """
    if checkout.kind != "overlay" or checkout.workdir is None:
        raise CheckoutError("only an overlay checkout has mount options")
    paths = [*checkout.lowerdirs, checkout.root, checkout.workdir]
    for path in paths:
        if _BAD_PATH_CHARS & set(str(path)):
            raise CheckoutError(
                f"overlay path {str(path)!r} contains one of , : \\ = or a newline; "
                "use a data root without them"
            )
    options = (
        f"lowerdir={':'.join(str(p) for p in checkout.lowerdirs)},"
        f"upperdir={checkout.root},workdir={checkout.workdir},"
        "redirect_dir=off,metacopy=off,index=off"
    )
    if len(options) > MOUNT_DATA_LIMIT:
        raise CheckoutError(
            f"overlay mount options are {len(options)} bytes, over the {MOUNT_DATA_LIMIT}-byte "
            "limit of mount(2); use a shorter data root path"
        )
    return options


def prepare_checkout(
    home: Home,
    imp: str,
    run_id: str,
    base: str,
    kind: CheckoutKind,
    owner: str | Owner,
    into: Path | None = None,
    prefilled: bool = False,
) -> Checkout:
    """Create the run's checkout of ``base`` (owned by the box user) and record it.

    ``into``: an empty directory of the box user's that a running box already mounts (a
    ready box's), filled where it is with a copy. With ``prefilled``, ``into`` already
    holds ``base``'s tree, as the overlay ``prefill_overlay`` mounted there.

    The record (``runs/<id>/checkout.json``) is written before returning, under the
    layer lock, so layer collection never removes a chain this run mounts.
    """
    own = parse_owner(owner)
    run_dir = home.run_dir(run_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    root = home.run_checkout(run_id)
    kind = "copy" if into is not None else kind
    if kind == "overlay":
        workdir = home.run_overlay_work(run_id)
        with layers_lock(home, imp):
            chain = mounted_chain(home, imp, ensure_layer_locked(home, imp, base, own))
            checkout = Checkout(
                kind="overlay",
                base=base,
                root=root,
                lowerdirs=tuple(layer.tree_dir for layer in chain),
                workdir=workdir,
            )
            mount_options(checkout)  # refuse now, not at container start
            _fresh_dir(root, own)
            _fresh_dir(workdir, own)
            _write_record(home, imp, run_id, checkout)
        return checkout
    if kind != "copy":
        raise CheckoutError(f"unknown checkout kind {kind!r}")
    if into is not None and prefilled:
        checkout = _prefilled(into, base)
        with layers_lock(home, imp):
            _write_record(home, imp, run_id, checkout)
        return checkout
    checkout = Checkout(kind="copy", base=base, root=into or root)
    if into is None:
        _fresh_dir(root, own)
    elif _has_entries(into):
        raise CheckoutError(f"{into}: a ready box's knowledge directory is not empty")
    _write_copy(home, imp, checkout, own)
    _write_record(home, imp, run_id, checkout)
    return checkout


def prefill_overlay(home: Home, imp: str, base: str, into: Path, owner: str | Owner) -> None:
    """Make a ready box's empty knowledge directory ``into`` a checkout of ``base`` before a
    run claims the box (and before the box starts): the overlay a cold run of ``base`` gets
    (its layer chain below an empty upper dir, both dirs beside ``into`` in the box's
    space), mounted on ``into`` by the host. Its record (``prefill_record``) keeps the
    chain from layer collection while the box waits. The run that claims the box (of
    ``imp``, on ``base``) takes it with ``prefilled``: its change is its upper dir, as a
    cold run's is. A copy in place made each snapshot of the run lstat every file (0.7 s
    a run at 100,000 records, against 25 ms), and filling the box wrote every file (8.6
    s). Where the kernel refuses the overlay, a copy is written into ``into`` instead."""
    own = parse_owner(owner)
    space = into.parent
    if into != space / "knowledge":  # where ``Checkout.mounted_at`` finds it
        raise CheckoutError(f"{into}: a ready box's checkout is mounted on its knowledge dir")
    record, work = prefill_record(into), space / "work"
    with layers_lock(home, imp):
        chain = mounted_chain(home, imp, ensure_layer_locked(home, imp, base, own))
        checkout = Checkout(
            kind="overlay",
            base=base,
            root=space / "upper",
            lowerdirs=tuple(layer.tree_dir for layer in chain),
            workdir=work,
        )
        _fresh_dir(checkout.root, own)
        _fresh_dir(work, own)
        atomic_write_json(record, {"imp": imp, **checkout.to_dict()})
    try:
        mount_overlay(checkout, into)
    except CheckoutError:
        record.unlink(missing_ok=True)
        remove_tree(checkout.root)
        remove_tree(work)
        _write_copy(home, imp, Checkout(kind="copy", base=base, root=into), own)


def prefill_record(into: Path) -> Path:
    """Where ``prefill_overlay`` records the checkout it mounted on ``into``: in the ready
    box's directory, which layer collection reads as it reads runs' (``Home.checkout_records``)."""
    return into.parent.parent / "checkout.json"


def _prefilled(into: Path, base: str) -> Checkout:
    """The checkout a ready box's knowledge directory holds: the overlay ``prefill_overlay``
    mounted, or a copy of ``base`` where it wrote one."""
    if os.path.ismount(into):
        try:
            found = Checkout.from_dict(json.loads(prefill_record(into).read_bytes()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CheckoutError(f"{into}: the ready box's checkout record is unreadable") from exc
        if found.kind == "overlay" and found.base == base and found.mounted_at == into:
            return found
        raise CheckoutError(f"{into}: the ready box holds another checkout than of {base}")
    return Checkout(kind="copy", base=base, root=into)


def mount_overlay(checkout: Checkout, target: Path) -> None:
    """Mount ``checkout``'s overlay on ``target`` (nosuid, nodev), with the options a cold
    run's volume gets (``mount_options``)."""
    data = mount_options(checkout).encode()
    flags = loopmount.MS_NOSUID | loopmount.MS_NODEV
    try:
        loopmount.mount("overlay", target, "overlay", flags, data)
    except OSError as exc:
        why = exc.strerror
        raise CheckoutError(f"cannot mount the checkout overlay on {target}: {why}") from exc


def _write_copy(home: Home, imp: str, checkout: Checkout, own: Owner) -> None:
    from impyard.knowledge.store.gitobj import commit_at

    repo = open_repo(home, imp)
    tree = commit_at(repo, checkout.base, CheckoutError).tree
    identities: dict[str, Identity] = {}
    fd = open_dir(checkout.root)
    try:
        write_tree(repo, tree, fd, own, identities=identities)
    finally:
        os.close(fd)
    _write_identities(checkout.index_path, identities)


def forget_identities(checkout: Checkout) -> None:
    """Keep the recorded paths (a deletion still shows) but let no identity match: the
    tree was replaced by one that came back from a cluster node, so every file is read."""
    identities = read_identities(checkout.index_path)
    _write_identities(checkout.index_path, {path: Identity(0, -1, -1, -1) for path in identities})


def release_checkout(checkout: Checkout, record: Path) -> None:
    """Remove the run's checkout pieces and its ``record``; the run dir (and its manifest)
    stays.

    The overlay must already be unmounted (Docker unmounts when the box exits).
    """
    for path in (checkout.root, checkout.workdir):
        if path is not None and path.exists():
            # Box-written: no recursion, no symlink following, any depth (remove_tree).
            remove_tree(path)
    for path in (checkout.index_path, record):
        path.unlink(missing_ok=True)


def read_identities(path: Path) -> dict[str, Identity]:
    """The copy checkout's recorded identities: path → Identity."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise CheckoutError(f"cannot read checkout index {path}: {exc}") from exc
    parts = raw.split(b"\0")
    if len(parts) % 2 != 1 or parts[-1] != b"":
        raise CheckoutError(f"checkout index {path} is truncated")
    result: dict[str, Identity] = {}
    try:
        for i in range(0, len(parts) - 1, 2):
            ino, size, mtime, ctime = parts[i + 1].split(b" ")
            result[parts[i].decode()] = Identity(int(ino), int(size), int(mtime), int(ctime))
    except ValueError as exc:
        raise CheckoutError(f"checkout index {path} is corrupt: {exc}") from exc
    return result


def _write_identities(path: Path, identities: dict[str, Identity]) -> None:
    # NUL-separated: git paths never contain NUL; 100k entries load in tens of ms.
    chunks = []
    for rel, ident in identities.items():
        chunks.append(
            f"{rel}\0{ident.ino} {ident.size} {ident.mtime_ns} {ident.ctime_ns}\0".encode()
        )
    atomic_write_bytes(path, b"".join(chunks), mode=0o600)


def _write_record(home: Home, imp: str, run_id: str, checkout: Checkout) -> None:
    atomic_write_json(home.run_checkout_record(run_id), {"imp": imp, **checkout.to_dict()})


def _has_entries(path: Path) -> bool:
    with os.scandir(path) as entries:
        return any(True for _ in entries)


def _fresh_dir(path: Path, owner: Owner) -> None:
    if path.exists():
        # A retried prepare after a crash: start again from nothing.
        remove_tree(path)
    path.parent.mkdir(parents=True, exist_ok=True)  # the run's space, when it has none
    path.mkdir(mode=0o755)
    os.chown(path, *owner)
    os.chmod(path, 0o755)
