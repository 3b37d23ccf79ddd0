"""Rows on a local disk: one C-ordered little-endian float64 `.npy` matrix per dataset.

The fast path on one machine: a job memory-maps the matrix (`open_rows`) or reads row ranges
of it (`read_npy_rows`). The matrix is named after the dataset id (`<id hex>.npy`) in the
storage folder, and is written to a hidden partial file (`.ingest-*.npy.part`) that is renamed
to its final name only once every row has been checked and clipped (`NpyRowsWriter.commit`).
What a killed process leaves behind is removed by app.datasets.storage.cleanup.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import IO, BinaryIO

import numpy as np
import numpy.typing as npt

from app.datasets.storage.writer import RowClip, RowsWriter

PARTIAL_PREFIX, PARTIAL_SUFFIX = ".ingest-", ".npy.part"
PARTIAL_UPLOAD_GLOB = f"{PARTIAL_PREFIX}*{PARTIAL_SUFFIX}"
DATASET_FILE = re.compile(r"[0-9a-f]{32}\.npy")  # a dataset id's hex: rows_name()

_SAFE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")
_NPY_MAGIC = b"\x93NUMPY"
# Our own .npy header has a fixed size so it can be rewritten with the final row count in place.
_OUT_HEADER_BYTES = 128


def check_name(name: str) -> str:
    """A dataset's rows' name must be a plain file-name token (never a path)."""
    if not _SAFE_NAME_RE.fullmatch(name):
        raise ValueError(f"unsafe dataset file name {name!r}")
    return name


class NpyRowsWriter(RowsWriter):
    """Appends float64 rows to a hidden partial `.npy` in `directory`; `commit` renames it to
    `<name>.npy` (`path`), `discard` removes it."""

    def __init__(self, directory: Path, name: str, clip: RowClip | None = None) -> None:
        check_name(name)
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{name}.npy"
        if self.path.exists():
            raise FileExistsError(self.path)
        super().__init__(str(self.path), clip)
        self._directory = directory
        self._file: IO[bytes] | None = None
        self._tmp_path: Path | None = None

    def _open(self, n_cols: int) -> None:
        fd, tmp = tempfile.mkstemp(
            dir=self._directory, prefix=PARTIAL_PREFIX, suffix=PARTIAL_SUFFIX
        )
        self._tmp_path = Path(tmp)
        self._file = os.fdopen(fd, "wb")
        self._file.write(_npy_header(0, n_cols))

    def _write(self, data: npt.NDArray[np.float64]) -> None:
        assert self._file is not None
        self._file.write(data.data.cast("B"))

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
    directory.mkdir(parents=True, exist_ok=True)
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


def npy_layout(fh: BinaryIO) -> tuple[int, int, int]:
    """(rows, columns, byte offset of the data) of a C-ordered little-endian float64 .npy."""
    version = np.lib.format.read_magic(fh)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
    else:
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
    if dtype != np.dtype("<f8") or fortran or len(shape) != 2:
        raise ValueError("not a matrix written by the ingest")
    return int(shape[0]), int(shape[1]), fh.tell()


def npy_shape(path: str) -> tuple[int, int]:
    """(rows, columns) of stored rows (FileNotFoundError once they are deleted)."""
    with open(path, "rb") as fh:
        n_rows, n_cols, _ = npy_layout(fh)
    return n_rows, n_cols


def read_npy_rows(path: str, start: int, n_rows: int, n_cols: int) -> npt.NDArray[np.float64]:
    """Rows `start` to `start + n_rows` of stored rows, read into a new C-ordered array (not a
    memory map: the pages are not kept after the caller drops the array)."""
    out = np.empty((n_rows, n_cols), dtype=np.float64)
    with open(path, "rb") as fh:
        total, width, data_start = npy_layout(fh)
        if width != n_cols or start + n_rows > total:
            raise ValueError(
                f"{path} does not hold rows {start}..{start + n_rows} of width {n_cols}"
            )
        fh.seek(data_start + start * n_cols * 8)
        if fh.readinto(out.data.cast("B")) != out.nbytes:
            raise ValueError(f"{path} is shorter than its header says")
    return out


def open_npy(path: str) -> npt.NDArray[np.float64]:
    """Memory-map stored rows: read-only, float64, (n_rows, n_cols)."""
    matrix = np.load(path, mmap_mode="r", allow_pickle=False)
    if matrix.dtype != np.dtype("<f8") or matrix.ndim != 2 or not matrix.flags.c_contiguous:
        raise ValueError(f"{path} is not a matrix written by the ingest")
    return matrix


def delete_npy(path: str) -> None:
    Path(path).unlink(missing_ok=True)
