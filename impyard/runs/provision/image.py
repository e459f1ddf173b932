"""The image a run's box runs, and the CA bundle its box trusts."""

from __future__ import annotations

from pathlib import Path

from impyard.box.images.image_roots import HELPER_IMAGE_ROOTS, image_roots
from impyard.box.images.trust import write_box_bundle
from impyard.box.launcher.helpers import helper_labels
from impyard.box.launcher.launch import resolve_image
from impyard.gateway.wiring.ca import ca_certificate
from impyard.home import Home
from impyard.policy.models import EffectivePolicy
from impyard.runs.provision.boxspec import box_command
from impyard.runs.records.model import Manifest, RunRequest


def resolve_run_image(
    home: Home, manifest: Manifest, request: RunRequest, policy: EffectivePolicy
) -> str:
    """The id of the image the box runs, and the trust bundle made for it."""
    _command, image = box_command(home, manifest, request, policy)
    image_id = resolve_image(image)
    write_trust(home, manifest, policy, image_id)
    return image_id


def write_trust(home: Home, manifest: Manifest, policy: EffectivePolicy, image_id: str) -> None:
    """The box's CA bundle: its image's roots, plus the inspection CA and the owner's
    extra CA when they apply (nothing is written when neither does)."""
    gateway = policy.gateway
    inspecting = gateway.enabled and gateway.inspect_tls
    extra = policy.box.extra_ca_file
    if not inspecting and extra is None:
        return
    # The run's owner lock is held by its driver from admission to its end.
    lock = home.run_owner_lock(manifest.run_id)
    labels = helper_labels(home.root, lock, HELPER_IMAGE_ROOTS, manifest.run_id, manifest.imp)
    write_box_bundle(
        home.run_ca_bundle(manifest.run_id),
        image_roots(home.image_roots_dir, image_id, labels),
        inspection_ca=ca_certificate(home.gateway_ca_dir) if inspecting else None,
        extra_ca_file=Path(extra) if extra is not None else None,
        shared_dir=home.box_bundles_dir,
    )
