"""The images boxes run: the agents an imp can be created with (``agents``), what
``impyard agents`` lists (``agent_catalog``), an agent image's import, verification and
tag (``agent_image``), and what a box trusts: the CA bundle (``trust``) and the roots read
from its image (``image_roots``).

It may import ``box.docker`` and ``impyard.box.spec``; nothing launches a box from here.
"""
