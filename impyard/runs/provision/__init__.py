"""What a run's box is given, decided before anything is made: the box contract
(``boxspec``: command, mounts, environment, limits), its image and CA bundle (``image``),
the clean room's read-only knowledge for a tainted run (``taint``), and a rework run's
task and seed (``rework``, which also queues rework after a refusal).

It may import ``runs.records``, the box, gateway, knowledge, memory, policy and queue
packages; nothing else of ``runs``.
"""
