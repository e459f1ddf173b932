"""What a failed agent image build says when the agent does not start in the image: the
line naming the error, not the stack trace under it or the Docker client's wrapper text."""

from __future__ import annotations

from impyard.box.images.agent_image import start_failure

# `pi --version 2>&1` of @earendil-works/pi-coding-agent 1.6.0 (which needs Node 22.19)
# in a Debian trixie image (Node 20.19.2), as the build's verification receives it.
MISSING_EXPORT = (
    "SyntaxError: The requested module 'node:module' does not provide an export named "
    "'enableCompileCache'"
)
NODE_TOO_OLD = f"""\
file:///opt/pi/lib/node_modules/@earendil-works/pi-coding-agent/dist/bundle/cli.js:2
import {{ createRequire, enableCompileCache }} from "node:module";
                        ^^^^^^^^^^^^^^^^^^
{MISSING_EXPORT}
    at ModuleJob._instantiate (node:internal/modules/esm/module_job:175:21)
    at async ModuleJob.run (node:internal/modules/esm/module_job:258:5)
    at async ModuleLoader.import (node:internal/modules/esm/loader:540:24)
    at async asyncRunEntryPointWithESMLoader (node:internal/modules/run_main:117:5)

Node.js v20.19.2
"""


def test_a_start_failure_names_the_error_and_the_node_versions() -> None:
    reason = start_failure(NODE_TOO_OLD, needs=">=22.19.0", has="v20.19.2")
    assert "\n" not in reason
    assert MISSING_EXPORT in reason
    assert "Node.js v20.19.2" in reason
    assert "its npm package needs node >=22.19.0; the image has node v20.19.2" in reason
    assert "ModuleJob" not in reason


def test_a_start_failure_without_an_error_line_shows_its_last_line() -> None:
    reason = start_failure("starting\nsh: 1: pi: not found\n")
    assert reason == "sh: 1: pi: not found"
