"""Partial upload files left in the datasets directory by an API process that stopped mid-upload.

An upload is ingested into a hidden `.ingest-*.npy.part` file that is renamed to its final name
only once every row has been checked (app.services.ingest). A process killed during the ingest
leaves the partial file behind.

Several API processes may share one data dir (uvicorn workers, `docker compose --scale api=N`)
and another one may be writing a partial file right now, so one process cannot tell from the
file's name alone whether its writer is gone: processes in other containers are not even
visible to it. Instead, only files nobody has written to for STALE_AFTER_SECONDS are removed.
The ingest writes to its file continuously (the upload's body has fully arrived before the
ingest starts), so a live file is never that old.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

PARTIAL_UPLOAD_GLOB = ".ingest-*.npy.part"  # as written by app.services.ingest._MatrixWriter
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
