"""Which data root a command uses: --home, IMPYARD_HOME, the nearest .impyard, per-user."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from impyard.dataroot import init_home
from impyard.home import Home, resolve_home_source
from tests.helpers.git import GIT_ENV


def test_the_flag_wins_then_the_environment(tmp_path: Path) -> None:
    env = {"IMPYARD_HOME": str(tmp_path / "env"), "XDG_DATA_HOME": str(tmp_path / "xdg")}
    flag = resolve_home_source(tmp_path / "flag", env, cwd=tmp_path)
    assert (flag.root, flag.source) == (tmp_path / "flag", "flag")
    from_env = resolve_home_source(None, env, cwd=tmp_path)
    assert (from_env.root, from_env.source) == (tmp_path / "env", "env")


def test_the_nearest_initialized_impyard_in_a_parent_is_found(tmp_path: Path) -> None:
    init_home(Home(tmp_path / "project" / ".impyard"))
    deep = tmp_path / "project" / "src" / "deeper"
    deep.mkdir(parents=True)
    (deep / ".impyard").mkdir()  # an empty directory is no data root: it is passed over
    found = resolve_home_source(None, {}, cwd=deep)
    assert (found.root, found.source) == (tmp_path / "project" / ".impyard", "found")


def test_else_the_per_user_default(tmp_path: Path) -> None:
    xdg = resolve_home_source(None, {"XDG_DATA_HOME": str(tmp_path / "xdg")}, cwd=tmp_path)
    assert (xdg.root, xdg.source) == (tmp_path / "xdg" / "impyard", "user")
    plain = resolve_home_source(None, {}, cwd=tmp_path)
    assert plain.root == Path.home() / ".local" / "share" / "impyard"
    relative = resolve_home_source(None, {"XDG_DATA_HOME": "rel"}, cwd=tmp_path)
    assert relative.root == plain.root  # the XDG spec ignores a relative path


def impyard(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k not in ("IMPYARD_HOME", "XDG_DATA_HOME")}
    return subprocess.run(
        [sys.executable, "-m", "impyard", *args],
        cwd=cwd,
        env={**full, **GIT_ENV, **env, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_commands_use_the_per_user_default_and_a_found_root_and_status_says_which(
    tmp_path: Path,
) -> None:
    xdg = {"XDG_DATA_HOME": str(tmp_path / "xdg")}
    work = tmp_path / "work"
    work.mkdir()
    assert impyard("init", cwd=work, env=xdg).returncode == 0
    assert (tmp_path / "xdg" / "impyard" / "policy" / "org.toml").is_file()
    assert not (work / ".impyard").exists()
    shown = impyard("status", "--json", cwd=work, env=xdg)
    document = json.loads(shown.stdout)
    assert document["home_source"] == "user"

    project = tmp_path / "project"
    assert impyard("--home", str(project / ".impyard"), "init", cwd=work, env=xdg).returncode == 0
    deep = project / "a" / "b"
    deep.mkdir(parents=True)
    created = impyard("imp", "create", "ada", cwd=deep, env=xdg)
    assert created.returncode == 0, created.stderr
    assert (project / ".impyard" / "knowledge" / "ada" / "repo.git").is_dir()
    text = impyard("status", cwd=deep, env=xdg).stdout.splitlines()
    assert text[1] == "data root  the nearest .impyard from the current directory"
    assert str(project / ".impyard") in text[0]

    via_env = impyard("status", cwd=deep, env={**xdg, "IMPYARD_HOME": str(project / ".impyard")})
    assert via_env.stdout.splitlines()[1] == "data root  from IMPYARD_HOME"


def test_no_data_root_names_where_it_looked_and_why(tmp_path: Path) -> None:
    missing = impyard("imp", "list", cwd=tmp_path, env={"XDG_DATA_HOME": str(tmp_path / "x")})
    assert missing.returncode == 2
    assert missing.stderr.strip() == (
        f"impyard: error: no Impyard data root at {tmp_path / 'x' / 'impyard'} "
        "(the per-user default ($XDG_DATA_HOME/impyard)): run `impyard init` first"
    )


def test_the_service_unit_defaults_to_var_lib_not_a_per_user_root(tmp_path: Path) -> None:
    env = {"XDG_DATA_HOME": str(tmp_path / "xdg")}
    unit = impyard("service", "print", cwd=tmp_path, env=env)
    assert "--home /var/lib/impyard serve" in unit.stdout, unit.stdout + unit.stderr
    chosen = impyard("service", "print", cwd=tmp_path, env={**env, "IMPYARD_HOME": "/srv/imp"})
    assert "--home /srv/imp serve" in chosen.stdout
