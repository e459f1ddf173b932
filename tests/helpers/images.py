"""The box images the docker tests run (built by `just box` and `just box-AGENT`)."""

from __future__ import annotations

import os

BOX_IMAGE = os.environ.get("IMPYARD_TEST_IMAGE", "impyard-box:latest")
PI_IMAGE = os.environ.get("IMPYARD_TEST_PI_IMAGE", "impyard-pi:latest")
CLAUDE_CODE_IMAGE = os.environ.get("IMPYARD_TEST_CLAUDE_CODE_IMAGE", "impyard-claude-code:latest")
CODEX_IMAGE = os.environ.get("IMPYARD_TEST_CODEX_IMAGE", "impyard-codex:latest")
OPENCODE_IMAGE = os.environ.get("IMPYARD_TEST_OPENCODE_IMAGE", "impyard-opencode:latest")
GEMINI_IMAGE = os.environ.get("IMPYARD_TEST_GEMINI_IMAGE", "impyard-gemini:latest")
NODE_IMAGE = os.environ.get("IMPYARD_TEST_NODE_IMAGE", "impyard-node:latest")
