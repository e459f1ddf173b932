"""Image lifecycle of agent boxes through python-on-whales: import, verify, tag.

``scripts/build-agent-box.sh`` makes the root filesystem (Debian packages and
npm, no registry) and hands the tarball here. Import goes to a candidate tag,
the candidate must start and report the pinned agent version under the box's own
hardening, and only then does the final tag move: a failed build never
replaces a working image. Every image carries the hash of the recipe that
built it, so an unchanged recipe is not rebuilt.

Runs go through the engine's API (``launch``); this module is the CLI-parity
side, where python-on-whales is exactly what an operator would type.

``python -m impyard.box.images.agent_image current IMAGE RECIPE`` exits 0 when IMAGE
was built from RECIPE; ``... import TARBALL ...`` imports, verifies and tags.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from impyard.box.docker.engine import stderr_tail
from impyard.box.images.agents import AGENTS, Agent, agent_named
from impyard.box.spec import TMP_TMPFS
from impyard.common.errors import EngineError, ImpyardError

LABEL_RECIPE = "impyard.recipe"
LABEL_AGENT = "impyard.agent"
LABEL_AGENT_VERSION = "impyard.agent-version"

BOX_USER = "65532:65532"


@dataclass(frozen=True)
class BuiltImage:
    tag: str
    image_id: str
    size_bytes: int
    agent_version: str


def _docker() -> Any:
    if shutil.which("docker") is None:
        raise EngineError("the docker CLI is not on PATH: install docker.io (`just engine`)")
    from python_on_whales import DockerClient

    return DockerClient()


def recipe_of(image: str) -> str | None:
    """The recipe hash ``image`` was built from, or None (absent, or not built by us)."""
    docker = _docker()
    if not docker.image.exists(image):
        return None
    labels = docker.image.inspect(image).config.labels or {}
    return labels.get(LABEL_RECIPE)


def import_changes(agent: Agent, recipe: str, agent_version: str) -> list[str]:
    env = [f"ENV {key}={value}" for key, value in agent.runtime_env().items()]
    labels = f"{LABEL_RECIPE}={recipe} {LABEL_AGENT}={agent.name}"
    return [
        *env,
        f"USER {BOX_USER}",
        "WORKDIR /tmp",
        f"CMD {json.dumps(['/bin/sh', '-c', agent.command])}",
        f"LABEL {labels} {LABEL_AGENT_VERSION}={agent_version}",
    ]


def import_verified(
    agent: Agent, tarball: Path, tag: str, *, recipe: str, agent_version: str
) -> BuiltImage:
    """Import ``tarball`` as a candidate, check the agent starts in it, then tag it."""
    from python_on_whales.exceptions import DockerException

    docker = _docker()
    previous = docker.image.inspect(tag).id if docker.image.exists(tag) else None
    candidate = f"{tag.rsplit(':', 1)[0]}:candidate-{recipe[:12]}"
    try:
        image = docker.image.import_(
            tarball, candidate, changes=import_changes(agent, recipe, agent_version)
        )
    except DockerException as exc:
        raise EngineError(f"docker import of {tarball} failed: {_tail(exc)}") from exc
    try:
        reported = _agent_version_in(agent, candidate)
        if agent_version not in reported.split():
            raise ImpyardError(
                f"the built image reports {agent.name} {reported!r}, expected the pinned "
                f"{agent_version}"
            )
        docker.image.tag(candidate, tag)
    finally:
        # Only the candidate tag goes; the image stays under ``tag`` when it passed.
        with contextlib.suppress(DockerException):
            docker.image.remove(candidate, prune=False)
    if previous is not None and previous != image.id:
        # The image this build replaced; a box still using it keeps it (removal fails).
        with contextlib.suppress(DockerException):
            docker.image.remove(previous, prune=True)
    inspected = docker.image.inspect(tag)
    return BuiltImage(
        tag=tag,
        image_id=str(image.id),
        size_bytes=int(inspected.size or 0),
        agent_version=agent_version,
    )


def _agent_version_in(agent: Agent, image: str) -> str:
    """The agent's version command inside ``image`` with a box's hardening and no network:
    its last line."""
    from python_on_whales.exceptions import DockerException

    docker = _docker()
    try:
        output = docker.run(
            image,
            ["/bin/sh", "-c", agent.version_command],
            remove=True,
            pull="never",
            networks=["none"],
            read_only=True,
            cap_drop=["ALL"],
            security_options=["no-new-privileges"],
            tmpfs=[f"/tmp:{TMP_TMPFS}"],
            user=BOX_USER,
        )
    except DockerException as exc:
        output = str(exc.stdout or exc.stderr or "")
        needs, has = _node_versions(agent, image)
        reason = start_failure(output, needs=needs, has=has) if output else _tail(exc)
        raise ImpyardError(f"{agent.name} does not start in the built image: {reason}") from exc
    return str(output).strip().splitlines()[-1].strip() if str(output).strip() else ""


def start_failure(output: str, *, needs: str = "", has: str = "") -> str:
    """Why an agent's version command failed, on one line: the first error line of its
    output (what node says went wrong; the stack trace under it says where) and its last
    line, and the Node versions the agent's package declares and the image has."""
    lines = [line.strip() for line in output.strip().splitlines() if line.strip()]
    errors = [line for line in lines if _ERROR_LINE.match(line)]
    shown = [errors[0]] if errors else []
    if lines and lines[-1] not in shown:
        shown.append(lines[-1])
    reason = " | ".join(shown)
    if needs and has:
        reason += f" (its npm package needs node {needs}; the image has node {has})"
    return reason


