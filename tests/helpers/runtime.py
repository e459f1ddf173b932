"""The box runtime the docker tests run under: the runtime new data roots name
(``IMPYARD_INIT_RUNTIME``, runc unless set). CI runs the docker tests once per runtime."""

from __future__ import annotations

import os

TEST_RUNTIME = os.environ.get("IMPYARD_INIT_RUNTIME") or "runc"
