"""Partial upload files: only those nobody has written to for a while are removed."""

from __future__ import annotations

import os
import time
from pathlib import Path

from app.services.partial_uploads import STALE_AFTER_SECONDS, remove_stale_partial_uploads


def _file(directory: Path, name: str, age: float) -> Path:
    path = directory / name
    path.write_bytes(b"x" * 100)
    then = time.time() - age
    os.utime(path, (then, then))
    return path


def test_only_stale_partial_uploads_are_removed(tmp_path: Path) -> None:
    stale = _file(tmp_path, ".ingest-abc.npy.part", STALE_AFTER_SECONDS + 60)
    live = _file(tmp_path, ".ingest-def.npy.part", 5)
    dataset = _file(tmp_path, "0123abcd.npy", STALE_AFTER_SECONDS * 10)
    other = _file(tmp_path, ".ingest-ghi.npy", STALE_AFTER_SECONDS * 10)
    removed = remove_stale_partial_uploads(tmp_path)
    assert [r.path for r in removed] == [stale]
    assert removed[0].size == 100 and removed[0].idle_seconds >= STALE_AFTER_SECONDS
    assert not stale.exists()
    assert live.exists() and dataset.exists() and other.exists()


def test_a_missing_directory_is_nothing_to_clean(tmp_path: Path) -> None:
    assert remove_stale_partial_uploads(tmp_path / "absent") == []
