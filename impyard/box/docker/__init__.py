"""The Docker engine's API, spoken directly: where the engine listens
(``engineaddr``), HTTP/1.1 to it (``enginehttp``), the calls Impyard makes
(``engineapi``), the one entry point every call goes through (``engine``), and the
runtimes it offers (``runtime``).

The bottom of ``box``: it may import ``impyard.box.spec`` and the shared leaves; no other
part of ``box``.
"""
