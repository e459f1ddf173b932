"""The owner's console: a local web app over the data root (overview, runs with live
output, one review queue, knowledge with provenance) and Prometheus ``/metrics``.

Pages read through the same core functions the CLI commands use, so the console and the
CLI never disagree. ``impyard.web.serving.app`` and what it imports (Starlette, Jinja2,
prometheus_client) load only when ``impyard web`` or ``serve --web`` starts the console:
nothing here is on any other command's start-up path.

Its parts, top to bottom: ``serving`` (the ASGI app, uvicorn, where a running console
listens) over ``routes`` (each page's and ``/metrics``' handlers, Server-Sent Events) over
``access`` (one console process's state, its listener, token, sessions and login) over
``pages`` (what a page shows, read from the data root). The templates and static files
beside them are package data of ``impyard.web`` itself.
"""
