"""Upload files left in the datasets directory by an API process that stopped mid-upload.

An upload is ingested into a hidden `.ingest-*.npy.part` file that is renamed to its final name
only once every row has been checked (app.datasets.ingest). A process killed during the ingest
leaves the partial file behind; one killed after the rename but before the dataset's row was
committed leaves a complete `<dataset id>.npy` that no dataset refers to (an orphan). Both hold
rows that no dataset will ever use, so both are removed.

Several API processes may share one data dir (uvicorn workers, `docker compose --scale api=N`)
and another one may be writing a partial file right now, so one process cannot tell from the
file's name alone whether its writer is gone: processes in other containers are not even
visible to it. Instead, only files nobody has written to for STALE_AFTER_SECONDS are removed.
The ingest writes to its file continuously (the upload's body has fully arrived before the
ingest starts), so a live file is never that old.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

PARTIAL_UPLOAD_GLOB = ".ingest-*.npy.part"  # as written by app.datasets.ingest._MatrixWriter
DATASET_FILE = re.compile(r"[0-9a-f]{32}\.npy")  # a dataset id's hex: app.datasets.service
STALE_AFTER_SECONDS = 3600.0


@dataclass(frozen=True)
class RemovedFile:
    path: Path
    size: int
    idle_seconds: float


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


def remove_orphaned_dataset_files(
    directory: Path,
    referenced: Callable[[], Iterable[str]],
    stale_after: float = STALE_AFTER_SECONDS,
    now: float | None = None,
) -> list[RemovedFile]:
    """Delete dataset files in `directory` that no dataset refers to and that are older than
    `stale_after` seconds.

    `referenced` gives the file names (not paths) every dataset row refers to, deleted datasets
    included; it is called after the candidates were listed, so a file whose dataset was
    committed in between is seen as referenced. The age test spares an upload between its
    rename and its commit.
    """
    if not directory.is_dir():
        return []
    now = time.time() if now is None else now
    candidates = []
    for path in directory.iterdir():
        if not DATASET_FILE.fullmatch(path.name):
            continue
        try:
            stat = path.stat()
        except FileNotFoundError:
            continue
        if now - stat.st_mtime >= stale_after:
            candidates.append((path, stat))
    if not candidates:
        return []
    known = set(referenced())
    removed = []
    for path, stat in candidates:
        if path.name in known:
            continue
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        removed.append(RemovedFile(path, stat.st_size, now - stat.st_mtime))
    return removed


def open_rows(stored: str | Path | None) -> npt.NDArray[np.float64]:
    """Memory-map a dataset's stored rows: read-only, float64, (n_rows, n_cols).

    `stored` is the dataset's `storage_path`; None (rows deleted) raises FileNotFoundError, and a
    file that is not a matrix written by the ingest raises ValueError."""
    if stored is None:
        raise FileNotFoundError("dataset rows were deleted")
    matrix = np.load(stored, mmap_mode="r", allow_pickle=False)
    if matrix.dtype != np.dtype("<f8") or matrix.ndim != 2 or not matrix.flags.c_contiguous:
        raise ValueError(f"{stored} is not a matrix written by ingest_file")
    return matrix
