"""Checkouts, run spaces and layers: a run's checkout of its base (an overlay over shared
layers, or a plain copy) in a size-limited loop-mounted space, the layers themselves, trees
written into directories, a rework's seed, and the snapshot of what a box left. Imports
``validation`` and ``store``.
"""
