"""An imp's box image is checked against the real engine when the owner names it: an image
the engine lacks is refused at ``imp create`` and ``imp set`` (nothing is pulled here, so
every run of it would end quarantined), and one it has is taken."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.helpers.cli import Cli
from tests.helpers.images import BOX_IMAGE

pytestmark = pytest.mark.docker


def images(cli: Cli) -> dict[str, str | None]:
    listed = cli("imp", "list", "--json")
    assert listed.code == 0, listed.stderr
    return {row["imp"]: row["image"] for row in json.loads(listed.stdout)}


def test_an_image_the_engine_lacks_is_refused_and_one_it_has_is_taken(cli: Cli) -> None:
    missing = f"impyard-no-such-{uuid.uuid4().hex[:8]}:latest"
    assert cli("init").code == 0
    assert cli("imp", "create", "yuko").code == 0

    for argv in (("imp", "set", "yuko"), ("imp", "create", "bob")):
        refused = cli(*argv, "--image", missing)
        assert refused.code != 0 and refused.stdout == ""
        (line,) = refused.stderr.splitlines()
        assert line.startswith(f"impyard: error: image {missing} is not in the Docker engine")
        assert f"`docker build -t {missing} …`" in line and "`docker load -i FILE`" in line
    assert images(cli) == {"yuko": None}  # nothing set, no imp created

    assert cli("imp", "set", "yuko", "--image", BOX_IMAGE).code == 0
    assert cli("imp", "create", "bob", "--image", BOX_IMAGE).code == 0
    assert images(cli) == {"bob": BOX_IMAGE, "yuko": BOX_IMAGE}
