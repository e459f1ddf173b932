"""The run as data: its request and manifest (``model``), the manifest on disk
(``manifest``), how a run's steps save it and journal themselves (``record``), runs found
by what an owner types (``lookup``), which process owns a run (``owner``), and the handle
a run's parts are given of the run driving them (``active``).

The bottom of ``runs``: it imports no other part of ``runs``; every other part, and the
packages above (cli, web, serve, repair, retention, purge), read runs through it.
"""
