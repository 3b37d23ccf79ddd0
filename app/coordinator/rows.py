"""A federated dataset's rows as a run reads them on the coordinator: none of them are here.

`FederatedTable` stands where a stored table stands in a job (privclust.clustering.data.rows):
every release goes through `Rows.release`, the one door, and `FederatedRows.release` sends the
pass to every member and adds the masked vectors up (app.coordinator.service.FederatedJob).
No exact statistic ever leaves a member, so `total` refuses; and the rows' number, which no
one knows, stands as the released N~ (a run plans with the dataset's public count only).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from app.coordinator.service import FederatedJob
from privclust.clustering.data.release import Gaussian
from privclust.clustering.data.rows import PerRow, Reading, Rows, Statistic, Table


class FederatedRows(Rows):
    """The members' rows, released only through their secure sum."""

    def __init__(self, calls: FederatedJob, shape: tuple[int, int]) -> None:
        self.calls, self.shape = calls, shape

    def total(self, statistic: Statistic) -> tuple[np.ndarray, ...]:
        raise RuntimeError("a federated dataset has no exact statistic: only releases leave it")

    def release(
        self, statistic: Statistic, noises: Sequence[Gaussian], rng: np.random.Generator
    ) -> tuple[np.ndarray, ...]:
        # The noise is the members' shares; `rng` stays the run's for its post-processing.
        return self.calls.release(statistic, noises, n_public=self.shape[0])


class FederatedTable(Table):
    """A federated dataset in a run: N~ public rows (a stand-in: no one knows N) of d columns."""

    def __init__(self, calls: FederatedJob, n_rows_dp: int, n_cols: int) -> None:
        self.calls = calls
        self.shape = (max(int(n_rows_dp), 1), int(n_cols))

    def rows(self, reading: Reading) -> Rows:
        return FederatedRows(self.calls, self.shape)

    def streamed(self, reading: Reading) -> Rows:
        return FederatedRows(self.calls, self.shape)

    def each(self, reading: Reading, per_row: PerRow) -> Iterator[np.ndarray]:
        raise RuntimeError("a federated dataset's labels are computed on each member")
