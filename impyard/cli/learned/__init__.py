"""The commands over what imps learned: ``knowledge`` (its path, provenance, check and
purge), the repairs of what was kept off main (``candidates``, ``quarantine``) and
interaction ``memory``/``notes``.

May import ``impyard.cli.shared`` only, of the command line.
"""
