"""Where and how a dataset's rows are kept: the only module that knows their files.

A dataset's rows are one C-ordered little-endian float64 `.npy` matrix named after the dataset
id (`<id hex>.npy`) in the datasets directory; a dataset row records where its matrix is (its
`storage_path`, a local path today). Everything that touches those files goes through here:
writing a new dataset's rows (`RowsWriter`), the scratch copy of an upload (`spool_file`),
clipping the rows into the declared domain (`clip_into_domain`), opening them for a job
(`open_rows`), deleting them (`delete_rows`), and removing what a killed API left behind
(`remove_abandoned_uploads`).

A new matrix is written to a hidden partial file (`.ingest-*.npy.part`) that is renamed to its
final name only once every row has been checked (app.datasets.ingest). A process killed during
the ingest leaves the partial file behind; one killed after the rename but before the dataset's
row was committed leaves a complete `<dataset id>.npy` that no dataset refers to (an orphan).
Both hold rows that no dataset will ever use, so both are removed.

Several API processes may share one data dir (uvicorn workers, `docker compose --scale api=N`)
and another one may be writing a partial file right now, so one process cannot tell from the
file's name alone whether its writer is gone: processes in other containers are not even
visible to it. Instead, only files nobody has written to for STALE_AFTER_SECONDS are removed.
The ingest writes to its file continuously (the upload's body has fully arrived before the
ingest starts), so a live file is never that old.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO

import numpy as np
import numpy.typing as npt

from privclust.clustering import clip_into_ball

PARTIAL_PREFIX, PARTIAL_SUFFIX = ".ingest-", ".npy.part"
PARTIAL_UPLOAD_GLOB = f"{PARTIAL_PREFIX}*{PARTIAL_SUFFIX}"
DATASET_FILE = re.compile(r"[0-9a-f]{32}\.npy")  # a dataset id's hex: rows_name()
STALE_AFTER_SECONDS = 3600.0

_SAFE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")
_NPY_MAGIC = b"\x93NUMPY"
# Our own .npy header has a fixed size so it can be rewritten with the final row count in place.
_OUT_HEADER_BYTES = 128
# Values per block when clipping a stored matrix (8 MiB of float64): memory stays bounded.
_CLIP_BLOCK_VALUES = 1 << 20

# The API process's log, where operators have always found the abandoned-upload lines.
log = logging.getLogger("privclust.api")


def rows_name(dataset_id: uuid.UUID) -> str:
    """The name a dataset's rows are stored under (what the orphan sweep recognises)."""
    return dataset_id.hex


def stored_name(stored: str) -> str:
    """The file name of stored rows (a dataset's `storage_path`), as `referenced` gives it."""
    return Path(stored).name


# --------------------------------------------------------------------------------------------
# Writing a new dataset's rows


