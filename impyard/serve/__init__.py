"""The ``impyard serve`` daemon: it drives queued runs, the periodic gc and backups, so it
sits above ``runs``, ``retention`` and ``backup`` and none of them imports it.

``worker`` is the loop, ``events`` what it reports, ``record`` the file that tells
``impyard status`` a serve is running, ``heap`` the allocator settings a long-lived
process needs.
"""
