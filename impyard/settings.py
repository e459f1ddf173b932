"""All runtime settings in one typed place (env prefix ``IMPYARD_``).

Policy (what an imp may do) lives in ``impyard.policy``; settings are about how
this host runs: where the data root is, how many boxes at once, how to reach
the engine.

The environment is read here, by name, into a plain pydantic model, which parses each
value as pydantic-settings would (``"true"``, ``"1"`` and ``"yes"`` are true; numbers
from text). pydantic-settings itself is not used: importing it (with the asyncio,
dotenv and argparse machinery of sources Impyard never reads) cost 25-95 ms of every
command that loads settings, a foreground run among them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from impyard.common.errors import ConfigError

ENV_PREFIX = "IMPYARD_"

CheckoutChoice = Literal["auto", "overlay", "copy"]


def _default_concurrency() -> int:
    return 2 * (os.cpu_count() or 1)


class Settings(BaseModel):
    model_config = ConfigDict(extra="ignore")

    home: Path = Field(
        default=Path(".impyard"),
        description="Data root holding policy, knowledge repos, runs, memory and the journal.",
    )
    checkout: CheckoutChoice = Field(
        default="auto",
        description="How a run's checkout is made: an overlay volume, a full copy, or auto-detect.",
    )
    concurrency: int = Field(
        default_factory=_default_concurrency,
        ge=1,
        description="How many boxes `impyard serve` runs at once by default.",
    )
    shutdown_grace_seconds: float = Field(
        default=30.0,
        ge=0,
        description="On SIGINT/SIGTERM, how long serve lets running boxes finish.",
    )
    strict_policy: bool = Field(
        default=False,
        description="Refuse to run when policy files changed since `impyard deploy` (else warn).",
    )
    docker_timeout_seconds: float = Field(
        default=60.0,
        gt=0,
        description="Timeout of one Docker API call.",
    )
    run_space: Literal["auto", "loop", "plain"] = Field(
        default="auto",
        description="Each run's writable space: a size-limited loop filesystem, a plain "
        "directory, or auto (loop where this host can mount one).",
    )
    disk_reserve_bytes: int = Field(
        default=512 * 1024 * 1024,
        ge=0,
        description="Free space on the data root kept for the host's own state; a run is "
        "admitted only when it fits beside it.",
    )
    init_runtime: Literal["runc", "runsc"] = Field(
        default="runc",
        description="The box.runtime the org policy a new data root gets (`impyard init`) "
        "names: runc, or runsc (gVisor).",
    )
    lease_ttl_seconds: float = Field(
        default=120.0,
        gt=0,
        description="Seconds without a heartbeat after which a lease is expired.",
    )


def environment_values(environ: Mapping[str, str]) -> dict[str, str]:
    """Each setting's ``IMPYARD_<NAME>`` variable in ``environ``, by setting name. Names
    match in any case, as environment variables were always read here."""
    fields = {name.upper(): name for name in Settings.model_fields}
    found = {}
    for key, value in environ.items():
        upper = key.upper()
        name = fields.get(upper.removeprefix(ENV_PREFIX)) if upper.startswith(ENV_PREFIX) else None
        if name is not None:
            found[name] = value
    return found


def load_settings(home: Path | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from the environment, with an explicit ``--home`` taking precedence.

    A variable that does not parse is a ConfigError naming every one that does not."""
    values = environment_values(os.environ if environ is None else environ)
    try:
        settings = Settings.model_validate(values)
    except ValidationError as exc:
        problems = [
            f"{ENV_PREFIX}{str(error['loc'][0]).upper()}={error['input']!r}: {error['msg']}"
            for error in exc.errors()
        ]
        raise ConfigError("bad setting in the environment: " + "; ".join(problems)) from None
    if home is not None:
        settings = settings.model_copy(update={"home": home})
    return settings.model_copy(update={"home": settings.home.absolute()})
