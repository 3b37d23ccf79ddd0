"""A member's own rows as a federated job's passes read them: its stored rows, read as the
coordinator's run reads the pooled rows (the same domain, the same dtype), so that the members'
exact statistics add up to the pooled rows' statistic bit for bit."""

from __future__ import annotations

import numpy as np

from app.datasets import storage
from app.datasets.domain import is_box
from app.models import Dataset
from privclust.clustering.data.rows import ArrayTable, Reading, Rows
from privclust.clustering.data.scaling import Box

# The dtypes a federated job may read the rows as (a method's `rows_dtype`).
ROW_DTYPES = ("float32", "float64")


def reading_of(dataset: Dataset, dtype: str) -> Reading:
    """How a job reads the dataset's rows: clipped into its declared domain and centred, as
    `dtype` (a box first maps each column onto [0, 1] by its bounds)."""
    if dtype not in ROW_DTYPES:
        raise ValueError(f"rows are read as one of {ROW_DTYPES}")
    if is_box(dataset):
        box = Box.of(dataset.lower, dataset.upper, dataset.n_cols)
        return Reading(radius=box.radius, center=box.center, dtype=dtype, box=box)
    center = np.asarray(dataset.center, dtype=np.float64)
    return Reading(radius=float(dataset.radius), center=center, dtype=dtype)


def member_rows(stored: str, reading: Reading) -> Rows:
    """The dataset's rows stored at `stored`, read whole in this process as `reading` says."""
    with storage.reaching(stored, "reading a member's rows", answered_missing=True):
        return ArrayTable(storage.open_rows(stored)).rows(reading)
