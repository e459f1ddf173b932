"""The console's routes: overview and runs, review, knowledge, ``/metrics``, and the
Server-Sent Events that stream a page's updates.

May import ``impyard.web.access`` (the session every route needs, the console's state) and
``impyard.web.pages``; never ``impyard.web.serving``.
"""
