"""The body digest: the same SHA-256 whether a body is hashed inline or beside the relay."""

from __future__ import annotations

import hashlib
import os

import pytest

from impyard.gateway.provenance.digest import PARALLEL_AFTER, BodyDigest


@pytest.mark.parametrize("total", [0, 1000, PARALLEL_AFTER, PARALLEL_AFTER * 5 + 12345])
def test_the_digest_is_the_sha256_of_every_piece_in_order(total: int) -> None:
    data = os.urandom(total)
    digest = BodyDigest()
    for start in range(0, total, 65536):
        digest.update(data[start : start + 65536])
    assert digest.hexdigest() == hashlib.sha256(data).hexdigest()
    assert digest.hexdigest() == hashlib.sha256(data).hexdigest()  # asking again is fine
