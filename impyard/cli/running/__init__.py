"""The commands of runs and tasks: ``run`` (and its handoff to a running ``serve``: the
client side loaded before the CLI, the run socket's server side), ``runs``, ``task`` and
``journal``, and how a run's output and outcome are shown.

May import the command families below it (``learned``, ``setup``, ``upkeep``; it uses
``learned`` for a run's repair line) and ``shared``; never ``serving`` or the app.
"""
