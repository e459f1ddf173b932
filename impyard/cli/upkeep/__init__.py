"""Keeping a data root: ``status``, ``gc``, ``backup``/``restore`` and ``archive show``.

May import ``impyard.cli.shared`` only, of the command line.
"""
