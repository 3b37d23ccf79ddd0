"""Writing a new dataset's rows: one interface whatever the store (a local .npy, or Parquet
partitions in object storage).

The ingest (app.datasets.ingest, and an import's reader) hands a writer checked float64 rows in
blocks; the writer clips each block into the declared domain before a byte of it is stored,
then writes it. `commit` makes the rows the dataset's (`stored` is what its `storage_path`
records); `discard` removes whatever was written.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Protocol

import numpy as np
import numpy.typing as npt


class RowClip(Protocol):
    """Clips rows into a dataset's declared domain (app.datasets.domain.DomainClip)."""

    def start(self, n_cols: int) -> None:
        """Learn the width (a domain that does not fit it raises InvalidParameter)."""

    def __call__(self, block: npt.NDArray[np.float64]) -> None:
        """Clip `block`'s rows in place."""


class RowsWriter(ABC):
    """Takes a new dataset's rows block by block. Nothing is created before `start`."""

    def __init__(self, stored: str, clip: RowClip | None = None) -> None:
        self.stored = stored  # the dataset's storage_path once committed
        self.n_cols: int | None = None
        self.n_rows = 0
        self._clip = clip

    def start(self, n_cols: int) -> None:
        """Begin a matrix of `n_cols` columns (the domain is checked against it first)."""
        if self._clip is not None:
            self._clip.start(n_cols)
        self.n_cols = n_cols
        self._open(n_cols)

    def append(self, block: npt.NDArray[np.float64]) -> None:
        """Store the next rows (finite values, already checked), clipped into the domain; a
        block that is C-ordered, writable float64 may be clipped in place."""
        assert block.ndim == 2 and block.shape[1] == self.n_cols
        data = np.require(block, dtype="<f8", requirements=["C", "W"])
        if self._clip is not None:
            self._clip(data)
        self._write(data)
        self.n_rows += data.shape[0]

    @abstractmethod
    def _open(self, n_cols: int) -> None: ...

    @abstractmethod
    def _write(self, data: npt.NDArray[np.float64]) -> None: ...

    @abstractmethod
    def commit(self) -> None:
        """Make every appended row durable as the dataset's stored rows (`stored`)."""

    @abstractmethod
    def discard(self) -> None:
        """Remove whatever was written (safe to call twice, or before `start`)."""
