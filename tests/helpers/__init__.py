"""Helpers shared by the tests: plain modules, imported explicitly (no tests in here)."""
