"""``impyard cluster deploy|status|drain|activate|images`` and ``impyard node``: runs on the
nodes of a Docker Swarm (``[cluster]`` in the org policy; serve is the control plane)."""

from __future__ import annotations

from typing import Any

import typer

from impyard.cli.shared._common import echo, initialized_home, print_json


def register(app: typer.Typer) -> None:
    cluster_app = typer.Typer(
        help="Run boxes on the nodes of a Docker Swarm ([cluster] in the org policy).",
        no_args_is_help=True,
    )
    app.add_typer(cluster_app, name="cluster")

    @cluster_app.command("deploy")
    def deploy_command(
        ctx: typer.Context,
        as_json: bool = typer.Option(False, "--json", help="One JSON document."),
    ) -> None:
        """Deploy (or update) the node agent on every swarm node, with the cluster token as
        a Swarm secret. Run it on (or with [cluster] manager pointing at) a swarm manager."""
        from impyard.cluster.deploy import deploy
        from impyard.cluster.plane.token import cluster_token
        from impyard.policy.compile import deployed_org_policy

        home = initialized_home(ctx)
        policy = deployed_org_policy(home).cluster
        done = deploy(policy, cluster_token(home))
        if as_json:
            print_json(done.to_dict())
            return
        verb = "created" if done.created else "updated"
        echo(f"{verb} service {done.service} ({done.image}) on every node")
        echo(f"cluster token: Swarm secret {done.secret}; node agents connect to {done.url}")
        if not policy.enabled:
            echo("note: [cluster] enabled is false: serve keeps running boxes on this host")

    @cluster_app.command("status")
    def status_command(
        ctx: typer.Context,
        as_json: bool = typer.Option(False, "--json", help="One JSON document."),
    ) -> None:
        """The nodes: state (ready, drained, down), runtimes, capacity, boxes running,
        agent version and last heartbeat (as serve last saw them)."""
        from impyard.cli.shared._table import Column, print_table
        from impyard.cluster.view import node_rows

        home = initialized_home(ctx)
        rows = node_rows(home)
        if as_json:
            print_json({"nodes": [_public(r) for r in rows]})
            return
        if not rows:
            echo("no node has reported (is serve running with [cluster] enabled, and deployed?)")
            return
        print_table(
            [
                Column("NODE"),
                Column("STATE", states=True),
                Column("RUNTIMES"),
                Column("CAPACITY", justify="right"),
                Column("BOXES", justify="right"),
                Column("VERSION", optional=True),
                Column("LAST HEARTBEAT", optional=True),
            ],
            [
                [
                    r["name"],
                    r["state"],
                    ",".join(r.get("runtimes") or []),
                    str(r.get("capacity", "")),
                    str(r.get("boxes", 0)),
                    str(r.get("version", "")),
                    str(r.get("last_heartbeat", "")),
                ]
                for r in rows
            ],
        )

    for verb, drained in (("drain", True), ("activate", False)):
        _register_drain(cluster_app, verb, drained)

    @cluster_app.command("images")
    def images_command(
        ctx: typer.Context,
        as_json: bool = typer.Option(False, "--json", help="One JSON document."),
    ) -> None:
        """Which nodes hold each image this data root's runs use (by image id), and how to
        load one where it is missing (no registry: `docker save | docker load`)."""
        from impyard.cluster.view import image_rows, node_rows

        home = initialized_home(ctx)
        rows = image_rows(home, node_rows(home))
        if as_json:
            print_json({"images": rows})
            return
        for row in rows:
            on = ", ".join(row["on"]) or "no node"
            echo(f"{row['image']} ({(row['id'] or 'not on this host')[:19]}): on {on}")
            for node in row["missing"]:
                echo(f"  missing on {node}: docker save {row['image']} | ssh {node} docker load")

    @app.command("node", hidden=False)
    def node_command() -> None:
        """The node agent (what `impyard cluster deploy` runs on every node): leases runs
        from the control plane and runs their boxes on this node's engine."""
        import logging
        import signal

        from impyard.cluster.node.agent import NodeAgent, NodeConfig

        logging.basicConfig(level=logging.INFO, format="impyard node: %(levelname)s: %(message)s")
        agent = NodeAgent(NodeConfig.from_env())
        signal.signal(signal.SIGTERM, lambda *_: agent.stop.set())
        echo(f"impyard node {agent.config.name}: agent {agent.agent_id}, to {agent.config.url}")
        agent.serve()


def _register_drain(cluster_app: typer.Typer, verb: str, drained: bool) -> None:
    doc = (
        "Let NODE's runs finish and send new runs to other nodes."
        if drained
        else "Let a drained NODE take new runs again."
    )

    @cluster_app.command(verb, help=doc)
    def command(
        ctx: typer.Context,
        node: str = typer.Argument(..., help="The node's name (`impyard cluster status`)."),
        as_json: bool = typer.Option(False, "--json", help="One JSON document."),
    ) -> None:
        from impyard.cluster.plane.registry import set_drained
        from impyard.cluster.view import node_rows
        from impyard.common.errors import UsageError

        home = initialized_home(ctx)
        known = {r["name"] for r in node_rows(home)}
        if node not in known and drained:
            shown = ", ".join(sorted(known)) or "none has reported"
            raise UsageError(f"no node named {node!r} (nodes: {shown})")
        changed = set_drained(home, node, drained)
        if as_json:
            print_json(
                {"node": node, "state": "drained" if drained else "active", "changed": changed}
            )
            return
        state = "drained" if drained else "active"
        echo(f"node {node} is {state}" + ("" if changed else " (it already was)"))


def _public(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "images"}
