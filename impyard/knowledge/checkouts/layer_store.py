"""What a layer is on disk: its record, its chain, the per-imp lock, and the names
that keep half-built or half-deleted layers out of any mount.

``<layers>/<id>/t`` is the lower directory; ``<layers>/<id>/meta.json`` says what it
is (a layer without its meta is not one). A big FULL layer is an image
(``<layers>/<id>/image.sqfs``, see ``layer_image``) mounted on ``t``. Layers are built
in ``.tmp-*`` directories and renamed into place, so a crash never leaves a half layer
where a mount could use it; builders and the collector serialize on one lock per imp,
which also makes any ``.tmp-*`` found under the lock a crash leftover. A layer is
removed by renaming it to ``.trash-*`` first, so it disappears at once and a crash
leaves only trash.

Ids are short (12 hex of the commit + the owner) because Docker passes the whole
``lowerdir=a:b:…`` option through mount(2), whose data is limited to one page.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from impyard.common.fsutil import locked
from impyard.home import Home
from impyard.knowledge.checkouts.layer_image import unmount_image
from impyard.knowledge.checkouts.treefs import CheckoutError, Owner, parse_owner

if TYPE_CHECKING:
    import pygit2

# mount(2) copies its data argument into one page; Docker's local driver passes the
# whole ``o=`` string through.
MOUNT_DATA_LIMIT = 4095
# Overlay takes up to 500 lowers; past a few dozen, each lookup miss costs more than
# the rarer compactions save.
CHAIN_CEILING = 48
# The longest layer id: 12 hex, '-', two 10-digit ids joined by '.'.
_MAX_ID_LEN = 12 + 1 + 10 + 1 + 10
META_FORMAT = 1
TMP_PREFIX = ".tmp-"
_TRASH_PREFIX = ".trash-"
_LOCK_NAME = ".lock"

LayerKind = Literal["full", "delta"]


@dataclass(frozen=True)
class Layer:
    id: str
    commit: str
    kind: LayerKind
    parent: str | None
    depth: int  # delta layers below this one down to its FULL layer
    owner: Owner
    path: Path  # <layers>/<id>
    #: The tree is an image mounted on ``tree_dir`` (``layer_image``), not files in it.
    image: bool = False

    @property
    def tree_dir(self) -> Path:
        """The directory overlay mounts as a lowerdir."""
        return self.path / "t"


def chain_limit(home: Home, imp: str) -> int:
    """The longest layer chain whose overlay options fit one page for this data root.

    Compaction (a new FULL layer, seconds at 100,000 records) happens once per this
    many integrations, so the longer the better; a short data root path allows more.
    """
    per_layer = len(str(home.layers(imp))) + 1 + _MAX_ID_LEN + len("/t") + len(":")
    run_dir = len(str(home.runs_dir)) + len("/run-YYYYMMDDTHHMMSSZ-0123456789/knowledge")
    fixed = len("lowerdir=,upperdir=,workdir=,redirect_dir=off,metacopy=off,index=off")
    room = MOUNT_DATA_LIMIT - fixed - 2 * run_dir
    return max(2, min(CHAIN_CEILING, room // per_layer))


def layer_id(commit: str, owner: Owner) -> str:
    return f"{commit[:12]}-{owner[0]}.{owner[1]}"


@contextlib.contextmanager
def layers_lock(home: Home, imp: str) -> Iterator[None]:
    """Serializes layer builds and collection for one imp (threads and processes)."""
    root = home.layers(imp)
    _make_layers_root(root)
    with locked(root / _LOCK_NAME):
        yield


def read_layer(home: Home, imp: str, ident: str) -> Layer | None:
    """The layer ``ident`` if it is complete (has its meta), else None."""
    path = home.layers(imp) / ident
    try:
        raw = json.loads((path / "meta.json").read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise CheckoutError(f"layer {path} has an unreadable meta.json: {exc}") from exc
    try:
        return Layer(
            id=ident,
            commit=str(raw["commit"]),
            kind="full" if raw["kind"] == "full" else "delta",
            parent=None if raw["parent"] is None else str(raw["parent"]),
            depth=int(raw["depth"]),
            owner=parse_owner(str(raw["owner"])),
            path=path,
            image=raw.get("image") is True,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckoutError(f"layer {path} has an invalid meta.json: {exc}") from exc


def layer_chain(home: Home, imp: str, layer: Layer) -> tuple[Layer, ...]:
    """``layer`` and every layer below it, top first, ending with a FULL layer."""
    chain = [layer]
    current = layer
    while current.parent is not None:
        below = read_layer(home, imp, current.parent)
        if below is None:
            raise CheckoutError(f"layer {current.id} needs missing layer {current.parent}")
        chain.append(below)
        current = below
        if len(chain) > CHAIN_CEILING:
            raise CheckoutError(f"layer chain of {layer.id} is longer than {CHAIN_CEILING}")
    return tuple(chain)


def list_layers(home: Home, imp: str) -> list[Layer]:
    root = home.layers(imp)
    if not root.is_dir():
        return []
    found = []
    for name in sorted(os.listdir(root)):
        if name.startswith("."):
            continue
        layer = read_layer(home, imp, name)
        if layer is not None:
            found.append(layer)
    return found


def first_parent_line(commit: pygit2.Commit) -> Iterator[pygit2.Commit]:
    """``commit`` and then its first-parent ancestors: at most ``CHAIN_CEILING`` + 1 commits,
    as no chain reaches further back than that."""
    current = commit
    for _ in range(CHAIN_CEILING):
        yield current
        if not current.parents:
            return
        current = current.parents[0]
    yield current


def remove_temps(root: Path) -> None:
    """Under the lock, a ``.tmp-*`` dir is a crashed build: nobody else is building."""
    for name in os.listdir(root):
        if name.startswith(TMP_PREFIX):
            shutil.rmtree(root / name, ignore_errors=True)


def trash_layer(root: Path, ident: str) -> None:
    """Under the lock: take the layer out of use at once (its files go with ``trash``)."""
    # Rename only: the layer disappears at once, and a crash before the rmtree leaves
    # only trash (removed by the next collection), never a layer missing files.
    os.rename(root / ident, root / f"{_TRASH_PREFIX}{ident}-{uuid.uuid4().hex[:8]}")


def delete_layer_files(path: Path) -> None:
    """Delete a trashed layer's files (its image unmounted first, if it has one)."""
    unmount_image(path / "t")
    shutil.rmtree(path, ignore_errors=True)


def trash(root: Path) -> list[Path]:
    """The renamed-away layers (and crash leftovers of them) waiting to be deleted."""
    return [root / name for name in os.listdir(root) if name.startswith(_TRASH_PREFIX)]


def check_commit(commit: str) -> None:
    if len(commit) != 40 or any(c not in "0123456789abcdef" for c in commit):
        raise CheckoutError(f"base commit {commit!r} is not a full lowercase hex sha")


def _make_layers_root(root: Path) -> None:
    # Root-only: layer files belong to the box uid, and no host process running as
    # that uid may reach (and modify) an immutable layer.
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(root, 0o700)
