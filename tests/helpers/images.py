"""The box images the docker tests run (built by `just box`, `just box-pi` and
`just box-claude-code`)."""

from __future__ import annotations

import os

BOX_IMAGE = os.environ.get("IMPYARD_TEST_IMAGE", "impyard-box:latest")
PI_IMAGE = os.environ.get("IMPYARD_TEST_PI_IMAGE", "impyard-pi:latest")
CLAUDE_CODE_IMAGE = os.environ.get("IMPYARD_TEST_CLAUDE_CODE_IMAGE", "impyard-claude-code:latest")
