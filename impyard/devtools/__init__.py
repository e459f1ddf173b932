"""Tools for developing and demonstrating Impyard: not used by a run."""
