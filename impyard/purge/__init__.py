"""``impyard knowledge purge``: a leak removed from everywhere Impyard put a copy.

``selector`` decides what goes, ``rewrite`` walks the history without it, ``compact``
keeps only what refs reach, ``datafiles`` and ``runfiles`` clear the data root,
``remotes`` carries it to the backups, and ``purge`` orders the steps. It may import
knowledge, runs, repair, backup, gateway and serve's record; only the CLI and the
console import it.
"""
