"""The gateway's HTTP proxy: the listener and its worker threads (``server``), one
box connection (``handler``), what the request helpers see of it (``client``), plain
HTTP and credential routes (``forward``), inspected and plain ``CONNECT`` (``inspect``,
``tunnel``), the box's control API (``control``), and HTTP/1.1 message framing and
headers (``framing``, ``headers``).

The top of ``gateway``: it may import ``guard``, ``provenance`` and ``wiring``; none of
them imports it.
"""
