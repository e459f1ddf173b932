"""The small shared leaves every layer stands on: the one user-facing error family
(``errors``), identifiers (``names``), crash-safe file writes (``fsutil``), the C library
(``libc``), text made safe to print (``textsafe``) or cut to a bound (``textcap``), and
host facts and box-contract constants defined once (``loopspace``, ``checkoutkind``,
``contract``).

Imports nothing of Impyard outside this package.
"""
