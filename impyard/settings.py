"""All runtime settings in one typed place (env prefix ``IMPYARD_``).

Policy (what an imp may do) lives in ``impyard.policy``; settings are about how
this host runs: where the data root is, how many boxes at once, how to reach
the engine.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

CheckoutChoice = Literal["auto", "overlay", "copy"]


def _default_concurrency() -> int:
    return 2 * (os.cpu_count() or 1)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="IMPYARD_", extra="ignore")

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
    lease_ttl_seconds: float = Field(
        default=120.0,
        gt=0,
        description="Seconds without a heartbeat after which a lease is expired.",
    )


def load_settings(home: Path | None = None) -> Settings:
    """Settings from the environment, with an explicit ``--home`` taking precedence."""
    settings = Settings()
    if home is not None:
        settings = settings.model_copy(update={"home": home})
    return settings.model_copy(update={"home": settings.home.absolute()})
