"""The data root's layout: every path Impyard writes is named here, once."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal


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

    @property
    def removed_dir(self) -> Path:
        """Removed imps' knowledge, kept: ``removed/<imp>-<UTC stamp>/``."""
        return self.root / "removed"

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

    def checked_trees(self, imp: str) -> Path:
        """Trees of the imp's main found safe to check out, and the last main found so (a
        cache: safe to delete)."""
        return self.imp_dir(imp) / "checked-trees.bin"

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
        """Every run's checkout record, prepared runs included, and every ready box's
        (``warm/<pool>/<box>/checkout.json``): layer GC keeps their chains."""
        if self.runs_dir.is_dir():
            with os.scandir(self.runs_dir) as entries:
                for entry in entries:
                    yield self.run_checkout_record(entry.name)
        yield from self.warm_dir.glob("*/*/checkout.json")

    @property
    def warm_dir(self) -> Path:
        """Ready boxes: ``<pool>/<box>/`` each, and the imps' wants."""
        return self.root / "warm"

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
        """Cached system CA bundles of images, by image id (``box.images.image_roots``)."""
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
    def web_token(self) -> Path:
        """The console's access token (mode 0600); ``impyard web --print-url`` shows it."""
        return self.root / "web-token"

    @property
    def web_console(self) -> Path:
        """Where the running console listens (its URL and pid, never the token), locked
        while it runs: ``impyard web --print-url`` reads it."""
        return self.root / "web-console.json"

    @property
    def cluster_dir(self) -> Path:
        """The cluster's state on the control plane: its token (0600), the nodes as last
        seen (``nodes.json``), the drained nodes (``drained.json``)."""
        return self.root / "cluster"

    @property
    def exports_dir(self) -> Path:
        """Where the console exports a preserved change (``exports/<run-id>``)."""
        return self.root / "exports"

    @property
    def error_log(self) -> Path:
        return self.root / "impyard-error.log"

    @property
    def serve_dir(self) -> Path:
        """The record of the live ``impyard serve`` (``serve_record``), its lock
        (``serve_lock``) and records dead serves left."""
        return self.root / "serve"

    @property
    def serve_lock(self) -> Path:
        """``serve/lock``, flocked by the one serve of this data root for its whole life."""
        return self.serve_dir / "lock"

    def serve_record(self, pid: int) -> Path:
        """``serve/<pid>.json``, flocked by that serve for its whole life."""
        return self.serve_dir / f"{pid}.json"

    def is_initialized(self) -> bool:
        return self.org_policy.is_file() and self.knowledge_dir.is_dir()


#: How an invocation's data root was chosen, for ``impyard status``.
HomeSource = Literal["flag", "env", "found", "user"]

HOME_DIR_NAME = ".impyard"


@dataclass(frozen=True)
class ResolvedHome:
    root: Path
    source: HomeSource

    def describe(self) -> str:
        """Why this data root, in a few words."""
        return {
            "flag": "given with --home",
            "env": "from IMPYARD_HOME",
            "found": f"the nearest {HOME_DIR_NAME} from the current directory",
            "user": "the per-user default ($XDG_DATA_HOME/impyard)",
        }[self.source]


def resolve_home(option: Path | None) -> Path:
    """The data root of an invocation, absolute (see ``resolve_home_source``)."""
    return resolve_home_source(option).root


def resolve_home_source(
    option: Path | None, environ: Mapping[str, str] | None = None, cwd: Path | None = None
) -> ResolvedHome:
    """``--home``, else ``IMPYARD_HOME``, else the nearest initialized ``.impyard`` in the
    current directory or a parent (a data root made there with ``--home .impyard``), else
    the per-user default ``$XDG_DATA_HOME/impyard`` (``~/.local/share/impyard``). The
    current directory alone never decides: a command run from another directory would
    otherwise see another, empty data root."""
    env = os.environ if environ is None else environ
    if option is not None:
        return ResolvedHome(option.absolute(), "flag")
    for name in ("IMPYARD_HOME", "impyard_home"):
        value = env.get(name)
        if value:
            return ResolvedHome(Path(value).absolute(), "env")
    here = (cwd or Path.cwd()).absolute()
    for directory in (here, *here.parents):
        candidate = directory / HOME_DIR_NAME
        if Home(candidate).is_initialized():
            return ResolvedHome(candidate, "found")
    data = env.get("XDG_DATA_HOME")
    base = Path(data) if data and Path(data).is_absolute() else Path.home() / ".local" / "share"
    return ResolvedHome(base / "impyard", "user")
