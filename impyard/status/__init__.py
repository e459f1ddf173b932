"""``impyard status``: one screen of a data root's health, computed as data.

``collect`` gathers every section and names each problem (something an owner must act
on: the command exits non-zero) and each warning (worth a look, not a failure); the CLI
only renders it. Each section lives in its own module and never raises for a broken
part of the data root: what cannot be read is reported, so the screen always appears.
"""
