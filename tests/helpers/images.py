"""The box images the docker tests run (built by `just box`, `just box-pi` and
`just box-opencode`)."""

from __future__ import annotations

import os

BOX_IMAGE = os.environ.get("IMPYARD_TEST_IMAGE", "impyard-box:latest")
PI_IMAGE = os.environ.get("IMPYARD_TEST_PI_IMAGE", "impyard-pi:latest")
OPENCODE_IMAGE = os.environ.get("IMPYARD_TEST_OPENCODE_IMAGE", "impyard-opencode:latest")


def require_image(image: str, build: str) -> str:
    """``image`` when the engine has it; else skip the test (fail it in CI, which builds
    every image) saying how to build it."""
    import docker
    import pytest

    client = docker.from_env(timeout=10)
    try:
        client.images.get(image)
    except Exception as exc:
        message = f"{image} unavailable ({type(exc).__name__}); run `{build}`"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    finally:
        client.close()
    return image