#: A line where node (or a JavaScript runtime) names an error: ``SyntaxError: ...``.
_ERROR_LINE = re.compile(r"^(?:[A-Za-z]+Error|Error)(?: \[[A-Z_]+\])?: ")


def _node_versions(agent: Agent, image: str) -> tuple[str, str]:
    """The Node range the agent's npm package declares (``engines.node``) and the image's
    Node version, or empty strings when either cannot be read: a diagnosis for a failed
    start, never a reason to fail."""
    from python_on_whales.exceptions import DockerException

    package_json = f"/opt/{agent.name}/lib/node_modules/{agent.package}/package.json"
    try:
        output = _docker().run(
            image,
            ["/bin/sh", "-c", f"node --version && head -c 1048576 {package_json}"],
            remove=True,
            pull="never",
            networks=["none"],
            read_only=True,
            cap_drop=["ALL"],
            security_options=["no-new-privileges"],
            user=BOX_USER,
        )
        has, _, manifest = str(output).partition("\n")
        needs = json.loads(manifest).get("engines", {}).get("node", "")
    except (DockerException, ValueError, AttributeError):
        return "", ""
    return (needs, has.strip()) if isinstance(needs, str) else ("", "")


def _tail(exc: Exception) -> str:
    return stderr_tail(str(getattr(exc, "stderr", "") or exc))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m impyard.box.images.agent_image")
    sub = parser.add_subparsers(dest="what", required=True)
    current = sub.add_parser("current", help="exit 0 when IMAGE was built from RECIPE")
    current.add_argument("image")
    current.add_argument("recipe")
    imp = sub.add_parser("import", help="import a root filesystem, verify it, tag it")
    imp.add_argument("tarball", type=Path)
    imp.add_argument("--agent", default="pi", choices=sorted(AGENTS))
    imp.add_argument("--tag")
    imp.add_argument("--recipe", required=True)
    imp.add_argument("--agent-version", required=True)
    imp.add_argument("--started", type=float, help="epoch seconds the build started")
    args = parser.parse_args(argv)
    try:
        if args.what == "current":
            return 0 if recipe_of(args.image) == args.recipe else 1
        agent = agent_named(args.agent)
        built = import_verified(
            agent,
            args.tarball,
            args.tag or agent.image,
            recipe=args.recipe,
            agent_version=args.agent_version,
        )
    except ImpyardError as exc:
        print(f"build-agent-box: {exc}", file=sys.stderr)
        return 1
    took = f" in {time.time() - args.started:.0f} s" if args.started else ""
    size = f"{built.size_bytes / 1e6:.0f} MB"
    print(f"built {built.tag} ({args.agent} {built.agent_version}): {size}{took}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
