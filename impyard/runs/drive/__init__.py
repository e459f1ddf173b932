"""One run driven end to end (``pipeline``): what its hosting process gives it
(``context``), its checkout and run space (``run_checkout``, ``space``), its gateway
(``run_gateway``), work overlapped beside its main path (``beside``, ``preload``), its box's
exit recorded (``exits``) and how it ends (``endings``).

It may import every part of ``runs`` below it (``ready``, ``checkpoints``, ``provision``,
``records``); ``runs.host`` alone imports it.
"""
