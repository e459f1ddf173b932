"""The data root's layout: every path Impyard writes is named here, once."""

from __future__ import annotations

import importlib.resources
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from impyard.errors import UsageError
from impyard.fsutil import atomic_write_bytes


@dataclass(frozen=True)
class Home:
    root: Path

    @property
    def policy_dir(self) -> Path:
        return self.root / "policy"

    @property
    def org_policy(self) -> Path:
        return self.policy_dir / "org.toml"

    @property
    def imp_policy_dir(self) -> Path:
        return self.policy_dir / "imps"

    def imp_policy(self, imp: str) -> Path:
        return self.imp_policy_dir / f"{imp}.toml"

    @property
    def compiled_policy(self) -> Path:
        return self.policy_dir / "compiled.json"

    @property
    def knowledge_dir(self) -> Path:
        return self.root / "knowledge"

    def imp_dir(self, imp: str) -> Path:
        return self.knowledge_dir / imp

    def repo(self, imp: str) -> Path:
        return self.imp_dir(imp) / "repo.git"

    def origin(self, imp: str) -> Path:
        return self.imp_dir(imp) / "origin.git"

    def layers(self, imp: str) -> Path:
        """Read-only lower directories of overlay checkouts, one per base commit."""
        return self.imp_dir(imp) / "layers"

    #: The imp's settings file (image, command, agent), inside its knowledge dir.
    IMP_SETTINGS = "imp.json"

    def imp_settings(self, imp: str) -> Path:
        return self.imp_dir(imp) / self.IMP_SETTINGS

    def lane_lock(self, imp: str) -> Path:
        return self.imp_dir(imp) / "lane.lock"

    @property
    def engine_features(self) -> Path:
        """What the engine supports (overlay volumes), probed once per engine."""
        return self.root / "engine-features.json"

    def memory_file(self, imp: str) -> Path:
        return self.memory_dir / f"{imp}.jsonl"

    def memory_lock(self, imp: str) -> Path:
        return self.memory_dir / f".{imp}.lock"

    def legacy_memory_file(self, imp: str) -> Path:
        """Where interaction memory lived before ``memory/`` (read-compatible)."""
        return self.legacy_notes_dir / f"{imp}.jsonl"

    def checkout_records(self) -> Iterator[Path]:
        """Every run's checkout record, prepared runs included (layer GC keeps their chains)."""
        if not self.runs_dir.is_dir():
            return
        for entry in os.scandir(self.runs_dir):
            yield self.run_checkout_record(entry.name)

    @property
    def runs_dir(self) -> Path:
        return self.root / "runs"

    def run_dir(self, run_id: str) -> Path:
        return self.runs_dir / run_id

    def manifest(self, run_id: str) -> Path:
        return self.run_dir(run_id) / "manifest.json"

    def box_log(self, run_id: str) -> Path:
        return self.run_dir(run_id) / "box.log"

    def run_task(self, run_id: str) -> Path:
        """The task file the box reads at /opt/impyard/task.md."""
        return self.run_dir(run_id) / "task.md"

    def run_signal_dir(self, run_id: str) -> Path:
        """Mounted read-only in the box; the host marks its gateway ready here."""
        return self.run_dir(run_id) / "signal"

    def run_owner_lock(self, run_id: str) -> Path:
        """Held (flock) by the process driving the run; recovery adopts only unheld runs."""
        return self.run_dir(run_id) / "owner.lock"

    def run_receipts(self, run_id: str) -> Path:
        """Host-written fetch receipts of every response the run's gateway relayed."""
        return self.run_dir(run_id) / "receipts.jsonl"

    def run_ca_bundle(self, run_id: str) -> Path:
        """The one trust bundle the box gets (image roots, Impyard CA, owner's extra CA)."""
        return self.run_dir(run_id) / "ca-bundle.pem"

    def run_space(self, run_id: str) -> Path:
        """Where the run's size-limited writable filesystem is mounted (``runspace``)."""
        return self.run_dir(run_id) / "space"

    def run_space_image(self, run_id: str) -> Path:
        """The sparse file holding that filesystem; kept (unmounted) for quarantined runs."""
        return self.run_dir(run_id) / "space.img"

    def run_checkout(self, run_id: str) -> Path:
        """The run's knowledge: the overlay upper dir, or the full plain copy (fallback)."""
        return self.run_space(run_id) / "knowledge"

    def run_overlay_work(self, run_id: str) -> Path:
        """The overlay workdir (same filesystem as the upper dir, as overlayfs requires)."""
        return self.run_space(run_id) / "work"

    def run_checkout_record(self, run_id: str) -> Path:
        """The prepared checkout as JSON; layer GC keeps every chain a record names."""
        return self.run_dir(run_id) / "checkout.json"

    @property
    def gateway_dir(self) -> Path:
        return self.root / "gateway"

    @property
    def gateway_ca_dir(self) -> Path:
        """The data root's TLS-inspection CA (``ca.key`` never leaves the host) and the
        leaf certificates minted with it."""
        return self.gateway_dir / "ca"

    @property
    def image_roots_dir(self) -> Path:
        """Cached system CA bundles of images, by image id (``box.image_roots``)."""
        return self.gateway_dir / "image-roots"

    @property
    def box_bundles_dir(self) -> Path:
        """The trust bundles boxes get, by content; each run's is a hard link to one."""
        return self.gateway_dir / "box-bundles"

    @property
    def archive_dir(self) -> Path:
        """Opt-in content-addressed source archive: ``sha256/<aa>/<rest>``."""
        return self.root / "archive"

    def gateway_day_count(self, imp: str, day: str) -> Path:
        """The per-imp, per-UTC-day request counter (``day`` is YYYY-MM-DD)."""
        return self.gateway_dir / imp / f"{day}.count"

    @property
    def backup_dir(self) -> Path:
        return self.root / "backup"

    @property
    def backup_status(self) -> Path:
        """Per imp and remote: when knowledge was last pushed, and the last failure."""
        return self.backup_dir / "status.json"

    @property
    def backup_status_lock(self) -> Path:
        return self.backup_dir / "status.lock"

    @property
    def memory_dir(self) -> Path:
        return self.root / "memory"

    @property
    def legacy_notes_dir(self) -> Path:
        return self.root / "notes"

    @property
    def journal(self) -> Path:
        """The live journal; gc rotates it to ``journal.<n>.jsonl.gz`` (``rotated_path``)."""
        return self.root / "journal.jsonl"

    @property
    def gc_lock(self) -> Path:
        """Held (flock) by the one ``impyard gc`` (or serve's periodic gc) running."""
        return self.root / "gc.lock"

    @property
    def db(self) -> Path:
        return self.root / "impyard.db"

    @property
    def error_log(self) -> Path:
        return self.root / "impyard-error.log"

    @property
    def serve_dir(self) -> Path:
        """One record per live ``impyard serve`` (several may share a data root)."""
        return self.root / "serve"

    def serve_record(self, pid: int) -> Path:
        """``serve/<pid>.json``, flocked by that serve for its whole life."""
        return self.serve_dir / f"{pid}.json"

    def is_initialized(self) -> bool:
        return self.org_policy.is_file() and self.knowledge_dir.is_dir()


