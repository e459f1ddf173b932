"""`impyard deploy`: tighten-only overlays, every violation listed, compiled.json all-or-nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _pytest.mark import ParameterSet

from impyard.dataroot import init_home
from impyard.home import Home
from impyard.policy import PolicyError, deploy, policy_for_run
from tests.helpers.cli import Cli
from tests.helpers.policy import edit_org

GATEWAY_ORG = """
[[gateway.allow]]
host = "*.example.com"
ports = [443]
methods = ["GET", "HEAD"]

[[gateway.route]]
name = "llm"
upstream = "https://api.example.com"
header = "Authorization"
value = "Bearer {secret}"
secret_env = "IMPYARD_SECRET_LLM"
methods = ["POST"]
"""


def write_overlay(home: Path, imp: str, text: str) -> Path:
    path = home / "policy" / "imps" / f"{imp}.toml"
    path.write_text(text)
    return path


@pytest.fixture
def deployed(cli: Cli) -> Cli:
    """An initialized home with a good compiled.json (org + one tightening overlay).

    Built in-process (the CLI path of init and deploy is tested elsewhere) to keep this fast.
    """
    home = Home(cli.home)
    init_home(home)
    edit_org(cli.home, "[gateway.budget]", GATEWAY_ORG + "\n[gateway.budget]")
    write_overlay(cli.home, "good", "[knowledge]\nmax_file_chars = 1000\n")
    deploy(home)
    return cli


ALLOW = '[[gateway.allow]]\nhost = "{host}"\nports = {ports}\nmethods = {methods}\n'
ROUTE = (
    '[[gateway.route]]\nname = "{name}"\nupstream = "{upstream}"\nheader = "Authorization"\n'
    'value = "Bearer {{secret}}"\nsecret_env = "IMPYARD_SECRET_LLM"\nmethods = ["POST"]\n'
)
ORG_OFF = {
    "knowledge": ("[knowledge]\nenabled = true", "[knowledge]\nenabled = false"),
    "checkpoint": ("checkpoint_on_clean_exit = true", "checkpoint_on_clean_exit = false"),
    "gateway": ("[gateway]\nenabled = true", "[gateway]\nenabled = false"),
}


def case(
    name: str, overlay: str, key: str, rule: str, org_edit: tuple[str, str] | None = None
) -> ParameterSet:
    """An overlay that must be refused: the message names ``key`` and ``rule``."""
    return pytest.param(org_edit, overlay, key, rule, id=name)


FORBIDDEN = [
    case(
        "enlarged max_file_chars",
        "[knowledge]\nmax_file_chars = 200001\n",
        "knowledge.max_file_chars",
        "enlarges-limit",
    ),
    case(
        "enabled over org false",
        "[knowledge]\nenabled = true\n",
        "knowledge.enabled",
        "enables-feature",
        ORG_OFF["knowledge"],
    ),
    case(
        "checkpoint over org false",
        "[knowledge]\ncheckpoint_on_clean_exit = true\n",
        "knowledge.checkpoint_on_clean_exit",
        "enables-feature",
        ORG_OFF["checkpoint"],
    ),
    case(
        "gateway over org false",
        "[gateway]\nenabled = true\n",
        "gateway.enabled",
        "enables-feature",
        ORG_OFF["gateway"],
    ),
    case(
        "lease removed",
        "[knowledge]\nreorganization_requires_exclusive_lease = false\n",
        "knowledge.reorganization_requires_exclusive_lease",
        "removes-requirement",
    ),
    case(
        "unknown key",
        "[knowledge]\nmax_file_char = 100\n",
        "knowledge.max_file_char",
        "unknown-key",
    ),
    case("unknown section", '[network]\nmode = "host"\n', "network", "unknown-key"),
    case("negative limit", "[box]\npids_limit = -1\n", "box.pids_limit", "out-of-range"),
    case(
        "wrong type",
        '[knowledge]\nmax_file_chars = "100"\n',
        "knowledge.max_file_chars",
        "wrong-type",
    ),
    case("bool as number", "[knowledge]\nenabled = 0\n", "knowledge.enabled", "wrong-type"),
    case(
        "normal_mode changed",
        '[knowledge]\nnormal_mode = "reorganize"\n',
        "knowledge.normal_mode",
        "invalid-value",
    ),
    case(
        "more memory",
        "[box]\nmemory_bytes = 4294967296\n",
        "box.memory_bytes",
        "enlarges-limit",
    ),
    case("more cpus", "[box]\ncpus = 1.5\n", "box.cpus", "enlarges-limit"),
    case(
        "longer timeout",
        "[box]\ntimeout_seconds = 7200\n",
        "box.timeout_seconds",
        "enlarges-limit",
    ),
    case(
        "bigger budget",
        "[gateway.budget]\nrequests_per_run = 501\n",
        "gateway.budget.requests_per_run",
        "enlarges-limit",
    ),
    case("other user", '[box]\nuser = "1000:1000"\n', "box.user", "org-only"),
    case("other gateway port", "[gateway]\nport = 8080\n", "gateway.port", "org-only"),
    case(
        "host not granted",
        ALLOW.format(host="evil.org", ports="[443]", methods='["GET"]'),
        "gateway.allow[0]",
        "not-granted",
    ),
    case(
        "apex of a wildcard",
        ALLOW.format(host="example.com", ports="[443]", methods='["GET"]'),
        "gateway.allow[0]",
        "not-granted",
    ),
    case(
        "method not granted",
        ALLOW.format(host="docs.example.com", ports="[443]", methods='["POST"]'),
        "gateway.allow[0]",
        "not-granted",
    ),
    case(
        "port not granted",
        ALLOW.format(host="docs.example.com", ports="[443, 80]", methods='["GET"]'),
        "gateway.allow[0]",
        "not-granted",
    ),
    case(
        "route not granted",
        ROUTE.format(name="other", upstream="https://api.example.com"),
        "gateway.route[0]",
        "not-granted",
    ),
    case(
        "route upstream changed",
        ROUTE.format(name="llm", upstream="https://evil.example.net"),
        "gateway.route[0]",
        "not-granted",
    ),
    case("toml syntax", "[knowledge\nmax_file_chars = 1\n", "(file)", "toml-syntax"),
]


@pytest.mark.parametrize(("org_edit", "overlay", "key", "rule"), FORBIDDEN)
def test_forbidden_overlay_fails_naming_file_and_key_and_keeps_compiled(
    deployed: Cli, org_edit: tuple[str, str] | None, overlay: str, key: str, rule: str
) -> None:
    compiled = deployed.home / "policy" / "compiled.json"
    before = compiled.read_bytes()
    if org_edit is not None:
        # The org change alone is valid; only the overlay on top of it is not.
        edit_org(deployed.home, *org_edit)
    path = write_overlay(deployed.home, "bad", overlay)

    result = deployed("deploy")

    assert result.code != 0
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if str(path) in line]
    assert any(f"{path}: {key}:" in line and f"rule {rule}" in line for line in lines), (
        result.stderr
    )
    assert compiled.read_bytes() == before


def test_json_failure_lists_violations_with_org_and_attempted_values(deployed: Cli) -> None:
    before = (deployed.home / "policy" / "compiled.json").read_bytes()
    path = write_overlay(deployed.home, "bad", "[knowledge]\nmax_file_chars = 300000\n")
    result = deployed("deploy", "--json")
    assert result.code == 1
    document = json.loads(result.stdout)
    assert document["ok"] is False
    assert document["violations"] == [
        {
            "file": str(path),
            "key": "knowledge.max_file_chars",
            "rule": "enlarges-limit",
            "message": "may only be lowered (org limit 200000)",
            "org_value": 200000,
            "attempted_value": 300000,
        }
    ]
    assert (deployed.home / "policy" / "compiled.json").read_bytes() == before


def test_every_violation_of_every_file_is_reported_at_once(deployed: Cli) -> None:
    one = write_overlay(
        deployed.home,
        "one",
        '[knowledge]\nmax_file_chars = 300000\nenabled = "yes"\nsurprise = 1\n'
        '[[gateway.allow]]\nhost = "evil.org"\n',
    )
    two = write_overlay(deployed.home, "two", "[box]\npids_limit = 0\n")
    result = deployed("deploy")
    assert result.code == 1
    assert "5 violations" in result.stderr
    for path, key in [
        (one, "knowledge.max_file_chars"),  # found even though the same file has type errors
        (one, "knowledge.enabled"),
        (one, "knowledge.surprise"),
        (one, "gateway.allow[0]"),
        (two, "box.pids_limit"),
    ]:
        assert f"{path}: {key}:" in result.stderr


def test_invalid_org_policy_is_reported_and_nothing_is_deployed(deployed: Cli) -> None:
    before = (deployed.home / "policy" / "compiled.json").read_bytes()
    edit_org(deployed.home, "max_file_chars = 200000", "max_file_chars = -5")
    result = deployed("deploy")
    assert result.code == 1
    assert f"{deployed.home / 'policy' / 'org.toml'}: knowledge.max_file_chars:" in result.stderr
    assert (deployed.home / "policy" / "compiled.json").read_bytes() == before


def test_overlay_named_like_no_imp_is_an_error(deployed: Cli) -> None:
    path = write_overlay(deployed.home, "Not_An_Imp", "[knowledge]\nenabled = false\n")
    result = deployed("deploy")
    assert result.code == 1
    assert f"{path}: (file): " in result.stderr
    assert "bad-imp-name" in result.stderr


def test_tightening_overlay_shows_in_deploy_and_applies_to_that_imp_only(cli: Cli) -> None:
    assert cli("init").code == 0
    write_overlay(cli.home, "yuko", "[knowledge]\nmax_file_chars = 12345\nenabled = false\n")

    table = cli("deploy")
    assert table.code == 0, table.stderr
    # One row per limit, one column per policy: the org's, then each imp's.
    rows = {line.split()[0]: line.split()[1:] for line in table.stdout.splitlines()[1:]}
    assert rows["limit"] == ["(org)", "yuko"]
    assert rows["max_file_chars"] == ["200000", "12345"]
    assert rows["knowledge"] == ["on", "off"]

    document = json.loads(cli("deploy", "--json").stdout)
    assert document["imps"]["yuko"]["max_file_chars"] == 12345
    assert document["imps"]["yuko"]["knowledge"] is False
    assert document["org"]["max_file_chars"] == 200000

    home = Home(cli.home)
    yuko, warnings = policy_for_run(home, "yuko", strict=True)
    assert warnings == []
    assert yuko.knowledge.enabled is False
    # A note of 20,000 characters: within the org's limit, beyond yuko's.
    assert yuko.knowledge.max_file_chars < 20_000 <= 200_000
    other, _ = policy_for_run(home, "kiko", strict=True)
    assert other.knowledge.enabled is True
    assert other.knowledge.max_file_chars == 200_000


def test_overlay_may_keep_narrower_gateway_grants_and_pick_its_image(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    init_home(home)
    edit_org(home.root, "[gateway.budget]", GATEWAY_ORG + "\n[gateway.budget]")
    write_overlay(
        home.root,
        "yuko",
        '[box]\nimage = "yuko-box:1"\nuser = "65532:65532"\n'  # repeating an org-only value is fine
        '[[gateway.allow]]\nhost = "docs.example.com"\nports = [443]\nmethods = ["GET"]\n'
        '[[gateway.route]]\nname = "llm"\nupstream = "https://api.example.com"\n'
        'header = "Authorization"\nvalue = "Bearer {secret}"\n'
        'secret_env = "IMPYARD_SECRET_LLM"\nmethods = ["POST"]\n'
        "[gateway.budget]\nrequests_per_run = 3\n",
    )
    report = deploy(home)
    yuko = report.policy_for("yuko")
    assert yuko.box.image == "yuko-box:1"
    assert [rule.host for rule in yuko.gateway.allow] == ["docs.example.com"]
    assert yuko.gateway.find_allow("www.example.com", 443, None) is None
    assert yuko.gateway.budget.requests_per_run == 3
    assert report.policy_for("kiko").gateway.find_allow("www.example.com", 443, None) == 0


def test_deploy_writes_sources_fingerprints(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    init_home(home)
    write_overlay(home.root, "yuko", "[knowledge]\nenabled = false\n")
    deploy(home)
    document = json.loads(home.compiled_policy.read_text())
    assert set(document["sources"]) == {"org.toml", "imps/yuko.toml"}
    assert document["imps"]["yuko"]["knowledge"]["enabled"] is False
    assert document["org"]["knowledge"]["enabled"] is True


def test_policy_error_carries_every_violation(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    init_home(home)  # init compiles the default policy once
    compiled_before = home.compiled_policy.read_bytes()
    write_overlay(home.root, "yuko", "[knowledge]\nmax_file_chars = 0\nmax_repo_bytes = -1\n")
    with pytest.raises(PolicyError) as info:
        deploy(home)
    assert [v.key for v in info.value.violations] == [
        "knowledge.max_file_chars",
        "knowledge.max_repo_bytes",
    ]
    assert home.compiled_policy.read_bytes() == compiled_before


def test_box_env_reaches_the_effective_policy_and_an_overlay_adds_to_it(deployed: Cli) -> None:
    edit_org(
        deployed.home,
        "[gateway]",
        '[box.env]\nIMPYARD_MODEL = "gpt-4o-mini"\nLANG = "C.UTF-8"\n\n[gateway]',
    )
    write_overlay(
        deployed.home,
        "yuko",
        '[box.env]\nIMPYARD_MODEL = "qwen2.5"\nIMPYARD_MODEL_ROUTE = "local"\n',
    )
    result = deployed("deploy")
    assert result.code == 0, result.stderr
    home = Home(deployed.home)
    yuko, _ = policy_for_run(home, "yuko", strict=True)
    assert yuko.box.env == {
        "IMPYARD_MODEL": "qwen2.5",
        "LANG": "C.UTF-8",
        "IMPYARD_MODEL_ROUTE": "local",
    }
    other, _ = policy_for_run(home, "kiko", strict=True)
    assert other.box.env == {"IMPYARD_MODEL": "gpt-4o-mini", "LANG": "C.UTF-8"}


def test_box_env_names_the_host_owns_are_violations_naming_each_key(deployed: Cli) -> None:
    before = (deployed.home / "policy" / "compiled.json").read_bytes()
    path = write_overlay(
        deployed.home,
        "yuko",
        "[box.env]\n"
        'IMPYARD_RUN_ID = "run-forged"\n'
        'https_proxy = "http://evil.example:8080"\n'
        'TMPDIR = "/var/tmp"\n'
        'HOME = "/"\n'
        'SSL_CERT_FILE = "/etc/hosts"\n'
        'API_KEY = "sk-abcdefghijklmnopqrstuvwxyz0123456789"\n'
        'IMPYARD_MODEL = "fine"\n',
    )
    result = deployed("deploy", "--json")
    assert result.code == 1
    violations = json.loads(result.stdout)["violations"]
    by_key = {v["key"]: v for v in violations}
    assert set(by_key) == {
        "box.env.IMPYARD_RUN_ID",
        "box.env.https_proxy",
        "box.env.TMPDIR",
        "box.env.HOME",
        "box.env.SSL_CERT_FILE",
        "box.env.API_KEY",
    }
    assert all(v["file"] == str(path) and v["rule"] == "invalid-value" for v in violations)
    assert "IMPYARD_* variables come from the host" in by_key["box.env.IMPYARD_RUN_ID"]["message"]
    assert "gateway" in by_key["box.env.https_proxy"]["message"]
    assert "credential" in by_key["box.env.API_KEY"]["message"]
    assert "sk-abc" not in result.stdout  # a secret in the wrong place is never echoed back
    assert by_key["box.env.API_KEY"]["attempted_value"] == "<hidden>"
    assert by_key["box.env.TMPDIR"]["attempted_value"] == "TMPDIR"  # the refused name
    assert (deployed.home / "policy" / "compiled.json").read_bytes() == before


def test_extra_ca_file_is_org_only_and_absolute(deployed: Cli) -> None:
    path = write_overlay(deployed.home, "yuko", '[box]\nextra_ca_file = "/etc/ssl/mine.pem"\n')
    result = deployed("deploy", "--json")
    assert result.code == 1
    [violation] = json.loads(result.stdout)["violations"]
    assert (violation["file"], violation["key"], violation["rule"]) == (
        str(path),
        "box.extra_ca_file",
        "org-only",
    )
    path.unlink()
    edit_org(deployed.home, 'network = "none"', 'network = "none"\nextra_ca_file = "ca.pem"')
    result = deployed("deploy", "--json")
    assert result.code == 1
    [violation] = json.loads(result.stdout)["violations"]
    assert violation["key"] == "box.extra_ca_file"
    assert "absolute" in violation["message"]
