"""Default owner policy shipped as package data (read with importlib.resources)."""
