"""Serving the console: the ASGI app (``app``), its security headers, uvicorn in the
foreground or on a thread beside ``serve`` (``server``, ``background``) and the record of
where the running console listens (``address``).

Top of the console: may import ``routes``, ``access`` and ``pages``.
"""
