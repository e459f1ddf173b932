"""The node agent's image through python-on-whales: import, verify, tag.

``scripts/build-node-image.sh`` makes the root filesystem (Debian bookworm and a venv
with this tree's wheel, no registry) and hands the tarball here. As with agent images
(``impyard.box.images.agent_image``, whose recipe label this image carries too), the import
goes to a candidate tag, the candidate must report this tree's version and load the
node agent's code, offline on a read-only root, and only then does the final tag move:
a failed build never replaces a working image.

``python -m impyard.cluster.node_image import TARBALL --tag T --recipe R --version V``
imports, verifies and tags (``python -m impyard.box.images.agent_image current IMAGE RECIPE``
tells whether a build is needed).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from impyard.box.docker.engine import stderr_tail
from impyard.box.images.agent_image import LABEL_RECIPE
from impyard.common.errors import EngineError, ImpyardError

LABEL_VERSION = "impyard.version"
VENV = "/opt/impyard"
ENTRYPOINT = f"{VENV}/bin/impyard"
#: What ``impyard node`` loads (the CLI and the agent, which imports nothing lazily):
#: loading them proves the wheel's dependencies import here.
NODE_MODULES = "impyard.cli.main, impyard.cluster.node.agent"


@dataclass(frozen=True)
class NodeImage:
    tag: str
    image_id: str
    size_bytes: int
    version: str


def node_changes(recipe: str, version: str) -> list[str]:
    """The image's configuration: ``impyard node`` as root from the venv."""
    return [
        # Root inside: the node agent talks to its node's engine socket (root's, bind-
        # mounted in) and setns()s into its boxes' network namespaces to relay their
        # gateway connections; the boxes it starts run as the box user, never this one.
        "USER 0:0",
        "WORKDIR /",
        f"ENV PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "ENV LANG=C.UTF-8",
        f"ENTRYPOINT {json.dumps([ENTRYPOINT])}",
        f"CMD {json.dumps(['node'])}",
        f"LABEL {LABEL_RECIPE}={recipe} {LABEL_VERSION}={version}",
    ]


def import_node_image(tarball: Path, tag: str, *, recipe: str, version: str) -> NodeImage:
    """Import ``tarball`` as a candidate, check it runs this version's node agent, tag it."""
    from python_on_whales.exceptions import DockerException

    docker = _docker()
    previous = docker.image.inspect(tag).id if docker.image.exists(tag) else None
    candidate = f"{tag.rsplit(':', 1)[0]}:candidate-{recipe[:12]}"
    try:
        image = docker.image.import_(tarball, candidate, changes=node_changes(recipe, version))
    except DockerException as exc:
        raise EngineError(f"docker import of {tarball} failed: {_tail(exc)}") from exc
    try:
        reported = _offline(candidate, ["--version"])
        if reported != f"impyard {version}":
            raise ImpyardError(
                f"the built image reports {reported!r}, expected 'impyard {version}'"
            )
        _offline(candidate, ["-c", f"import {NODE_MODULES}"], entrypoint=f"{VENV}/bin/python")
        docker.image.tag(candidate, tag)
    finally:
        # Only the candidate tag goes; the image stays under ``tag`` when it passed.
        with contextlib.suppress(DockerException):
            docker.image.remove(candidate, prune=False)
    if previous is not None and previous != image.id:
        # The image this build replaced; a container still using it keeps it.
        with contextlib.suppress(DockerException):
            docker.image.remove(previous, prune=True)
    inspected = docker.image.inspect(tag)
    return NodeImage(
        tag=tag, image_id=str(image.id), size_bytes=int(inspected.size or 0), version=version
    )


def _offline(image: str, argv: list[str], *, entrypoint: str | None = None) -> str:
    """``argv`` in ``image`` as root with no network, a read-only root and no capabilities:
    its output, stripped."""
    from python_on_whales.exceptions import DockerException

    try:
        output = _docker().run(
            image,
            argv,
            entrypoint=entrypoint,
            remove=True,
            pull="never",
            networks=["none"],
            read_only=True,
            cap_drop=["ALL"],
            security_options=["no-new-privileges"],
            user="0:0",
        )
    except DockerException as exc:
        shown = " ".join([entrypoint or ENTRYPOINT, *argv])
        raise ImpyardError(f"`{shown}` fails in the built image: {_tail(exc)}") from exc
    return str(output).strip()


def _docker() -> Any:
    if shutil.which("docker") is None:
        raise EngineError("the docker CLI is not on PATH: install docker.io (`just engine`)")
    from python_on_whales import DockerClient

    return DockerClient()


def _tail(exc: Exception) -> str:
    return stderr_tail(str(getattr(exc, "stderr", "") or exc))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m impyard.cluster.node_image")
    sub = parser.add_subparsers(dest="what", required=True)
    imp = sub.add_parser("import", help="import a root filesystem, verify it, tag it")
    imp.add_argument("tarball", type=Path)
    imp.add_argument("--tag", default="impyard-node:latest")
    imp.add_argument("--recipe", required=True)
    imp.add_argument("--version", required=True, help="the version the image must report")
    imp.add_argument("--started", type=float, help="epoch seconds the build started")
    args = parser.parse_args(argv)
    try:
        built = import_node_image(args.tarball, args.tag, recipe=args.recipe, version=args.version)
    except ImpyardError as exc:
        print(f"build-node-image: {exc}", file=sys.stderr)
        return 1
    took = f" in {time.time() - args.started:.0f} s" if args.started else ""
    size = f"{built.size_bytes / 1e6:.0f} MB"
    print(f"built {built.tag} (impyard {built.version}): {size}{took}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
