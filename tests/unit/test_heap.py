"""serve's malloc settings apply on glibc and trimming is harmless."""

from __future__ import annotations

import platform

import pytest

from impyard.runs import heap


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_configure_and_trim_on_glibc() -> None:
    assert heap.configure() is True
    heap.trim()
    heap.trim()
