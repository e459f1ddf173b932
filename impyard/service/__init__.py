"""``impyard service``: run ``impyard serve`` under systemd (the unit, and writing it)."""
