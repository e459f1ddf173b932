"""The run's checkout: where its box works on the imp's knowledge.

Prepared before the box starts, each part recorded in the manifest before it is made:
a rework run's seed plan (the refused files it starts from), the checkout of its base
of the kind the engine supports, and an overlay checkout's volume. When the engine
cannot mount an overlay the cached answer said it could, the run falls back to a full
copy and its box is started again.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from impyard.box.docker.engine import EngineCallError
from impyard.box.launcher.volumes import (
    create_overlay_volume,
    forget_overlay_support,
    remove_volume,
    select_checkout_kind,
)
from impyard.box.spec import box_labels
from impyard.knowledge.checkouts.checkout import (
    Checkout,
    CheckoutKind,
    mount_options,
    prepare_checkout,
)
from impyard.knowledge.checkouts.seed import SeedPlan
from impyard.runs.provision import rework
from impyard.runs.records.active import ActiveRun
from impyard.runs.records.model import RunRequest
from impyard.settings import Settings

if TYPE_CHECKING:
    from impyard.runs.ready.claim import WarmClaim


class RunCheckout:
    """The checkout of one run, and the overlay volume its box mounts (if any)."""

    def __init__(self, run: ActiveRun, settings: Settings) -> None:
        self.run = run
        self.settings = settings
        #: A rework run's files to start from (planned while it prepares).
        self.seed: SeedPlan | None = None

    def plan_seed(self, request: RunRequest) -> SeedPlan | None:
        """What a rework run starts from (None for any other run)."""
        self.seed = rework.seed_plan(self.run.home, self.run.manifest, request)
        return self.seed

    def prepare(self, warm: WarmClaim | None = None) -> None:
        """``warm``: the ready box the run claimed, whose knowledge directory is filled in
        place with a copy, or already holds the checkout (``prefilled``)."""
        m = self.run.manifest
        into = warm.knowledge if warm is not None else None
        kind = "copy" if into is not None else select_checkout_kind(self.settings, self.run.home)
        checkout = self.new_checkout(kind, into, prefilled=warm is not None and warm.prefilled)
        m.checkout = checkout
        if checkout.kind == "overlay" and into is None:  # a ready box's is mounted already
            m.volume = f"impyard-{m.run_id}"
            self.run.save()
            labels = box_labels(m.run_id, m.imp, root=self.run.home.root)
            create_overlay_volume(m.volume, mount_options(checkout), labels=labels)

    def new_checkout(
        self, kind: CheckoutKind, into: Path | None = None, prefilled: bool = False
    ) -> Checkout:
        """The run's checkout of its base; a rework run's holds the files it starts from."""
        run = self.run
        m, user = run.manifest, run.policy.box.user
        checkout = prepare_checkout(
            run.home, m.imp, m.run_id, m.base_commit, kind, user, into, prefilled
        )
        # A ready box's overlay is mounted already: its files go in through the mount.
        seeded = replace(checkout, root=into) if into is not None else checkout
        rework.seed(run.home, m.imp, seeded, self.seed, user)
        return checkout

    def overlay_mount_failed(self, exc: EngineCallError) -> bool:
        """The engine could not mount the run's overlay volume (the box never started)."""
        checkout = self.run.manifest.checkout
        text = str(exc).lower()
        return (
            checkout is not None
            and checkout.kind == "overlay"
            and ("mounting volume" in text or "mount local volume" in text)
        )

    def fall_back_to_copy(self, reason: str) -> None:
        """The cached answer said overlays work and the engine disagrees (it changed under
        the same key): forget the answer, and give this run a full copy instead. Its space
        was sized for an overlay upper dir, so a box that also writes close to
        ``max_repo_bytes`` may fill it sooner than a copy-sized one."""
        run = self.run
        m = run.manifest
        run.event("checkout.fallback", reason=reason[:300])
        forget_overlay_support(run.home)
        self.drop_volume()
        m.volume = None
        run.save()
        m.checkout = self.new_checkout("copy")
        run.save()

    def drop_volume(self) -> None:
        if self.run.manifest.volume:
            remove_volume(self.run.manifest.volume)
