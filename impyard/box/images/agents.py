"""Agents an imp can be created with (``impyard imp create <imp> --agent NAME``).

An agent is data: an image built from Debian and the agent's npm package
(``scripts/build-agent-box.sh NAME``, its own part in ``scripts/agents/NAME.sh``), the
adapter in that image that runs it headless (``box/NAME-imp``, parsing its event stream
with ``box/NAME/events.js``), the model API it speaks and the header its key goes in.
The adapter lives in the image, so what the agent is told comes from the image and never
from the imp's knowledge. Adding an agent adds a row here, never a branch elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from impyard.common.contract import DEFAULT_IMAGE
from impyard.common.errors import UsageError

#: The ``[box.env]`` variable naming the gateway route an imp's model calls go to.
MODEL_ROUTE_ENV = "IMPYARD_MODEL_ROUTE"
#: The ``[box.env]`` variable naming the model every agent adapter asks for.
MODEL_ENV = "IMPYARD_MODEL"
#: Where the build recipes pin each agent's version (``box/NAME/VERSION``).
_BOX = Path(__file__).resolve().parents[3] / "box"

#: What every agent image sets at run time: HOME and TMPDIR on the tmpfs (the root file
#: system is read-only) and npm's update notifier off.
BASE_IMAGE_ENV: Mapping[str, str] = {
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "NO_UPDATE_NOTIFIER": "1",
    "NPM_CONFIG_UPDATE_NOTIFIER": "false",
}


@dataclass(frozen=True)
class Agent:
    name: str
    image: str
    #: The imp's command (run as ``/bin/sh -c``); ``exec`` keeps the agent's exit status.
    command: str
    build_hint: str
    #: The npm package the image installs, at the version pinned in ``box/NAME/VERSION``.
    package: str
    #: The model API it speaks (a ``--protocol`` of the scripted model server).
    api: str
    #: The API's base URL, a route's ``upstream`` for the provider itself.
    upstream: str
    #: The header the gateway adds the route's secret in, and its value's template.
    header: str
    value: str
    #: The command that prints the agent's version inside its image (the build checks it).
    version_command: str
    #: The image's run-time environment beyond ``BASE_IMAGE_ENV``: ``PATH`` and whatever
    #: switches off traffic other than the model API (telemetry, update checks).
    image_env: Mapping[str, str] = field(default_factory=dict)
    #: Whether the client appends ``/v1`` to the base URL it is given (the upstream must
    #: then not end in ``/v1``).
    adds_v1: bool = True
    #: The box variable naming the gateway route the agent sends its model calls to
    #: (policy ``[box.env]``), and the route it calls when the variable is unset.
    model_route_env: str = MODEL_ROUTE_ENV
    default_model_route: str = "llm"

    @property
    def version(self) -> str:
        """The pinned version, or '' when this checkout has no recipe for the agent."""
        try:
            return (_BOX / self.name / "VERSION").read_text().strip()
        except OSError:
            return ""

    @property
    def box_env_keys(self) -> tuple[str, ...]:
        """The ``[box.env]`` keys the adapter reads (the model is required)."""
        return (MODEL_ENV, self.model_route_env)

    def runtime_env(self) -> dict[str, str]:
        return {**BASE_IMAGE_ENV, **self.image_env}


AGENTS: dict[str, Agent] = {
    "pi": Agent(
        name="pi",
        image="impyard-pi:latest",
        command="exec /opt/impyard/bin/pi-imp",
        build_hint="just box-pi",
        package="@mariozechner/pi-coding-agent",
        api="openai-chat",
        upstream="https://api.openai.com",
        header="Authorization",
        value="Bearer {secret}",
        # Pi prints its version on stderr.
        version_command="pi --version 2>&1",
        # Pi's update check and install ping off, and no start-up network at all
        # (PI_OFFLINE): a box reaches nothing but its gateway.
        image_env={
            "PATH": "/opt/impyard/bin:/opt/pi/bin:/usr/local/bin:/usr/bin:/bin",
            "PI_OFFLINE": "1",
            "PI_SKIP_VERSION_CHECK": "1",
            "PI_TELEMETRY": "0",
        },
    ),
    "claude-code": Agent(
        name="claude-code",
        image="impyard-claude-code:latest",
        command="exec /opt/impyard/bin/claude-code-imp",
        build_hint="just box-claude-code",
        package="@anthropic-ai/claude-code",
        api="anthropic",
        upstream="https://api.anthropic.com",
        header="x-api-key",
        value="{secret}",
        version_command="claude --version",
        # Only model calls leave: no telemetry, error reports, update checks or other
        # non-essential requests (title generation, feature flags; without this switch
        # Claude Code also calls api.anthropic.com directly), no CLAUDE.md, and two
        # retries of a failed model call instead of ten over three minutes.
        image_env={
            "PATH": "/opt/impyard/bin:/opt/claude-code/bin:/usr/local/bin:/usr/bin:/bin",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_CLAUDE_MDS": "1",
            "CLAUDE_CODE_MAX_RETRIES": "2",
        },
    ),
    "codex": Agent(
        name="codex",
        image="impyard-codex:latest",
        command="exec /opt/impyard/bin/codex-imp",
        build_hint="just box-codex",
        package="@openai/codex",
        api="openai-responses",
        upstream="https://api.openai.com",
        header="Authorization",
        value="Bearer {secret}",
        version_command="codex --version",
        # Codex's config dir on the tmpfs; everything that would call anything but the
        # model (analytics, update checks, plugins, model discovery) is off in the
        # config the adapter writes there (box/codex/config.toml).
        image_env={
            "PATH": "/opt/impyard/bin:/opt/codex/bin:/usr/local/bin:/usr/bin:/bin",
            "CODEX_HOME": "/tmp/codex",
        },
    ),
    "opencode": Agent(
        name="opencode",
        image="impyard-opencode:latest",
        command="exec /opt/impyard/bin/opencode-imp",
        build_hint="just box-opencode",
        package="opencode-ai",
        api="openai-chat",
        upstream="https://api.openai.com",
        header="Authorization",
        value="Bearer {secret}",
        version_command="opencode --version",
        # Every request OpenCode makes besides its model calls, off: the models.dev
        # catalogue, its self-update, session sharing, the default plugins (which npm-install
        # provider auth plugins) and language-server downloads. Project files off too:
        # AGENTS.md, CLAUDE.md, CONTEXT.md and .opencode/ in the knowledge checkout are never
        # read (OPENCODE_DISABLE_PROJECT_CONFIG), nor ~/.claude (OPENCODE_DISABLE_CLAUDE_CODE).
        image_env={
            "PATH": "/opt/impyard/bin:/opt/opencode/bin:/usr/local/bin:/usr/bin:/bin",
            # OpenCode's shell tool runs $SHELL; this bash lets the output reach OpenCode
            # before the exit does (box/opencode/bash says why).
            "SHELL": "/opt/impyard/opencode/bash",
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_SHARE": "1",
            "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
            "OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
            "OPENCODE_DISABLE_PROJECT_CONFIG": "1",
            "OPENCODE_DISABLE_CLAUDE_CODE": "1",
            "OPENCODE_EXPERIMENTAL_DISABLE_FILEWATCHER": "1",
        },
    ),
    "gemini": Agent(
        name="gemini",
        image="impyard-gemini:latest",
        command="exec /opt/impyard/bin/gemini-imp",
        build_hint="just box-gemini",
        package="@google/gemini-cli",
        api="gemini",
        upstream="https://generativelanguage.googleapis.com",
        header="x-goog-api-key",
        value="{secret}",
        version_command="gemini --version",
        # Its settings (usage statistics, telemetry, update checks off) are the image's
        # system settings, set by the adapter; these cover a bare `gemini` in the image.
        image_env={
            "PATH": "/opt/impyard/bin:/opt/gemini/bin:/usr/local/bin:/usr/bin:/bin",
            "GEMINI_CLI_NO_RELAUNCH": "true",
            "GEMINI_TELEMETRY_ENABLED": "false",
        },
        # It adds /v1beta itself (…/v1beta/models/<model>:streamGenerateContent).
        adds_v1=False,
    ),
}


def build_hint(image: str) -> str:
    """How an owner gets ``image`` into the engine (nothing is ever pulled)."""
    if image == DEFAULT_IMAGE:
        return "build it with `just box`"
    for agent in AGENTS.values():
        if agent.image == image:
            return f"build it with `{agent.build_hint}`"
    return f"build it (`docker build -t {image} …`) or load it (`docker load -i FILE`)"


def agent_named(name: str) -> Agent:
    try:
        return AGENTS[name]
    except KeyError:
        known = ", ".join(sorted(AGENTS))
        raise UsageError(f"unknown agent {name!r} (known: {known})") from None


def main(argv: list[str] | None = None) -> int:
    """``python -m impyard.box.images.agents row NAME``: the agent's row as JSON (the image build
    hashes it into its recipe, so a changed row rebuilds that agent's image)."""
    import json
    import sys
    from dataclasses import asdict

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] != "row" or args[1] not in AGENTS:
        print(f"usage: python -m impyard.box.images.agents row {'|'.join(AGENTS)}", file=sys.stderr)
        return 2
    agent = AGENTS[args[1]]
    print(json.dumps({**asdict(agent), "version": agent.version}, sort_keys=True, default=dict))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
