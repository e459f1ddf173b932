"""One leased run on a node: its files fetched, its box started on this node's engine with
the order's values (``BoxSpec`` keeps every hardening option fixed), its gateway relayed,
its output sent as it comes, and at exit its tree and how it ended sent back. The box is
removed and its files deleted whatever happened."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from impyard.box.launcher.launch import box_pid, kill_box, remove_box, start_box, wait_box
from impyard.box.spec import BoxExit, BoxMount, BoxSpec, box_labels
from impyard.box.watch.livelog import LogReader
from impyard.cluster.node.client import ClusterCallError, ClusterClient
from impyard.cluster.node.origins import Origins
from impyard.cluster.node.relay import Relay
from impyard.cluster.protocol import (
    MAX_TREE_BYTES,
    Assignment,
    ExitReport,
    FileKind,
    MountKind,
    Started,
)
from impyard.cluster.treetar import TreeTooLarge, pack, unpack
from impyard.common.contract import parse_user
from impyard.common.errors import EngineError
from impyard.common.fsutil import remove_tree
from impyard.gateway.wiring.boxside import write_ready

log = logging.getLogger(__name__)

#: The most a node fetches for one run's checkout.
_MAX_FETCH = 1 << 30
_OUTPUT_EVERY_SECONDS = 0.25
#: The most output one call carries, and the most kept while the control plane is away.
_OUTPUT_CHUNK = 512 * 1024
_OUTPUT_KEPT = 8 * 1024 * 1024
#: How long output may still take to go once the box exited.
_OUTPUT_DRAIN_SECONDS = 20.0
#: How long a node keeps trying to return a result while the control plane is away (it
#: may be restarting: its recovery takes the run back); a refusal ends it at once.
_RESULT_RETRY_SECONDS = 300.0


class NodeRun:
    def __init__(
        self,
        client: ClusterClient,
        assignment: Assignment,
        work: Path,
        origins: Origins,
        engine_failed: Callable[[], object],
    ) -> None:
        self.client = client
        #: Called before a run the engine failed is reported, so the control plane knows the
        #: node's engine is gone before it places the run's task again.
        self.engine_failed = engine_failed
        self.origins = origins
        self.assignment = assignment
        self.run_id = assignment.run_id
        self.token = assignment.token
        self.work = work
        self.dir = work / "runs" / assignment.run_id
        self.container_id: str | None = None
        self._sent = 0
        self._killed = False
        self._done = threading.Event()

    def kill(self) -> None:
        """The control plane took the lease back: stop the box (its result is refused)."""
        self._killed = True
        if self.container_id is not None:
            kill_box(self.container_id)

    def run(self) -> None:
        try:
            self._run()
        except ClusterCallError as exc:
            # Refused (the lease is over, the tree was refused) or unreachable for longer
            # than a restart takes: the control plane records the run without this node.
            log.warning("run %s: the control plane refused or lost it: %s", self.run_id, exc)
        except Exception as exc:
            log.exception("run %s failed on this node", self.run_id)
            if isinstance(exc, EngineError):
                self._tell_engine_failed()
            self._report_failure(f"{type(exc).__name__}: {exc}")
        finally:
            if self.container_id is not None:
                with contextlib.suppress(Exception):
                    remove_box(self.container_id)
            if self.dir.exists():
                remove_tree(self.dir)

    def _run(self) -> None:
        spec, fetches = self._prepare()
        log_path = self.dir / "box.log"
        # Each file is its own round trip to the control plane: they are fetched side by
        # side while the engine creates the box (its mounts' places exist already), and the
        # start waits for them.
        with ThreadPoolExecutor(max_workers=len(fetches) or 1) as pool:
            fetching = [pool.submit(fetch) for fetch in fetches]
            started = start_box(
                spec,
                log_path,
                self.assignment.box.image_id,
                before_start=lambda: [done.result() for done in fetching],
            )
        self.container_id = started.container_id
        self.client.call(
            "POST",
            f"/runs/{self.run_id}/started",
            Started(token=self.token, container_id=started.container_id),
        )
        relay = Relay(self.client, self.run_id, self.token)
        sender = threading.Thread(target=self._send_output, args=(log_path,), daemon=True)
        sender.start()
        try:
            try:
                port = self.assignment.box.gateway_port
                if port is not None:
                    relay.attach(box_pid(started.container_id), port)
                    write_ready(self.dir / "signal")
                if self._killed:
                    kill_box(started.container_id)
                box_exit = wait_box(
                    started.container_id,
                    spec.timeout_seconds,
                    log_path,
                    started.follower,
                    remove=False,
                )
            except EngineError as exc:
                # The node's engine failed under the box: the run is lost, and what its
                # checkout holds goes back to be kept in quarantine.
                box_exit = BoxExit(
                    exit_code=-1,
                    oom_killed=False,
                    timed_out=False,
                    error=f"lost: the engine of this node failed mid-run: {exc}",
                    container_id=started.container_id,
                    image_id=started.image_id,
                    started_at=None,
                    finished_at=None,
                )
                self._tell_engine_failed()
        finally:
            relay.close()
            self._done.set()
            sender.join(30)
        self._report(box_exit)

    def _prepare(self) -> tuple[BoxSpec, list[Callable[[], object]]]:
        """The box's spec, every mount's place made (an empty directory or file), and what
        fills them: one fetch from the control plane each."""
        order = self.assignment.box
        uid, gid = parse_user(order.user)
        self.dir.mkdir(parents=True)
        mounts: list[BoxMount] = []
        fetches: list[Callable[[], object]] = []
        for mount in order.mounts:
            source, fetch = self._mount_place(mount.kind, uid, gid)
            mounts.append(
                BoxMount(source=str(source), target=mount.target, read_only=mount.read_only)
            )
            if fetch is not None:
                fetches.append(fetch)
        spec = BoxSpec(
            name=order.name,
            image=order.image,
            command=order.command,
            entrypoint=order.entrypoint,
            user=order.user,
            env=order.env,
            mounts=mounts,
            memory_bytes=order.memory_bytes,
            cpus=order.cpus,
            pids_limit=order.pids_limit,
            runtime=order.runtime,
            timeout_seconds=order.timeout_seconds,
            labels=box_labels(self.run_id, self.assignment.imp, root=self.work),
        )
        return spec, fetches

    def _mount_place(
        self, kind: MountKind, uid: int, gid: int
    ) -> tuple[Path, Callable[[], object] | None]:
        """Where the box's ``kind`` mount comes from on this node (made now, so the engine
        can create the box), and the fetch that fills it before the box starts."""
        imp = self.assignment.imp
        if kind == "origin":
            return self.origins.place(imp), partial(
                self.origins.update, self.client, self.run_id, self.token, imp
            )
        source = self.dir / kind
        if kind == "checkout":
            source.mkdir()
            return source, partial(self._fetch_checkout, source, uid, gid)
        if kind in ("task", "ca"):
            os.close(os.open(source, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
            return source, partial(self._fetch_file, kind, source)
        source.mkdir()
        return source, None

    def _fetch_checkout(self, source: Path, uid: int, gid: int) -> None:
        archive = self.dir / "checkout.tar"
        self.client.fetch(self.run_id, self.token, "checkout", archive, _MAX_FETCH)
        unpack(archive, source, _MAX_FETCH)
        archive.unlink()
        _own(source, uid, gid)

    def _fetch_file(self, kind: FileKind, source: Path) -> None:
        # Beside the place the box's mount names, then over it: the engine binds whatever
        # stands at that path when the box starts.
        part = self.dir / f".{kind}.part"
        self.client.fetch(self.run_id, self.token, kind, part, _MAX_FETCH)
        os.replace(part, source)

    def _send_output(self, log_path: Path) -> None:
        reader = LogReader(log_path)
        pending = b""
        give_up = float("inf")
        while True:
            finished = self._done.wait(_OUTPUT_EVERY_SECONDS)
            if finished and give_up == float("inf"):
                give_up = time.monotonic() + _OUTPUT_DRAIN_SECONDS
            pending += b"".join(reader.read())
            if pending:
                chunk = pending[:_OUTPUT_CHUNK]
                try:
                    self.client.call(
                        "POST",
                        f"/runs/{self.run_id}/output",
                        chunk,
                        query={"token": self.token, "offset": self._sent},
                    )
                    self._sent += len(chunk)
                    pending = pending[len(chunk) :]
                except ClusterCallError as exc:
                    # Kept for the next try (the control plane may be restarting); a lease
                    # that is gone is told at the result.
                    log.warning("run %s: output not sent: %s", self.run_id, exc)
                    if exc.status is not None or len(pending) > _OUTPUT_KEPT:
                        pending = b""
            if finished and reader.ended and not pending:
                return
            if time.monotonic() > give_up:
                return

    def _report(self, box_exit: BoxExit) -> None:
        tree: Path | None = None
        tree_error: str | None = None
        checkout = self.dir / "checkout"
        if checkout.is_dir():
            tree = self.dir / "tree.tar"
            try:
                with open(tree, "wb") as out:
                    pack(checkout, out, MAX_TREE_BYTES)
            except (TreeTooLarge, OSError) as exc:
                tree, tree_error = None, str(exc)
        report = ExitReport(
            token=self.token,
            exit_code=box_exit.exit_code,
            oom_killed=box_exit.oom_killed,
            timed_out=box_exit.timed_out,
            error=box_exit.error,
            container_id=box_exit.container_id,
            image_id=box_exit.image_id,
            started_at=box_exit.started_at,
            finished_at=box_exit.finished_at,
            tree_error=tree_error,
        )
        self._return(report, tree)

    def _return(self, report: ExitReport, tree: Path | None) -> None:
        """Send the result; while the control plane cannot be reached, try again."""
        give_up = time.monotonic() + _RESULT_RETRY_SECONDS
        while True:
            try:
                self.client.result(self.run_id, report, tree)
                return
            except ClusterCallError as exc:
                if exc.status is not None or time.monotonic() > give_up:
                    raise
                log.warning("run %s: result not sent yet: %s", self.run_id, exc)
                time.sleep(1.0)

    def _tell_engine_failed(self) -> None:
        try:
            self.engine_failed()
        except Exception:  # the run's own report must still go
            log.exception("run %s: telling the control plane the engine failed", self.run_id)

    def _report_failure(self, why: str) -> None:
        report = ExitReport(
            token=self.token,
            exit_code=-1,
            oom_killed=False,
            timed_out=False,
            error=f"on the node: {why}"[:5000],
            container_id=self.container_id or "",
            image_id=self.assignment.box.image_id,
        )
        with contextlib.suppress(ClusterCallError):
            self.client.result(self.run_id, report, None)


def _own(root: Path, uid: int, gid: int) -> None:
    """The checkout belongs to the box's user, as a local checkout does (never a link's target)."""
    os.lchown(root, uid, gid)
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            os.lchown(os.path.join(top, name), uid, gid)
