"""What a hosting process (``impyard run``, ``impyard serve``, the CLI) calls to
start, resume or watch runs: admitting a run and driving it (``admission``), crash
recovery (``recovery``), a run driven by a process of its own (``detach``), and following
one run's output to its end (``follow``).

The top of ``runs``: it may import every other part; none imports it.
"""
