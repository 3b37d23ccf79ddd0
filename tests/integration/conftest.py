"""The integration tests' client: the real app in this process (TestClient), on the test's
database and Redis."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.kit.config import Settings


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    from app.main import create_app

    with TestClient(create_app(settings)) as c:
        yield c
