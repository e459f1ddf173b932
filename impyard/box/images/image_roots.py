"""The system roots an image trusts, read from the image itself (never from a box).

Read once per image id with a created, never-started container (``get_archive``)
and cached on the host, so the bundle a box gets holds the roots its own tools
would have used, plus what the host adds (``trust``). An image without a system
bundle (the busybox box) has none.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from impyard.box.docker import engine
from impyard.box.docker.engine import EngineObjectNotFoundError
from impyard.box.images.trust import IMAGE_ROOT_PATHS, MAX_IMAGE_ROOTS_BYTES
from impyard.common.errors import ImpyardError
from impyard.common.fsutil import atomic_write_text

HELPER_IMAGE_ROOTS = "image-roots"
#: A tar of one bundle: its size plus headers and padding.
_MAX_ARCHIVE_BYTES = MAX_IMAGE_ROOTS_BYTES + 64 * 1024


def image_roots(cache_dir: Path, image_id: str, labels: dict[str, str]) -> str:
    """The PEM text of the system roots of the image ``image_id`` ("" when it has none).
    The container that reads them carries ``labels`` (``helpers.helper_labels``), so
    recovery removes it when the host dies before this does."""
    cached = cache_dir / f"{image_id.replace(':', '_')}.pem"
    try:
        return cached.read_text()
    except FileNotFoundError:
        pass
    text = _read_from_image(image_id, labels)
    cache_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(cached, text)
    return text


def _read_from_image(image: str, labels: dict[str, str]) -> str:
    api = engine.api()
    created = engine.call(
        "create (roots)",
        api.create_container,
        image,
        labels=labels,
        command=["/nonexistent"],
        entrypoint=[],
        network_disabled=True,
        image=image,
    )
    container = str(created["Id"])
    try:
        for path in IMAGE_ROOT_PATHS:
            try:
                archive = engine.call(
                    "get archive",
                    api.get_archive,
                    container,
                    path,
                    _MAX_ARCHIVE_BYTES,
                    container_id=container,
                )
            except EngineObjectNotFoundError:
                continue
            data = _first_file(archive) if archive is not None else None
            if data is not None:
                return data.decode("ascii", errors="replace")
        return ""
    finally:
        engine.call(
            "remove (roots)", api.remove_container, container, force=True, container_id=container
        )


def _first_file(tar_bytes: bytes) -> bytes | None:
    """The one regular file of a ``get_archive`` answer (a symlink is no bundle), bounded."""
    try:
        with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as archive:
            for member in archive:
                if member.isfile() and member.size <= MAX_IMAGE_ROOTS_BYTES:
                    handle = archive.extractfile(member)
                    return handle.read() if handle is not None else None
    except tarfile.TarError as exc:
        raise ImpyardError(f"cannot read the image's CA bundle: {exc}") from exc
    return None
