"""One console process and who may reach it: what it holds (``Console``: the data root,
settings, caches), where it listens and whether it may (``listen``), the data root's
access token, sessions with their CSRF tokens, and the login that makes one (``auth``).

May import ``impyard.web.pages`` (the caches a console holds); never ``routes`` or
``serving``.
"""
