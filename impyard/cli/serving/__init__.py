"""The long-lived processes: ``serve`` and the lines it prints, ``service`` (serve as a
systemd unit), ``web`` (the console) and ``cluster``/``node`` (a Swarm, serve as its
control plane).

May import every command family below it (it uses ``running``: serve answers the run
socket) and ``shared``; never the app (``main``, ``entry``).
"""
