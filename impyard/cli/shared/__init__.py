"""What every command shares: this invocation's state and the one way to print
(``_common``: echo, warn, error, JSON), tables fitted to the terminal (``_table``), text
folded at word boundaries (``_wrap``) and shell completion of values (``complete``).

Imports no other part of ``impyard.cli``; below it, only the shared leaves (and, lazily
for completion, the catalogue of imps and the run index).
"""
