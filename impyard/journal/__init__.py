"""The append-only activity journal: the file and its rotations (``log``), which events a
reader asked for (``query``), and reading from a position, newest first or following
(``tail``).

A shared leaf: imports only ``impyard.common``. The journal's group commit, which takes
turns through the knowledge lane's queue, sits a layer up (``impyard.journal_group``).
"""
