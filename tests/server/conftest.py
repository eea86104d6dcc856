"""Fixtures of the server tests: a test-only PKI made once per run."""

from __future__ import annotations

import pytest

from tests.server.certs import PKI, make_pki

USERS = ["alice", "bob", "runner", "mallory"]


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return make_pki(tmp_path_factory.mktemp("pki"), USERS)
