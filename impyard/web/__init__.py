"""The owner's console: a local web app over the data root (overview, runs with live
output, one review queue, knowledge with provenance) and Prometheus ``/metrics``.

Pages read through the same core functions the CLI commands use, so the console and the
CLI never disagree. ``impyard.web.app`` and what it imports (Starlette, Jinja2,
prometheus_client) load only when ``impyard web`` or ``serve --web`` starts the console:
nothing here is on any other command's start-up path.
"""
