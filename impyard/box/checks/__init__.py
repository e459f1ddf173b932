"""``impyard check box``: the container primitive verified with the real CLI
(``check``), the rows about what a box can reach and what guards it
(``check_isolation``), and one row of the check (``checkrow``).

The top of ``box``: it may import every other part of ``box``; none imports it.
"""
