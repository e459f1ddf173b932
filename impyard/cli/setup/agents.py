"""``impyard agents``: every agent an imp can run (``imp create --agent``), its image and
whether it is built here, the model API it speaks and what its route needs."""

from __future__ import annotations

import typer

from impyard.cli.shared._common import echo, print_json, warn


def register(app: typer.Typer) -> None:
    @app.command("agents")
    def agents_command(
        as_json: bool = typer.Option(False, "--json", help="One JSON document."),
    ) -> None:
        """List every agent: image, npm package and version, whether the image is built,
        the model API it speaks, and the route and [box.env] keys it needs."""
        from impyard.box.images.agent_catalog import catalog
        from impyard.cli.shared._table import Column, print_table

        entries, problem = catalog()
        if as_json:
            print_json(
                {"agents": [entry.to_dict() for entry in entries], "engine_problem": problem}
            )
            return
        rows = []
        for entry in entries:
            agent = entry.agent
            built = {True: "built", False: "not built", None: "unknown"}[entry.built]
            rows.append(
                [
                    agent.name,
                    agent.image,
                    f"{agent.package}@{agent.version or '?'}",
                    built,
                    agent.api,
                    f"route {agent.default_model_route} ({agent.header}); "
                    f"[box.env] {', '.join(agent.box_env_keys)}",
                ]
            )
        print_table(
            [
                Column("AGENT"),
                Column("IMAGE"),
                Column("PACKAGE", wrap=True),
                Column("IMAGE STATE", states=True),
                Column("API"),
                Column("NEEDS", wrap=True, optional=True),
            ],
            rows,
        )
        missing = [e.agent for e in entries if e.built is False]
        for agent in missing:
            echo(f"{agent.image}: {agent.build_hint}")
        if problem is not None:
            warn(f"cannot tell which images are built: {problem}")
