"""Setting a data root up: ``init``, ``imp``, ``agents``, ``deploy``/``policy`` and
``check box`` (with its rows, printed as each check finishes).

May import ``impyard.cli.shared`` only, of the command line.
"""
