"""How a run's checkout is made, defined once and importing nothing: the launcher picks
it (``box.launcher.volumes``, from what the engine supports) and knowledge builds the checkout
it names, so neither needs the other."""

from __future__ import annotations

from typing import Literal

CheckoutKind = Literal["overlay", "copy"]
