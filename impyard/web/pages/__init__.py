"""What the console's pages and ``/metrics`` show, read from the data root without
Starlette: the overview, runs (the run index, one run's page), the review queue,
knowledge pages and commits, the journal's tallies, and the templates' renderer.

Bottom of the console: imports no other part of ``impyard.web``.
"""
