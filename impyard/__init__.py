"""Impyard: runs AI agents (imps) in Docker boxes and keeps their knowledge in Git."""

__version__ = "0.1.0"
