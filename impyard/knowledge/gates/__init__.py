"""The gates for trees from outside the lane: a whole repository (a restore, an owner's
push) and every tree a checkout will write, as git fsck --strict and the lane's rules see
them. Imports ``checkouts``, ``validation`` and ``store``.
"""
