"""The API removes partial uploads left by a process that was killed during an upload."""

from __future__ import annotations

import logging
import os
import time
import uuid

import pytest
from fastapi.testclient import TestClient

from app.datasets.storage import STALE_AFTER_SECONDS
from app.kit.config import Settings
from tests.support.api import uploaded

pytestmark = pytest.mark.integration


def test_start_up_removes_stale_partial_uploads_and_says_so(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    from app.main import create_app

    directory = settings.datasets_dir
    directory.mkdir(parents=True)
    stale = directory / ".ingest-killed.npy.part"
    stale.write_bytes(b"\0" * 4096)
    then = time.time() - STALE_AFTER_SECONDS - 1
    os.utime(stale, (then, then))
    # Possibly another API process's upload in progress right now: left alone.
    live = directory / ".ingest-live.npy.part"
    live.write_bytes(b"\0" * 4096)

    with (
        caplog.at_level(logging.WARNING, logger="privclust.api"),
        TestClient(create_app(settings)) as client,
    ):
        assert client.get("/healthz").status_code == 200
    assert not stale.exists()
    assert live.exists()
    assert any(str(stale) in r.getMessage() for r in caplog.records), caplog.text


def test_start_up_removes_a_complete_upload_no_dataset_refers_to(
    settings: Settings, keys: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    # An API killed after renaming an upload into place but before committing its dataset.
    from app.main import create_app

    directory = settings.datasets_dir
    with TestClient(create_app(settings)) as client:
        rows = b"x,y\n1,2\n3,4\n5,6\n"
        uploaded(client, keys["owner"], rows, name="kept", filename="kept.csv", epsilon="1")
    (kept,) = directory.glob("*.npy")
    orphan = directory / (uuid.uuid4().hex + ".npy")
    orphan.write_bytes(kept.read_bytes())
    then = time.time() - STALE_AFTER_SECONDS - 1
    for path in (kept, orphan):
        os.utime(path, (then, then))

    with (
        caplog.at_level(logging.WARNING, logger="privclust.api"),
        TestClient(create_app(settings)) as client,
    ):
        assert client.get("/healthz").status_code == 200
    assert kept.exists() and not orphan.exists()
    assert any(
        str(orphan) in r.getMessage() and "never recorded" in r.getMessage() for r in caplog.records
    ), caplog.text
