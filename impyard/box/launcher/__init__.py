"""Boxes on the engine: launched, waited for, killed and removed (``launch``), the
helper containers and volumes beside a run's box (``helpers``), and overlay volumes for
run checkouts (``volumes``).

It may import ``box.watch``, ``box.docker`` and ``impyard.box.spec``.
"""
