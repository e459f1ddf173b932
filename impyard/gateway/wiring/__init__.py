"""What joins a gateway to its box: sockets made inside the box's network namespace
(``netns``), the ready signal and proxy environment the box sees (``boxside``), and the
data root's inspection CA and the leaves it mints (``ca``, ``mint``).

Light on purpose: a run builds its box spec from these before the proxy loads. It may
import ``impyard.gateway.errors`` and the shared leaves; no other part of ``gateway``.
"""
