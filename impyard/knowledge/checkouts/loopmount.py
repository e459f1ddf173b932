"""Mount a filesystem image through a loop device with ioctl(2) and mount(2), no tools.

``mount -o loop`` is a fork and exec plus libmount reading its tables: 10-20 ms on a
run's path before its box may start. This does the same three steps itself: take a
free loop device (``LOOP_CTL_GET_FREE``), bind the image to it with autoclear in one
call (``LOOP_CONFIGURE``, Linux 5.8), and mount(2) it. Autoclear makes the kernel
detach the device when the filesystem is unmounted, exactly as ``mount -o loop`` sets
it up, so ``runspace.unmount`` is unchanged. If anything here is missing (an older
kernel, no ``/dev/loop-control``, no device node) the caller falls back to the tool;
no loop device is left bound by a failed attempt, because closing the last descriptor
of an autoclear device detaches it.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import struct
from pathlib import Path

from impyard.common.libc import syscall

LOOP_CONTROL = Path("/dev/loop-control")

# <linux/loop.h>
_LOOP_CTL_GET_FREE = 0x4C82
_LOOP_CONFIGURE = 0x4C0A
_LO_FLAGS_READ_ONLY = 1
_LO_FLAGS_AUTOCLEAR = 4
# struct loop_config: fd, block_size, then struct loop_info64 (five u64, four u32 with
# lo_flags last, three name/key arrays of 64, 64 and 32 bytes, two u64), reserved[8].
_LOOP_CONFIG = struct.Struct("=II 5Q 4I 64s64s32s 2Q 8Q")

# <sys/mount.h>
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_NOATIME = 1024

#: A free device can be taken by another process between asking and binding it.
_ATTEMPTS = 8


class LoopUnavailable(OSError):
    """The direct route is not available here; the caller uses ``mount -o loop``."""


def mount_image(image: Path, target: Path, fstype: str, flags: int) -> None:
    """Bind ``image`` to a free loop device and mount it on ``target`` with ``flags``.

    Raises LoopUnavailable when this host lacks what it needs, OSError when the mount
    itself fails."""
    read_only = bool(flags & MS_RDONLY)
    image_fd = _open(image, os.O_RDONLY if read_only else os.O_RDWR)
    try:
        device, device_fd = _bind(image_fd, read_only)
    finally:
        os.close(image_fd)
    try:
        mount(device, target, fstype, flags)
    finally:
        os.close(device_fd)  # the mount holds the device now; unmounting detaches it


def _bind(image_fd: int, read_only: bool) -> tuple[str, int]:
    config = _LOOP_CONFIG.pack(
        image_fd, 0,
        0, 0, 0, 0, 0,
        0, 0, 0, _LO_FLAGS_AUTOCLEAR | (_LO_FLAGS_READ_ONLY if read_only else 0),
        b"", b"", b"",
        0, 0,
        *([0] * 8),
    )  # fmt: skip
    control = _open(LOOP_CONTROL, os.O_RDWR)
    try:
        for _ in range(_ATTEMPTS):
            try:
                number = fcntl.ioctl(control, _LOOP_CTL_GET_FREE)
            except OSError as exc:
                raise LoopUnavailable(exc.errno, f"no free loop device: {exc.strerror}") from exc
            device = f"/dev/loop{number}"
            device_fd = _open(Path(device), os.O_RDONLY if read_only else os.O_RDWR)
            try:
                fcntl.ioctl(device_fd, _LOOP_CONFIGURE, config)
            except OSError as exc:
                os.close(device_fd)
                if exc.errno == errno.EBUSY:
                    continue  # taken since we asked: ask again
                raise LoopUnavailable(exc.errno, f"cannot bind {device}: {exc.strerror}") from exc
            return device, device_fd
    finally:
        os.close(control)
    raise LoopUnavailable(errno.EBUSY, "every free loop device was taken before it was bound")


def _open(path: Path, flags: int) -> int:
    try:
        return os.open(path, flags | os.O_CLOEXEC)
    except OSError as exc:
        raise LoopUnavailable(exc.errno, f"cannot open {path}: {exc.strerror}") from exc


def mount(device: str, target: Path, fstype: str, flags: int, data: bytes | None = None) -> None:
    """mount(2) ``device`` on ``target``; ``data``: the filesystem's options (an overlay's
    dirs). Raises OSError."""
    error = syscall(
        "mount", _MOUNT_ARGS,
        os.fsencode(device), os.fsencode(target), fstype.encode(), flags, data,
    )  # fmt: skip
    if error:
        raise OSError(error, f"cannot mount {device} on {target}: {os.strerror(error)}")


# mount(2): source, target, filesystem type, flags, data.
_MOUNT_ARGS = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p)
