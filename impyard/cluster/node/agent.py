"""The node agent's loop: report this node every second, lease runs while it has room,
run each on its own thread, stop the ones whose lease the control plane took back.

At start it removes every box and file an earlier agent of this node left: their relays
died with that agent, so their runs are already lost on the control plane (a new agent id
tells it so at the first heartbeat); nothing of theirs may land, twice or at all.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path

from impyard import __version__
from impyard.box.docker import engine
from impyard.box.docker.runtime import engine_runtimes
from impyard.box.launcher.launch import find_boxes, kill_box, remove_box
from impyard.box.spec import LABEL_ROOT, root_label
from impyard.cluster.node.boxrun import NodeRun
from impyard.cluster.node.client import ClusterCallError, ClusterClient
from impyard.cluster.node.origins import Origins
from impyard.cluster.protocol import TOKEN_FILE, Assignment, HeartbeatAnswer, HeldRun, NodeReport
from impyard.common.errors import ConfigError, EngineError
from impyard.common.fsutil import remove_tree

log = logging.getLogger(__name__)

_HEARTBEAT_SECONDS = 1.0
_LEASE_WAIT_SECONDS = 5.0
#: After a failed call to the control plane (it may be starting), the next try.
_RETRY_SECONDS = 0.25


@dataclass(frozen=True)
class NodeConfig:
    name: str
    url: str
    token: str
    work: Path
    capacity: int

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> NodeConfig:
        env = dict(os.environ if env is None else env)
        missing = [k for k in ("IMPYARD_CLUSTER_URL", "IMPYARD_NODE_NAME") if not env.get(k)]
        if missing:
            raise ConfigError(f"impyard node needs {', '.join(missing)} (set by cluster deploy)")
        token_file = Path(env.get("IMPYARD_CLUSTER_TOKEN_FILE", TOKEN_FILE))
        try:
            token = token_file.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"impyard node: no cluster token at {token_file}: {exc}") from exc
        try:
            capacity = int(env.get("IMPYARD_NODE_CAPACITY", "2"))
        except ValueError as exc:
            raise ConfigError("IMPYARD_NODE_CAPACITY must be a whole number") from exc
        name = env["IMPYARD_NODE_NAME"]
        work = Path(env.get("IMPYARD_NODE_WORK", "/var/lib/impyard-node")) / name
        return cls(
            name=name, url=env["IMPYARD_CLUSTER_URL"], token=token, work=work, capacity=capacity
        )


class NodeAgent:
    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.agent_id = secrets.token_hex(8)
        self.client = ClusterClient(config.url, config.token, self.agent_id)
        self.runs: dict[str, tuple[NodeRun, str]] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.runtimes: list[str] = []
        self.origins = Origins(config.work / "origins")

    def serve(self) -> None:
        self.config.work.mkdir(parents=True, exist_ok=True)
        self.sweep()
        self.runtimes = engine_runtimes()
        threading.Thread(target=self._heartbeats, name="heartbeat", daemon=True).start()
        while not self.stop.is_set():
            with self.lock:
                room = self.config.capacity - len(self.runs)
            if room <= 0:
                self.stop.wait(0.2)
                continue
            try:
                answer = self.client.call(
                    "POST",
                    "/lease",
                    {"node": self.config.name, "wait": _LEASE_WAIT_SECONDS},
                    timeout=_LEASE_WAIT_SECONDS + 30,
                )
            except ClusterCallError as exc:
                log.warning("lease: %s", exc)
                self.stop.wait(_RETRY_SECONDS)
                continue
            if answer is not None:
                self._start(Assignment.model_validate(answer))

    def sweep(self) -> list[str]:
        """Remove the boxes and run files an earlier agent of this node left."""
        found = find_boxes({LABEL_ROOT: root_label(self.config.work)})
        for box in found:
            kill_box(box.container_id)
            remove_box(box.container_id)
        runs = self.config.work / "runs"
        if runs.exists():
            remove_tree(runs)
        return [box.container_id for box in found]

    def _start(self, assignment: Assignment) -> None:
        run = NodeRun(self.client, assignment, self.config.work, self.origins, self.beat)
        with self.lock:
            self.runs[assignment.run_id] = (run, assignment.token)

        def work() -> None:
            try:
                run.run()
            finally:
                with self.lock:
                    self.runs.pop(assignment.run_id, None)

        threading.Thread(target=work, name=f"run-{assignment.run_id}", daemon=True).start()

    def report(self) -> NodeReport:
        with self.lock:
            held = [HeldRun(run_id=r, token=t) for r, (_run, t) in self.runs.items()]
        try:
            images, engine_error = engine.call("images", engine.api().image_ids), None
        except EngineError as exc:
            # This agent (and its boxes) can outlive the engine that started them: it keeps
            # reporting, so its runs' leases hold while the plane learns the engine is gone.
            images, engine_error = [], str(exc)[:500]
        return NodeReport(
            node=self.config.name,
            version=__version__,
            runtimes=self.runtimes,
            capacity=self.config.capacity,
            images=images,
            runs=held,
            engine_error=engine_error,
        )

    def beat(self) -> bool:
        """One heartbeat now; False when the control plane could not be told."""
        try:
            answer = HeartbeatAnswer.model_validate(
                self.client.call("POST", "/heartbeat", self.report()) or {}
            )
        except (ClusterCallError, ValueError) as exc:
            log.warning("heartbeat: %s", exc)
            return False
        for run_id in answer.stop:
            with self.lock:
                held = self.runs.get(run_id)
            if held is not None:
                held[0].kill()
        return True

    def _heartbeats(self) -> None:
        wait = 0.0  # the first at once: placement needs the node known
        while not self.stop.wait(wait):
            try:
                beaten = self.beat()
            except Exception:  # a bug here must not silence the node for good
                log.exception("heartbeat failed")
                beaten = False
            # After a failed call serve may be starting: be known as soon as it is.
            wait = _HEARTBEAT_SECONDS if beaten else _RETRY_SECONDS
