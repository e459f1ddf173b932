"""A FULL layer of a big tree as one read-only squashfs image, loop-mounted on the
layer's lower directory instead of written file by file.

Writing a tree of 100,000 records as files creates 100,000 inodes, which costs 22 µs to
450 µs each on this kind of machine's ext4 (seconds to tens of seconds, depending on the
write-back of earlier work). The same tree streamed as a tar into ``tar2sqfs`` (from
squashfs-tools-ng) is one file of a few megabytes written in about two seconds, and
mounted in milliseconds. Only trees of at least ``IMAGE_MIN_FILES`` files become images:
a small tree is cheaper as files, and a mount per layer is a mount to keep track of.

The image's files are those ``write_tree`` would write (the same checks): mode
0644 files and 0755 directories owned by the box user, no executable bit, no links,
no timestamps. An image layer is mounted under the imp's layer lock before any
overlay names it, again after a reboot (the mount is gone, the image stays), and
unmounted before its directory is deleted.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import itertools
import os
import shutil
import subprocess
import tarfile
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from impyard.common.libc import syscall
from impyard.knowledge.checkouts import image_archive, loopmount
from impyard.knowledge.checkouts.image_archive import TreeShape
from impyard.knowledge.checkouts.treefs import CheckoutError, Owner, TreePlan

if TYPE_CHECKING:
    import pygit2

IMAGE_NAME = "image.sqfs"
#: A FULL layer of this many files or more is an image where ``tar2sqfs`` is installed.
IMAGE_MIN_FILES = 10_000
#: A tree with a directory of more entries than this is files, not an image: the tool
#: files each entry by walking its directory's list (to refuse a second of the same name,
#: and to keep it sorted), so a directory costs the square of its entries. One directory
#: of 20,000 files took 2.5 s, of 40,000 10.3 s (100,000 would take about a minute),
#: where writing them as files took 6.0 s and 11.9 s, growing only linearly.
WIDEST_IMAGE_DIR = 32_768
TOOL = "tar2sqfs"

_MOUNT_FLAGS = loopmount.MS_RDONLY | loopmount.MS_NOSUID | loopmount.MS_NODEV
_MNT_DETACH = 2
_CHUNK = 1 << 20
# The tool hands each file's data to its one compressor thread; with its default queue
# of 10 blocks the two threads wake each other for nearly every small file (100,000
# futex waits at 100,000 records). git's archive piped into it took 2.16-2.77 s with the
# default queue, 1.84-2.02 s with 100 blocks and 1.24-1.65 s with 300 (at most 300 x
# 128 KiB = 38 MiB held; 1,000 was no faster).
_QUEUE_BLOCKS = 300


class BesideWalk:
    """What a walk of the same tree beside a layer's build found (``layer_built_beside``),
    said once. A check of a run's base under the checkout rules refuses everything a
    layer's own walk does (and more), so when it read every tree and found them clean,
    the image needs no walk of its own (at 100,000 records, 0.4 s of the interpreter
    that the check needs at the same time)."""

    def __init__(self) -> None:
        self._said = threading.Event()
        self._shape: TreeShape | None = None

    def clean(self, shape: TreeShape | None) -> None:
        """The tree is clean and has ``shape`` (None: the walk did not read every tree,
        so the build walks the tree itself)."""
        if not self._said.is_set():
            self._shape = shape
            self._said.set()

    def unsaid(self) -> None:
        """No word (the walk refused the tree, or stopped): the build walks it itself."""
        self.clean(None)

    def shape(self) -> TreeShape | None:
        """Wait for the word: the tree's shape, or None when unsaid."""
        self._said.wait()
        return self._shape


@dataclass(frozen=True)
class ImageSource:
    """A tree to write as an image, its walk begun: ``paths`` streams ``plan`` over it.
    ``beside``: a walk of the same tree that may make the rest of this one unneeded."""

    tree: pygit2.Tree
    plan: TreePlan
    paths: Iterator[tuple[str, pygit2.Oid | None]]
    beside: BesideWalk | None = None

    def checked(self) -> TreeShape:
        """The tree's shape, once it is known to be safe: as the walk beside said, or
        else by walking the rest of it here (``UnsafeTreeError`` at its end)."""
        said = self.beside.shape() if self.beside is not None else None
        if said is not None:
            return said
        for _ in self.paths:
            pass
        return TreeShape(self.plan.executables, self.plan.widest)


def image_source(tree: pygit2.Tree, beside: BesideWalk | None = None) -> ImageSource | None:
    """``tree`` to write with ``write_image``, or None when it is to be files: ``TOOL`` is
    missing or the tree has fewer than ``IMAGE_MIN_FILES`` files (found by reading at most
    that many). Streamed, so the image is packed while the walk goes on."""
    if shutil.which(TOOL) is None:
        return None
    plan = TreePlan()
    stream = plan.streamed(tree)
    head = []
    for item in stream:
        head.append(item)
        if plan.files >= IMAGE_MIN_FILES:
            return ImageSource(tree, plan, itertools.chain(head, stream), beside)
    return None


