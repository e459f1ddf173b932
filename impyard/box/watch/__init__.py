"""What is watched of a running box: its output, kept bounded and readable live
(``logs``, ``livelog``), and how much of its memory its ``/tmp`` holds (``tmpwatch``).

It may import ``box.docker`` and ``impyard.box.spec``.
"""
