"""The owner's labels: each row's nearest released centre, streamed as CSV or .npy in blocks.

Labels are a post-processing of the released centres (no budget), but they describe individual
rows: only the dataset's owner may read them (the route enforces it).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from app.coordinator.terms import is_federated
from app.datasets import storage
from app.datasets.domain import run_domain
from app.kit.cluster import ClusterUnreachable, row_engine
from app.kit.config import get_settings
from app.kit.errors import Conflict, Gone, ServiceUnavailable
from app.models import Dataset, Job, JobStatus
from privclust.clustering.data.rows import InProcess, PartitionedTable
from privclust.clustering.outputs.summaries import nearest_centre_blocks


@dataclass(frozen=True)
class LabelSource:
    """What streaming needs, read before the request's session closes."""

    matrix: Any  # a read-only memory-mapped N x d matrix, or the stored partitions (a Table)
    centers: np.ndarray
    # The dataset's domain as the library takes it (a ball, or a box compared in the scaled
    # space where the job clustered): app.datasets.domain.run_domain.
    domain: dict[str, Any]


def open_labels(session: Session, job: Job) -> LabelSource:
    """The rows and released centres of a succeeded job; 409 if it has not succeeded, 410 if
    the dataset's rows were deleted."""
    if job.status != JobStatus.SUCCEEDED or job.centers is None:
        raise Conflict(
            f"labels exist only for a succeeded job; this one is {job.status}",
            code="job-not-succeeded",
        )
    dataset = session.get(Dataset, job.dataset_id)
    if dataset is not None and is_federated(dataset):
        raise Conflict(
            "a federated dataset holds no rows here: each member's owner downloads its own "
            "rows' labels from its member's server",
            code="federated-dataset",
        )
    return rows_with_centres(dataset, job.centers)


def rows_with_centres(dataset: Dataset | None, centers: list[list[float]]) -> LabelSource:
    """A dataset's rows with the released `centers` to label them by: 410 if its rows were
    deleted, 503 if the Dask cluster that reads them cannot be reached."""
    deleted = "the dataset's rows were deleted; no labels can be computed"
    if dataset is None or dataset.deleted_at is not None or dataset.storage_path is None:
        raise Gone(deleted, code="rows-deleted")
    settings = get_settings()
    stored = dataset.storage_path
    try:
        engine = row_engine(settings)
    except ClusterUnreachable as exc:
        raise ServiceUnavailable(
            "the Dask cluster that computes labels cannot be reached; try again later"
        ) from exc
    try:
        if isinstance(engine, InProcess) and not storage.is_remote(stored):
            matrix: Any = storage.open_rows(stored)
        else:  # partition by partition, on the cluster when there is one
            partitions = storage.row_partitions(stored, settings.partition_rows)
            matrix = PartitionedTable(partitions, partitions[0].n_cols, engine)
    except OSError as exc:  # removed between the check and here
        raise Gone(deleted, code="rows-deleted") from exc
    return LabelSource(
        matrix=matrix,
        centers=np.asarray(centers, dtype=np.float64),
        domain=run_domain(dataset),
    )


def _blocks(source: LabelSource) -> Iterator[np.ndarray]:
    return nearest_centre_blocks(source.matrix, source.centers, **source.domain)


def stream(source: LabelSource, fmt: str) -> Iterator[bytes]:
    """The labels as CSV (a `label` header, one integer per line) or as a 1-D int32 .npy,
    one block of rows at a time."""
    if fmt == "npy":
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(
            header,
            {"descr": "<i4", "fortran_order": False, "shape": (int(source.matrix.shape[0]),)},
        )
        yield header.getvalue()
        for labels in _blocks(source):
            yield labels.astype("<i4").tobytes()
        return
    yield b"label\n"
    for labels in _blocks(source):
        yield ("\n".join(map(str, labels.tolist())) + "\n").encode()
