"""``box.runtime``: runc or runsc (gVisor), org-set, an overlay may only move an imp to runsc,
and deploy refuses a runtime the engine does not have, naming the fix."""

from __future__ import annotations

import json
from pathlib import Path

from impyard.dataroot import init_home
from impyard.home import Home
from tests.helpers.cli import Cli
from tests.helpers.policy import edit_org

#: An engine address where nothing answers: whether it has runsc cannot be known.
NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/impyard-test/docker.sock"}
RUNC = 'runtime = "runc"'
RUNSC = 'runtime = "runsc"'


def overlay(home: Path, imp: str, text: str) -> Path:
    path = home / "policy" / "imps" / f"{imp}.toml"
    path.write_text(text)
    return path


def violations(result_stdout: str) -> list[tuple[str, str, str]]:
    document = json.loads(result_stdout)
    assert document["ok"] is False
    return [(v["file"], v["key"], v["rule"]) for v in document["violations"]]


def test_the_shipped_policy_runs_boxes_under_runc(cli: Cli) -> None:
    assert cli("init").code == 0
    assert cli("imp", "create", "yuko").code == 0
    shown = json.loads(cli("policy", "show", "yuko", "--json").stdout)
    value = shown["values"]["box.runtime"]
    assert (value["value"], value["source"], value["overlay_rule"]) == ("runc", "org", "harden")


def test_an_overlay_may_not_move_an_imp_from_runsc_back_to_runc(cli: Cli) -> None:
    home = Home(cli.home)
    init_home(home)
    edit_org(cli.home, RUNC, RUNSC)
    path = overlay(cli.home, "yuko", "[box]\n" + RUNC + "\n")
    result = cli("deploy", "--json", env=NO_ENGINE)
    assert result.code == 1
    found = violations(result.stdout)
    assert found == [(str(path), "box.runtime", "weakens-isolation")]


def test_runsc_is_refused_when_the_engine_cannot_say_it_has_it_naming_the_fix(cli: Cli) -> None:
    home = Home(cli.home)
    init_home(home)
    compiled = home.compiled_policy.read_bytes()
    path = overlay(cli.home, "yuko", "[box]\n" + RUNSC + "\n")
    result = cli("deploy", env=NO_ENGINE)
    assert result.code == 1 and "Traceback" not in result.stderr
    line = next(line for line in result.stderr.splitlines() if str(path) in line)
    assert "box.runtime" in line and "rule runtime-unavailable" in line
    assert "bash scripts/gvisor.sh" in line
    # The overlay itself is a valid tightening: without it the same deploy goes through.
    assert home.compiled_policy.read_bytes() == compiled
    path.unlink()
    assert cli("deploy", env=NO_ENGINE).code == 0


def test_a_runc_policy_never_asks_the_engine(cli: Cli) -> None:
    assert cli("init", env=NO_ENGINE).code == 0
    overlay(cli.home, "yuko", "[box]\n" + RUNC + "\n")
    assert cli("deploy", env=NO_ENGINE).code == 0


def test_init_runtime_names_runsc_in_a_new_data_roots_org_policy(cli: Cli) -> None:
    result = cli("init", env={"IMPYARD_INIT_RUNTIME": "runsc", **NO_ENGINE})
    # The policy is written, then refused by the deploy init runs: no engine has runsc here.
    assert result.code == 1 and "bash scripts/gvisor.sh" in result.stderr
    assert '\nruntime = "runsc"\n' in (cli.home / "policy" / "org.toml").read_text()
    other = Cli(home=cli.home.parent / "other")
    bad = other("init", env={"IMPYARD_INIT_RUNTIME": "kata"})
    assert bad.code != 0 and "IMPYARD_INIT_RUNTIME" in bad.stderr
