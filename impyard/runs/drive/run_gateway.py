"""The run's gateway: the box's only way out, opened for the box and attached inside its
network namespace, then closed with the box. The box's command waits in box-init until
the listener is bound there; if that fails, the command never runs (fail closed)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from impyard.gateway.wiring.boxside import write_ready
from impyard.journal.log import Journal
from impyard.runs.checkpoints.control import BoxControl
from impyard.runs.records.active import ActiveRun

if TYPE_CHECKING:
    from impyard.gateway.proxy.server import Gateway

#: What the run's gateway needs, loaded beside the box's start (``warm_imports``).
GATEWAY_MODULES = ("impyard.gateway.proxy.server",)


class RunGateway:
    """The gateway of one run (none when ``policy.gateway.enabled`` is false)."""

    def __init__(self, run: ActiveRun, journal: Journal) -> None:
        self.run = run
        self.journal = journal
        self.gateway: Gateway | None = None
        #: What the box's control API does (a run on a cluster node answers differently).
        self.control_type: type[BoxControl] = BoxControl

    def prepare(self) -> None:
        """Make the directory the box's init waits on for the ready signal."""
        if self.run.policy.gateway.enabled:
            self.run.home.run_signal_dir(self.run.manifest.run_id).mkdir(exist_ok=True)

    def open(self) -> None:
        run = self.run
        if not run.policy.gateway.enabled:
            return
        # Here for start-up speed only: the server's modules load beside the box's start
        # (GATEWAY_MODULES), not before a foreground run's box is asked for.
        from impyard.gateway.proxy.server import Gateway

        self.gateway = Gateway.start(
            run.policy.gateway,
            home=run.home,
            imp=run.manifest.imp,
            run_id=run.manifest.run_id,
            journal=self.journal,
            control=self.control_type(run),
            upstream_ca_file=run.policy.box.extra_ca_file,
        )

    def attach(self, pid: int) -> None:
        if self.gateway is None:
            return
        with self.run.phase("gateway"):
            self.gateway.attach(pid)
            write_ready(self.run.home.run_signal_dir(self.run.manifest.run_id))

    def close(self) -> None:
        if self.gateway is not None:
            self.gateway.close()
