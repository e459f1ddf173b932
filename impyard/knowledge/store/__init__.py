"""The git object store: opening the canonical repository, typed object lookups, packs and
deltas written in Python, fsck's rules on raw objects, ref names, staged objects, trees
built from a change, main's cached history. Imports nothing of knowledge but ``change``.
"""
