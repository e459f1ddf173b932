"""Owners of imps that run a real agent, for the docker tests: the policy an agent's
section of docs/agents.md gives (its route pointed at the scripted model server), and the
proof that the provider key never enters the box."""

from __future__ import annotations

import base64
import re
from pathlib import Path

from tests.helpers.cli import Cli

REPO = Path(__file__).resolve().parents[2]
SECRET = "sk-impyard-test-0123456789abcdefghijklmnopqrstuv"
SECRET_ENV = {"IMPYARD_SECRET_LLM": SECRET}


def documented_policy(section: str, upstream: str, model: str) -> str:
    """The TOML block of ``## <section>`` in docs/agents.md, its route's upstream (a
    private one allowed) and its model replaced."""
    text = (REPO / "docs" / "agents.md").read_text()
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```toml\n(.*?)```", body, re.DOTALL)
    assert block is not None, f"docs/agents.md's {section} section has no TOML block"
    # The scripted model server listens on loopback, which a route reaches only when allowed.
    toml = re.sub(
        r'upstream = "[^"]+"',
        f'upstream = "{upstream}"\nallow_private = true',
        block.group(1),
    )
    return re.sub(r'IMPYARD_MODEL = "[^"]+"', f'IMPYARD_MODEL = "{model}"', toml)


def set_up_agent_owner(
    cli: Cli,
    *,
    section: str,
    agent: str,
    image: str,
    upstream: str,
    model: str,
    extra: str = "",
    imps: tuple[str, ...] = ("yuko",),
) -> None:
    """A data root whose org policy is the agent's documented one (plus ``extra``), with
    ``imps`` created to run ``agent`` in ``image``."""
    assert cli("init").code == 0
    org = cli.home / "policy" / "org.toml"
    policy = documented_policy(section, upstream, model)
    org.write_text(org.read_text() + "\n" + policy + "\n" + extra)
    deployed = cli("deploy")
    assert deployed.code == 0, deployed.stdout + deployed.stderr
    for imp in imps:
        created = cli("imp", "create", imp, "--agent", agent, "--image", image)
        assert created.code == 0, created.stderr


def secret_probe(secret: str) -> str:
    """A shell command that looks for ``secret`` in every process's environment and under
    /tmp, /opt/impyard and /etc, printing ``hits=0`` when it is nowhere, then the box's
    environment. The pattern arrives base64-encoded, so the command never holds it, and is
    read from a pipe: the Gemini CLI refuses any command with a command substitution."""
    encoded = base64.b64encode(secret.encode()).decode()
    return (
        f"echo {encoded} | base64 -d | {{ read -r s; hits=0; "
        'for f in /proc/[0-9]*/environ; do grep -qaF -e "$s" "$f" 2>/dev/null && '
        'echo "hit $f" && hits=1; done; '
        'grep -rlaF -e "$s" /tmp /opt/impyard /etc 2>/dev/null && hits=1; '
        'echo "hits=$hits"; env | sort; }'
    )


def assert_secret_kept_out(cli: Cli, run_id: str, secret: str) -> None:
    """``secret`` is in none of the run's logs, its record, the journal, or any file of the
    data root but the knowledge repositories'."""
    for output in (
        cli("runs", "logs", run_id).stdout,
        cli("runs", "show", run_id, "--json").stdout,
        cli("journal", "--json").stdout,
    ):
        assert secret not in output
    for path in cli.home.rglob("*"):
        if path.is_file() and "repo.git" not in path.parts and "origin.git" not in path.parts:
            assert secret.encode() not in path.read_bytes(), path