#: The line of the shipped org policy that names the box runtime.
_RUNTIME_LINE = b'\nruntime = "runc"\n'


def default_org_policy(runtime: str = "runc") -> bytes:
    """The shipped org policy, naming ``runtime`` as the box runtime."""
    # Package data, so an installed wheel carries it; the repository's top-level policy/
    # is a link to the same directory, where an owner reads the defaults.
    resource = importlib.resources.files("impyard.policy").joinpath("defaults", "org.toml")
    text = resource.read_bytes()
    if runtime == "runc":
        return text
    assert _RUNTIME_LINE in text, "the shipped org policy names the box runtime"
    return text.replace(_RUNTIME_LINE, f'\nruntime = "{runtime}"\n'.encode(), 1)


def resolve_home(option: Path | None) -> Path:
    """The data root of an invocation, absolute: ``--home``, else ``IMPYARD_HOME``, else
    ``./.impyard`` (what ``Settings.home`` resolves to, without loading the settings)."""
    if option is not None:
        return option.absolute()
    for name in ("IMPYARD_HOME", "impyard_home"):
        value = os.environ.get(name)
        if value:
            return Path(value).absolute()
    return Path(".impyard").absolute()


def init_home(home: Home, runtime: str | None = None) -> bool:
    """Create what is missing; never overwrite an owner's edited policy. True if anything new.

    A new org policy names ``runtime`` as the box runtime (default: the ``init_runtime``
    setting)."""
    if home.root.exists() and not home.root.is_dir():
        raise UsageError(f"the data root {home.root} exists and is not a directory")
    fresh = not home.is_initialized()
    try:
        for directory in (
            home.root,
            home.policy_dir,
            home.imp_policy_dir,
            home.knowledge_dir,
            home.runs_dir,
            home.memory_dir,
        ):
            directory.mkdir(parents=True, exist_ok=True)
        if not home.org_policy.exists():
            if runtime is None:
                # Imported here, not at the top: every command imports Home, and the
                # settings (pydantic) matter to it only when a data root is created.
                from impyard.settings import load_settings

                runtime = load_settings().init_runtime
            atomic_write_bytes(home.org_policy, default_org_policy(runtime))
    except OSError as exc:
        # A path under a regular file, a read-only mount, no permission: the owner's to fix.
        where = exc.filename or home.root
        raise UsageError(
            f"cannot create the data root {home.root}: {where}: {exc.strerror or exc}"
        ) from exc
    if not home.compiled_policy.exists():
        # Imported here, not at the top: every command imports Home, and the policy
        # compiler (pydantic models) and the queue store only matter to `init`.
        from impyard.policy.compile import deploy

        deploy(home)
    from impyard.gateway.ca import ensure_ca
    from impyard.queue.db import connect

    connect(home.db).close()  # creates the schema, so other tools can read it at once
    ensure_ca(home.gateway_ca_dir)  # the key stays here, readable by this user only
    return fresh
