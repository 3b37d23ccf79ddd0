"""Removing what a killed process left behind: partial uploads and orphaned rows.

A process killed during an ingest leaves a partial file (`.ingest-*.npy.part`) or, in object
storage, parts without a manifest; one killed after the rows were complete but before the
dataset's row was committed leaves complete rows that no dataset refers to (an orphan). Both
hold rows that no dataset will ever use, so both are removed. An upload that failed while the
store was down, and could not delete its parts then, recorded them (app.datasets.storage.
pending): they are removed as soon as the store answers, whatever their age.

Several API processes (and workers importing datasets) may share one store, and another one may
be writing right now, so one process cannot tell from a name alone whether its writer is gone:
processes in other containers are not even visible to it. Instead, only what nobody has
written to for STALE_AFTER_SECONDS is removed. An ingest writes continuously, so live rows are
never that old; an import records where it writes before it starts, so its rows are referenced.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from app.datasets.storage import pending, remote
from app.datasets.storage.local import DATASET_FILE, PARTIAL_UPLOAD_GLOB
from app.datasets.storage.location import filesystem, is_remote

STALE_AFTER_SECONDS = 3600.0
_DATASET_PREFIX = re.compile(r"[0-9a-f]{32}")  # a dataset id's hex: rows_name()

# The API process's log, where operators have always found the abandoned-upload lines.
log = logging.getLogger("privclust.api")


@dataclass(frozen=True)
class RemovedFile:
    path: Path | str
    size: int
    idle_seconds: float


def remove_abandoned_rows(
    storage_url: str, scratch: Path, referenced: Callable[[], Iterable[str]]
) -> list[RemovedFile]:
    """Delete stale partial uploads (in the local storage folder and in the uploads' scratch
    folder) and stale orphaned rows in the store, and say so in the log. `referenced` is as
    for `remove_orphaned_rows`; its errors, OSError and the store's are the caller's."""
    local = [] if is_remote(storage_url) else [Path(storage_url)]
    partial: list[RemovedFile] = []
    for directory in dict.fromkeys([*local, scratch]):
        partial += remove_stale_partial_uploads(directory)
    cut: list[RemovedFile] = []
    if is_remote(storage_url):
        deleted = pending.settle(scratch, referenced, remote.delete_prefix)
        cut = [RemovedFile(url, 0, 0.0) for url in deleted]
    orphans = remove_orphaned_rows(storage_url, referenced)
    for url in cut:
        log.warning(
            "removed %s: the rows of an upload that failed, which it could not delete", url.path
        )
    for f, what in [(f, "a partial upload") for f in partial] + [
        (f, "a complete upload whose dataset was never recorded") for f in orphans
    ]:
        log.warning(
            "removed %s (%.1f MiB, untouched for %.0f min): %s left by a process that "
            "stopped during the upload",
            f.path,
            f.size / 2**20,
            f.idle_seconds / 60,
            what,
        )
    return cut + partial + orphans


def remove_abandoned_uploads(
    directory: Path, referenced: Callable[[], Iterable[str]]
) -> list[RemovedFile]:
    """`remove_abandoned_rows` for a local storage folder that is also the scratch folder."""
    return remove_abandoned_rows(str(directory), directory, referenced)


def remove_stale_partial_uploads(
    directory: Path, stale_after: float = STALE_AFTER_SECONDS, now: float | None = None
) -> list[RemovedFile]:
    """Delete partial upload files in `directory` not written to for `stale_after` seconds."""
    if not directory.is_dir():
        return []
    now = time.time() if now is None else now
    removed = []
    for path in directory.glob(PARTIAL_UPLOAD_GLOB):
        try:
            stat = path.stat()
            if now - stat.st_mtime < stale_after:
                continue
            path.unlink()
        except FileNotFoundError:  # finished, discarded, or removed by another API process
            continue
        removed.append(RemovedFile(path, stat.st_size, now - stat.st_mtime))
    return removed


def remove_orphaned_rows(
    storage_url: str,
    referenced: Callable[[], Iterable[str]],
    stale_after: float = STALE_AFTER_SECONDS,
    now: float | None = None,
) -> list[RemovedFile]:
    """Delete the rows in the store at `storage_url` that no dataset refers to and that are
    older than `stale_after` seconds: a local folder's dataset files, or in object storage a
    dataset's folder of parts whose newest object is that old.

    `referenced` gives the names (`stored_name`, not paths) every dataset row refers to,
    deleted datasets included; it is called after the candidates were listed, so rows whose
    dataset was committed in between are seen as referenced. The age test spares an upload
    between its rename and its commit.
    """
    now = time.time() if now is None else now
    if is_remote(storage_url):
        orphans = _remote_orphans(storage_url, stale_after, now)
        return _remove_unreferenced(orphans, referenced, _delete_folder)
    orphans = _local_orphans(Path(storage_url), stale_after, now)
    return _remove_unreferenced(orphans, referenced, _unlink)


def _local_orphans(directory: Path, stale_after: float, now: float) -> list[_Orphan]:
    """The stale dataset files in a local storage folder."""
    if not directory.is_dir():
        return []
    candidates = []
    for path in directory.iterdir():
        if not DATASET_FILE.fullmatch(path.name):
            continue
        try:
            stat = path.stat()
        except FileNotFoundError:
            continue
        if now - stat.st_mtime >= stale_after:
            candidates.append(_Orphan(path.name, path, stat.st_size, now - stat.st_mtime))
    return candidates


def _unlink(orphan: _Orphan) -> bool:
    try:
        Path(orphan.where).unlink()
    except FileNotFoundError:  # removed by another process meanwhile
        return False
    return True


def _remote_orphans(storage_url: str, stale_after: float, now: float) -> list[_Orphan]:
    """The stale datasets' folders of parts in object storage (stale: its newest object)."""
    fs = filesystem(storage_url)
    fs.invalidate_cache()
    try:
        folders = fs.ls(storage_url, detail=False)
    except FileNotFoundError:
        return []
    candidates = []
    for folder in folders:
        name = str(folder).rstrip("/").rsplit("/", 1)[-1]
        if not _DATASET_PREFIX.fullmatch(name):
            continue
        objects = fs.find(folder, detail=True).values()
        newest = max((_mtime(o) for o in objects), default=None)
        if newest is not None and now - newest >= stale_after:
            url = f"{storage_url.rstrip('/')}/{name}"
            size = sum(int(o.get("size") or 0) for o in objects)
            candidates.append(_Orphan(name, url, size, now - newest))
    return candidates


def _delete_folder(orphan: _Orphan) -> bool:
    remote.delete_prefix(str(orphan.where))
    return True


@dataclass(frozen=True)
class _Orphan:
    """Stale rows that may have no dataset: their stored name, where they are, their size."""

    name: str
    where: Path | str
    size: int
    idle_seconds: float


def _remove_unreferenced(
    candidates: list[_Orphan],
    referenced: Callable[[], Iterable[str]],
    remove: Callable[[_Orphan], bool],
) -> list[RemovedFile]:
    """`remove` each candidate whose name no dataset refers to (asked only now, after they
    were listed: a dataset committed meanwhile is seen); what it removed."""
    if not candidates:
        return []
    known = set(referenced())
    return [
        RemovedFile(orphan.where, orphan.size, orphan.idle_seconds)
        for orphan in candidates
        if orphan.name not in known and remove(orphan)
    ]


def _mtime(info: dict[str, object]) -> float:
    modified = info.get("LastModified") or info.get("mtime")
    if isinstance(modified, datetime):
        return modified.timestamp()
    return float(modified) if isinstance(modified, int | float) else 0.0
