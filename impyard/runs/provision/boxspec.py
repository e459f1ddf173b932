"""The box contract of one run, as data: what the box runs, sees and may use.

Everything the box gets is assembled here from the manifest, the effective policy and
the request: the command, the mounts (checkout, published origin, task file, the
owner's CA, the gateway's signal dir), the environment, the limits and the timeout.
"""

from __future__ import annotations

from impyard.box.images.trust import BOX_CA_BUNDLE, bundle_env
from impyard.box.spec import BoxMount, BoxSpec, box_labels
from impyard.common.fsutil import atomic_write_text
from impyard.gateway.wiring.boxside import BOX_READY_PATH, BOX_SIGNAL_DIR, WAIT_FOR_ENV, proxy_env
from impyard.home import Home
from impyard.knowledge.change import KnowledgeLimits
from impyard.knowledge.checkouts.checkout import Checkout
from impyard.knowledge.checkouts.seed import SeedPlan
from impyard.knowledge.imps import read_imp_settings
from impyard.memory.block import memory_block
from impyard.policy.models import EffectivePolicy
from impyard.runs.provision.rework import task_text
from impyard.runs.provision.taint import READ_ONLY, read_only_knowledge
from impyard.runs.records.model import Manifest, RunRequest

BOX_KNOWLEDGE = "/opt/impyard/knowledge"
BOX_ORIGIN = "/opt/impyard/origin.git"
BOX_TASK = "/opt/impyard/task.md"
BOX_INIT = "/opt/impyard/bin/box-init"


def box_timeout(request: RunRequest, policy: EffectivePolicy) -> float:
    """``--timeout`` may shorten the policy's wall-clock limit, never lengthen it."""
    ceiling = float(policy.box.timeout_seconds)
    return min(request.timeout_seconds, ceiling) if request.timeout_seconds else ceiling


def write_task_file(
    home: Home, request: RunRequest, manifest: Manifest, seed: SeedPlan | None = None
) -> None:
    """The prompt (a rework run's quotes it with every violation it must fix), plus the
    channel's Memory block (interaction memory, never knowledge)."""
    path = home.run_task(manifest.run_id)
    text = request.prompt.rstrip("\n") + "\n"
    if request.rework is not None:
        text = task_text(request.rework, request.prompt, manifest.namespace, seed)
    if request.channel:
        block = memory_block(home, manifest.imp, request.channel)
        if block:
            text += "\n" + block.rstrip("\n") + "\n"
    atomic_write_text(path, text)
    path.chmod(0o644)


def box_command(
    home: Home, manifest: Manifest, request: RunRequest, policy: EffectivePolicy
) -> tuple[list[str], str]:
    """The argument vector and image: an owner's ``--command``, the imp's, or the policy's."""
    imp_settings = read_imp_settings(home, manifest.imp)
    if request.command is not None:
        command = ["/bin/sh", "-c", request.command]
    elif imp_settings.command:
        command = ["/bin/sh", "-c", imp_settings.command]
    else:
        command = list(policy.box.command)
    return command, imp_settings.image or policy.box.image


def box_spec(
    home: Home,
    manifest: Manifest,
    policy: EffectivePolicy,
    request: RunRequest,
) -> BoxSpec:
    m, box = manifest, policy.box
    command, image = box_command(home, m, request, policy)
    # The owner's [box.env] first: the host's contract variables below always win (policy
    # validation already refuses the names they use).
    env = {
        **box.env,
        "IMPYARD_IMP": m.imp,
        "IMPYARD_RUN_ID": m.run_id,
        "IMPYARD_TASK_FILE": BOX_TASK,
        "TMPDIR": "/tmp",
        "HOME": "/tmp",
    }
    mounts = [
        BoxMount(source=str(home.origin(m.imp)), target=BOX_ORIGIN, read_only=True),
        BoxMount(source=str(home.run_task(m.run_id)), target=BOX_TASK, read_only=True),
    ]
    if m.checkout is not None:  # none when policy turns knowledge off
        read_only = read_only_knowledge(m, m.limits or KnowledgeLimits.of(policy.knowledge))
        mounts.insert(0, _knowledge_mount(m.checkout, m.volume, read_only))
        if read_only:
            env["IMPYARD_KNOWLEDGE_READ_ONLY"] = READ_ONLY
        env |= {
            "IMPYARD_KNOWLEDGE_DIR": BOX_KNOWLEDGE,
            "IMPYARD_KNOWLEDGE_BASE": m.base_commit,
            "IMPYARD_KNOWLEDGE_NAMESPACE": m.namespace,
            "IMPYARD_KNOWLEDGE_MODE": m.mode,
        }
    entrypoint = None
    bundle = home.run_ca_bundle(m.run_id)
    if bundle.exists():  # written at prepare when the box trusts more than its image
        env |= bundle_env()
        mounts.append(BoxMount(source=str(bundle), target=BOX_CA_BUNDLE, read_only=True))
    if policy.gateway.enabled:  # the run's gateway attaches once the box runs
        env |= proxy_env(policy.gateway.port) | {WAIT_FOR_ENV: BOX_READY_PATH}
        signal = home.run_signal_dir(m.run_id)
        mounts.append(BoxMount(source=str(signal), target=BOX_SIGNAL_DIR, read_only=True))
        entrypoint = [BOX_INIT]
    return BoxSpec(
        name=m.container_name or f"impyard-{m.run_id}",
        image=image,
        command=command,
        user=box.user,
        env=env,
        mounts=mounts,
        entrypoint=entrypoint,
        memory_bytes=box.memory_bytes,
        cpus=box.cpus,
        pids_limit=box.pids_limit,
        network=box.network,
        runtime=m.runtime or box.runtime,
        labels=box_labels(m.run_id, m.imp, root=home.root),
        timeout_seconds=m.timeout_seconds or box_timeout(request, policy),
    )


def _knowledge_mount(checkout: Checkout, volume: str | None, read_only: bool) -> BoxMount:
    if volume is not None:
        return BoxMount(source=volume, target=BOX_KNOWLEDGE, read_only=read_only, kind="volume")
    return BoxMount(source=str(checkout.mounted_at), target=BOX_KNOWLEDGE, read_only=read_only)