def write_image(repo: pygit2.Repository, source: ImageSource, owner: Owner, image: Path) -> bool:
    """Write ``source``'s tree as a squashfs image at ``image`` (a new file): by git and
    the tool alone where git writes it as a checkout would (``image_archive``), else
    from here. False, with nothing left at ``image``, when a directory of the tree holds
    more than ``WIDEST_IMAGE_DIR`` entries: the tree is to be files. A tree refused at
    its end (``UnsafeTreeError``) leaves a partial image for the caller to discard."""
    repo_path = Path(repo.path)
    plan, paths = source.plan, source.paths
    if image_archive.usable(repo_path, owner):
        as_root = _tool_argv((0, 0), image)  # git's tar: every owner root, until own_image
        tree_id = str(source.tree.id)
        shape = image_archive.write(
            repo_path, tree_id, source.checked, as_root, owner, image, WIDEST_IMAGE_DIR
        )
        if shape is None:
            return True
        if shape.widest > WIDEST_IMAGE_DIR:
            return False
        plan = TreePlan()  # walked again, to be written from here
        paths = plan.streamed(source.tree)
    return _write_from_here(repo, plan, paths, owner, image)


def _tool_argv(owner: Owner, image: Path) -> list[str]:
    uid, gid = owner
    return [
        TOOL, "--quiet", "--no-xattr", "--no-keep-time", "--no-skip",
        "--compressor", "lz4", "--num-jobs", "1", "--queue-backlog", str(_QUEUE_BLOCKS),
        "--defaults", f"uid={uid},gid={gid},mode=0755", str(image),
    ]  # fmt: skip


def _write_from_here(
    repo: pygit2.Repository,
    plan: TreePlan,
    paths: Iterator[tuple[str, pygit2.Oid | None]],
    owner: Owner,
    image: Path,
) -> bool:
    """The image written from the tree's objects by ``plan`` streaming ``paths``; False,
    the tool stopped and nothing left at ``image``, once a directory turns out wider
    than ``WIDEST_IMAGE_DIR`` (known on entering it, before its files are sent)."""
    argv = _tool_argv(owner, image)
    with tempfile.TemporaryFile() as messages:
        try:
            tool = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=messages
            )
        except OSError as exc:
            raise CheckoutError(f"cannot run {TOOL}: {exc.strerror or exc}") from exc
        assert tool.stdin is not None
        image_archive.widen_pipe(tool.stdin.fileno())
        wide = False
        try:
            for chunk in _tar_chunks(repo, _files_descending(paths), owner):
                wide = plan.widest > WIDEST_IMAGE_DIR
                if wide:
                    break
                tool.stdin.write(chunk)
            if not wide:
                tool.stdin.close()
        except BrokenPipeError:
            # The tool stopped reading: its exit status and message say why.
            with contextlib.suppress(OSError):
                tool.stdin.close()
        except BaseException:
            with contextlib.suppress(OSError):
                tool.stdin.close()
            tool.kill()
            tool.wait()
            raise
        if wide:
            tool.kill()
            tool.wait()
            with contextlib.suppress(OSError):
                tool.stdin.close()
            image.unlink(missing_ok=True)
            return False
        if tool.wait() != 0:
            last = image_archive.last_line(messages)
            raise CheckoutError(f"{TOOL} could not write the layer image {image}: {last}")
    return True


def is_mounted(tree_dir: Path) -> bool:
    """Whether something is mounted on the layer's lower directory."""
    try:
        return os.stat(tree_dir).st_dev != os.stat(tree_dir.parent).st_dev
    except (FileNotFoundError, NotADirectoryError):
        return False


def mount_image(layer_path: Path, tree_dir: Path) -> None:
    """Mount the layer's image on ``tree_dir`` unless it already is (caller holds the
    imp's layer lock, so two runs never mount it twice)."""
    if is_mounted(tree_dir):
        return
    image = layer_path / IMAGE_NAME
    try:
        loopmount.mount_image(image, tree_dir, "squashfs", _MOUNT_FLAGS)
        return
    except OSError:
        pass  # no direct route here: the tool's answer is the one reported
    argv = ["mount", "-t", "squashfs", "-o", "ro,nosuid,nodev,loop", str(image), str(tree_dir)]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise CheckoutError(f"cannot mount the layer image {image}: {exc}") from exc
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip()
        raise CheckoutError(f"cannot mount the layer image {image}: {detail or 'mount failed'}")


