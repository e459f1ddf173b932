"""Backup and restore of every imp's knowledge to the org's ``[backup] remotes``.

Each remote is a base location; imp ``<imp>`` goes to ``<remote>/<imp>.git`` with
its main (fast-forward only), candidate and quarantine refs and its settings
(``push``, ``meta``). ``notify(home, imp)`` is called after anything moves an
imp's refs (an integration, a mid-run checkpoint, a quarantine, a repair, gc): it
queues a push on a background thread and returns at once (``worker``), so a
remote that is down or slow never delays or fails the lane. How each imp stands at
each remote is kept in ``<home>/backup/status.json`` (shape in ``status``) and
journaled as ``backup.pushed`` / ``backup.failed``. ``restore`` rebuilds imps from
a backup.
"""

from impyard.backup.worker import drain, flush, notify, watch

__all__ = ["drain", "flush", "notify", "watch"]
