"""Docker boxes, in parts, top to bottom: ``checks`` (``impyard check box``) beside
``images`` (agents, their images, what a box trusts), ``launcher`` (launch, helpers,
overlay volumes), ``watch`` (a box's output and ``/tmp``), ``docker`` (the engine's API).
``spec`` (a box as data) is the vocabulary they all share and imports none of them."""