def unmount_image(tree_dir: Path) -> None:
    """Detach the image from the layer's lower directory, if mounted. Detached lazily: an
    overlay still using it keeps it until that overlay goes."""
    if not is_mounted(tree_dir):
        return
    error = syscall("umount2", _UMOUNT_ARGS, os.fsencode(tree_dir), _MNT_DETACH)
    if error not in (0, errno.EINVAL):
        raise CheckoutError(f"cannot unmount the layer image on {tree_dir}: {os.strerror(error)}")


def unmount_images(layers_root: Path) -> None:
    """Unmount every image under a layers directory (its layers and trash), so it can be
    moved or deleted as plain files."""
    try:
        names = os.listdir(layers_root)
    except FileNotFoundError:
        return
    for name in names:
        unmount_image(layers_root / name / "t")


def _files_descending(
    paths: Iterator[tuple[str, pygit2.Oid | None]],
) -> Iterator[tuple[str, pygit2.Oid | None]]:
    """``paths`` with each run of files of one directory in descending name order (each
    directory still before what it holds). ``tar2sqfs`` files every entry in its
    directory's sorted list by walking it from the front, so names in git's ascending
    order walk the whole list each (its time went from 1.1 to 0.8 s of CPU on a tree of
    100 directories of 1,000 files); descending, each stops at the first."""
    run: list[tuple[str, pygit2.Oid | None]] = []
    parent = ""
    for path, oid in paths:
        here = path.rpartition("/")[0]
        if oid is None or here != parent:
            yield from reversed(run)
            run.clear()
            parent = here
        if oid is None:
            yield path, oid
        else:
            run.append((path, oid))
    yield from reversed(run)


def _tar_chunks(
    repo: pygit2.Repository, paths: Iterator[tuple[str, pygit2.Oid | None]], owner: Owner
) -> Iterator[bytes]:
    """The tree as a ustar stream, in chunks of about ``_CHUNK`` bytes. Headers are made
    here rather than by ``tarfile`` (a fifth of the time at 100,000 files)."""
    headers = _Headers(owner)
    read = repo.odb.read
    parts: list[bytes] = []
    size = 0
    for path, oid in paths:
        name = path.encode()
        if oid is None:
            parts.append(headers.directory(name))
            continue
        kind, data = read(oid)[:2]
        if kind != _BLOB_TYPE:
            raise CheckoutError(f"object {oid} at {path} is not a blob")
        parts += (headers.file(name, len(data)), data, _ZEROS[: -len(data) % 512])
        size += len(data) + 1024
        if size >= _CHUNK:
            yield b"".join(parts)
            parts.clear()
            size = 0
    parts.append(_ZEROS + _ZEROS)
    yield b"".join(parts)


_BLOB_TYPE = 3  # git's object type number of a blob
_ZEROS = bytes(512)
_UMOUNT_ARGS = (ctypes.c_char_p, ctypes.c_int)


class _Headers:
    """ustar headers for one owner: everything but the name and size is fixed, so the
    checksum is the fixed part's sum plus theirs. A path over ustar's 100 bytes gets
    ``tarfile``'s header (a prefix field or a PAX record), which is rare and slower."""

    def __init__(self, owner: Owner) -> None:
        self._owner = owner
        ids = b"%07o\x00%07o\x00" % owner
        rest = bytes(100) + b"ustar\x0000" + bytes(247)
        self._file = (b"0000644\x00" + ids, b"0" + rest)
        self._dir = (b"0000755\x00" + ids, b"5" + rest)
        spaces = 8 * 32  # the checksum field counts as spaces
        self._file_sum = sum(self._file[0]) + sum(self._file[1]) + sum(_MTIME) + spaces
        self._dir_sum = sum(self._dir[0]) + sum(self._dir[1]) + sum(_MTIME) + spaces

    def file(self, name: bytes, size: int) -> bytes:
        if len(name) > 100:
            return self._long(name, size, tarfile.REGTYPE, 0o644)
        return self._header(name, size, self._file, self._file_sum)

    def directory(self, name: bytes) -> bytes:
        if len(name) > 100:
            return self._long(name.rstrip(b"/"), 0, tarfile.DIRTYPE, 0o755)
        return self._header(name, 0, self._dir, self._dir_sum)

    def _header(self, name: bytes, size: int, fixed: tuple[bytes, bytes], base: int) -> bytes:
        size_field = b"%011o\x00" % size
        check = base + sum(name) + sum(size_field)
        head, tail = fixed
        return b"".join(
            (name, _ZEROS[: 100 - len(name)], head, size_field, _MTIME, b"%06o\x00 " % check, tail)
        )

    def _long(self, name: bytes, size: int, kind: bytes, mode: int) -> bytes:
        info = tarfile.TarInfo(name.decode())
        info.size, info.type, info.mode, info.mtime = size, kind, mode, 0
        info.uid, info.gid = self._owner
        return info.tobuf(tarfile.PAX_FORMAT, encoding="utf-8", errors="strict")


_MTIME = b"0" * 11 + b"\x00"
