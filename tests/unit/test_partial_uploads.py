"""Abandoned upload files: only those nobody has written to for a while, and that no dataset
refers to, are removed."""

from __future__ import annotations

import os
import time
from pathlib import Path

from app.datasets.storage import (
    STALE_AFTER_SECONDS,
    remove_orphaned_rows,
    remove_stale_partial_uploads,
)


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


def test_only_old_dataset_files_no_dataset_refers_to_are_removed(tmp_path: Path) -> None:
    old = STALE_AFTER_SECONDS + 60
    orphan = _file(tmp_path, "a" * 32 + ".npy", old)
    kept = _file(tmp_path, "b" * 32 + ".npy", old)
    just_renamed = _file(tmp_path, "c" * 32 + ".npy", 5)  # its commit may be under way
    not_ours = _file(tmp_path, "notes.npy", old)
    partial = _file(tmp_path, ".ingest-" + "d" * 32 + ".npy.part", 5)
    asked = []

    def referenced() -> set[str]:
        asked.append(True)
        return {kept.name}

    removed = remove_orphaned_rows(str(tmp_path), referenced)
    assert [r.path for r in removed] == [orphan] and not orphan.exists()
    assert kept.exists() and just_renamed.exists() and not_ours.exists() and partial.exists()
    assert asked == [True]


def test_the_database_is_not_asked_when_no_file_is_old_enough(tmp_path: Path) -> None:
    young = _file(tmp_path, "e" * 32 + ".npy", 5)

    def referenced() -> set[str]:
        raise AssertionError("asked for the datasets' files with no candidate to check")

    assert remove_orphaned_rows(str(tmp_path), referenced) == []
    assert young.exists()