class RowsWriter:
    """Appends float64 rows to a hidden partial `.npy` in `directory`; `commit` renames it to
    `<name>.npy` (`path`), `discard` removes it. Nothing is created before `start`."""

    def __init__(self, directory: Path, name: str) -> None:
        if not _SAFE_NAME_RE.fullmatch(name):
            raise ValueError(f"unsafe dataset file name {name!r}")
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{name}.npy"
        if self.path.exists():
            raise FileExistsError(self.path)
        self._directory = directory
        self._file: IO[bytes] | None = None
        self._tmp_path: Path | None = None
        self.n_cols: int | None = None
        self.n_rows = 0

    def start(self, n_cols: int) -> None:
        fd, tmp = tempfile.mkstemp(
            dir=self._directory, prefix=PARTIAL_PREFIX, suffix=PARTIAL_SUFFIX
        )
        self._tmp_path = Path(tmp)
        self._file = os.fdopen(fd, "wb")
        self.n_cols = n_cols
        self._file.write(_npy_header(0, n_cols))

    def append(self, block: npt.NDArray[np.float64]) -> None:
        assert self._file is not None and block.ndim == 2 and block.shape[1] == self.n_cols
        data = np.ascontiguousarray(block, dtype="<f8")
        self._file.write(data.data.cast("B"))
        self.n_rows += data.shape[0]

    def commit(self) -> None:
        assert self._file is not None and self._tmp_path is not None and self.n_cols is not None
        self._file.seek(0)
        self._file.write(_npy_header(self.n_rows, self.n_cols))
        self._file.flush()
        # The dataset row in the database will point at this file: make it durable first.
        os.fsync(self._file.fileno())
        self._file.close()
        self._file = None
        os.replace(self._tmp_path, self.path)
        self._tmp_path = None
        _fsync_directory(self._directory)

    def discard(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._tmp_path is not None:
            self._tmp_path.unlink(missing_ok=True)
            self._tmp_path = None


def spool_file(directory: Path) -> IO[bytes]:
    """An anonymous scratch file for an upload that must be read out of order or twice: beside
    the datasets (an upload may be larger than the system's temporary directory), and removed
    by the OS when it is closed, even if this process dies."""
    return tempfile.TemporaryFile(dir=directory, prefix=".upload-")


def _fsync_directory(directory: Path) -> None:
    """Make a rename in `directory` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _npy_header(n_rows: int, n_cols: int) -> bytes:
    """A version 1.0 .npy header for a C-ordered <f8 array, padded to a fixed size."""
    text = f"{{'descr': '<f8', 'fortran_order': False, 'shape': ({n_rows}, {n_cols}), }}"
    header_len = _OUT_HEADER_BYTES - len(_NPY_MAGIC) - 4
    padded = text.ljust(header_len - 1) + "\n"
    if len(padded) != header_len:
        raise ValueError(f"matrix shape ({n_rows}, {n_cols}) too large for the .npy header")
    return _NPY_MAGIC + b"\x01\x00" + header_len.to_bytes(2, "little") + padded.encode("latin1")


# --------------------------------------------------------------------------------------------
# Stored rows: clip, open, delete


def clip_into_domain(
    stored: str | Path,
    center: Sequence[float],
    radius: float,
    box: tuple[Sequence[float], Sequence[float]] | None = None,
) -> None:
    """Clip every row of stored rows into the ball around `center`, in place; with a `box`
    (lower, upper), first into the box, column by column (the box lies in its ball).

    x <- c + (x - c) * min(1, R / ||x - c||) (the radial clip of the clustering library's
    `clip_into_ball`, which cannot overflow for any finite row), a hair inside the sphere. The
    file is read and rewritten in blocks through one
    reusable buffer (not memory-mapped, so the process's memory stays at one block whatever the
    file's size), and only blocks that change are written back. Nothing is counted: how many
    rows were clipped is never recorded. (The clustering code clips again in centred
    coordinates; that clip is the one its sensitivities rely on.)
    """
    c = np.asarray(center, dtype=np.float64)
    lower, upper = (None, None) if box is None else (np.asarray(b, dtype="<f8") for b in box)
    changed_any = False
    with open(stored, "r+b") as fh:
        n_rows, n_cols, data_start = _npy_matrix_layout(fh)
        block_rows = max(1, _CLIP_BLOCK_VALUES // n_cols)
        buffer = np.empty((block_rows, n_cols), dtype="<f8")
        row_bytes = n_cols * 8
        for start in range(0, n_rows, block_rows):
            m = min(block_rows, n_rows - start)
            block, offset = buffer[:m], data_start + start * row_bytes
            fh.seek(offset)
            if fh.readinto(block.data.cast("B")) != m * row_bytes:
                raise ValueError(f"{stored} is shorter than its header says")
            boxed = False
            if lower is not None and upper is not None:
                outside = (block < lower) | (block > upper)
                boxed = bool(outside.any())
                if boxed:
                    np.clip(block, lower, upper, out=block)
            if clip_into_ball(block, c, radius) or boxed:
                fh.seek(offset)
                fh.write(block.data.cast("B"))
                changed_any = True
        if changed_any:
            fh.flush()
            # The dataset row will point at this file: make the clipped rows durable first.
            os.fsync(fh.fileno())


def _npy_matrix_layout(fh: BinaryIO) -> tuple[int, int, int]:
    """(rows, columns, byte offset of the data) of a C-ordered little-endian float64 .npy."""
    version = np.lib.format.read_magic(fh)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
    else:
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
    if dtype != np.dtype("<f8") or fortran or len(shape) != 2:
        raise ValueError("not a matrix written by ingest_file")
    return int(shape[0]), int(shape[1]), fh.tell()


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


def delete_rows(stored: str | Path | None) -> None:
    """Remove stored rows; rows already gone (or never stored: None) are not an error."""
    if stored is not None:
        Path(stored).unlink(missing_ok=True)


# --------------------------------------------------------------------------------------------
# What a killed API process left behind


@dataclass(frozen=True)
class RemovedFile:
    path: Path
    size: int
    idle_seconds: float


def remove_abandoned_uploads(
    directory: Path, referenced: Callable[[], Iterable[str]]
) -> list[RemovedFile]:
    """Delete the partial uploads and the orphaned dataset files in `directory` that have been
    untouched for STALE_AFTER_SECONDS, and say so in the log. `referenced` is as for
    `remove_orphaned_dataset_files`; its errors, and OSError, are the caller's to handle."""
    partial = remove_stale_partial_uploads(directory)
    orphans = remove_orphaned_dataset_files(directory, referenced)
    for f, what in [(f, "a partial upload") for f in partial] + [
        (f, "a complete upload whose dataset was never recorded") for f in orphans
    ]:
        log.warning(
            "removed %s (%.1f MiB, untouched for %.0f min): %s left by an API process that "
            "stopped during the upload",
            f.path,
            f.size / 2**20,
            f.idle_seconds / 60,
            what,
        )
    return partial + orphans


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

    `referenced` gives the file names (`stored_name`, not paths) every dataset row refers to,
    deleted datasets included; it is called after the candidates were listed, so a file whose
    dataset was committed in between is seen as referenced. The age test spares an upload
    between its rename and its commit.
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
