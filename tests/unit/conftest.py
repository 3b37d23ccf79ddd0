"""The clustering unit tests' fixture: the log of a run's Gaussian releases."""

from __future__ import annotations

import pytest

from tests.support.clustering import ReleaseLog


@pytest.fixture
def log(monkeypatch: pytest.MonkeyPatch) -> ReleaseLog:
    """Every Gaussian release the test's runs make, recorded as it is drawn."""
    return ReleaseLog(monkeypatch)
