"""Text from boxes made safe to show on a terminal, one line at a time.

Journal fields, rejection reasons and paths can carry what a box wrote (a gateway URL, a
file name). Printed raw, an escape sequence in them would act on the owner's terminal
(retitle it, clear it, fake a line); shown escaped, it is plain evidence.
"""

from __future__ import annotations

import re

# Everything a terminal could act on (C0 but tab, DEL, C1); shown as \xNN.
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """``text`` with control characters escaped: safe to print on one line."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
