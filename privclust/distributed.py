"""Row passes on a Dask cluster: every partition's exact statistic is computed where the
partition is read, and the sum is taken by the caller.

`DaskEngine(client)` is an engine for privclust.clustering.rows.PartitionedTable: a run's every
pass (the votes, the grid sums, the tree's counts, the summaries) is a map of its statistic
over the table's partitions, each task reading its partition from storage (the partition is a
reference, never the rows), clipping and centring it as the run reads rows, and returning exact
integers; the caller sums them (integer sums do not depend on the order).

Noise is never drawn here. A statistic holds public values only (candidates, centres,
hyperplanes), and `DaskEngine` refuses to send one that holds a random generator. A task that
Dask runs again (its worker died, its result was lost) computes the same exact statistic again:
harmless, where a second noise draw would be a second release.

What crosses the wire: partitions' addresses and public values to the workers, exact per-
partition statistics back. Those statistics are not private: run the scheduler and workers on
a network only the service reaches, with TLS (docs/self-hosting.md).

Each worker keeps the partitions it prepared for a run, within `cache_bytes` per worker process
(oldest dropped first), so that a run's later passes skip storage; the cache lives in the
worker's memory only and is dropped when the run ends.
"""

from __future__ import annotations

import io
import pickle
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import cloudpickle
import numpy as np

from privclust.clustering.rows import Part, Partition, PerRow, Reading, Rows, Statistic, add_totals

# Per worker process: the prepared partitions of the runs in progress, newest last.
DEFAULT_CACHE_BYTES = 512 << 20
# Partitions whose per-row outputs (the owner's labels) are in flight at once.
_LABELS_IN_FLIGHT = 4


class GeneratorInStatistic(TypeError):
    """A statistic would have carried a random generator to the cluster."""


class _NoGenerators(cloudpickle.Pickler):
    """Pickles as Dask sends a task's arguments, refusing any random generator inside."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, np.random.Generator | np.random.BitGenerator | np.random.RandomState):
            raise GeneratorInStatistic(
                "a statistic sent to the cluster holds a random generator: noise is drawn only "
                "by the caller, after the sum"
            )
        return super().reducer_override(obj)


def check_no_generator(statistic: object) -> None:
    """Refuse a statistic that holds a random generator (anywhere inside it)."""
    _NoGenerators(io.BytesIO(), protocol=pickle.HIGHEST_PROTOCOL).dump(statistic)


@dataclass(frozen=True)
class _RunRows:
    """What every task of a run reads: its partitions' preparation, and the run's cache key."""

    run: str
    reading: Reading
    cache_bytes: int


class _PartCache:
    """A worker process's prepared partitions, by (run, partition index), within a byte cap."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.parts: OrderedDict[tuple[str, int], Part] = OrderedDict()

    def get(self, run: _RunRows, index: int, partition: Partition) -> Part:
        key = (run.run, index)
        with self.lock:
            part = self.parts.get(key)
            if part is not None:
                self.parts.move_to_end(key)
                return part
        part = Part(run.reading.prepare(partition.read()))
        if run.cache_bytes > 0:
            with self.lock:
                self.parts[key] = part
                self._trim(run.cache_bytes)
        return part

    def _trim(self, cap: int) -> None:
        def size(p: Part) -> int:
            return int(p.points.nbytes) + sum(int(d.points.nbytes) for d in p._derived.values())

        total = sum(size(p) for p in self.parts.values())
        while self.parts and total > cap:
            _, dropped = self.parts.popitem(last=False)
            total -= size(dropped)

    def drop(self, run: str) -> int:
        with self.lock:
            keys = [key for key in self.parts if key[0] == run]
            for key in keys:
                del self.parts[key]
        return len(keys)


_CACHE = _PartCache()


def _partition_total(
    index: int, partition: Partition, run: _RunRows, statistic: Statistic
) -> tuple[np.ndarray, ...]:
    """On a worker: one partition's exact statistic."""
    return statistic(_CACHE.get(run, index, partition))


def _partition_rows(partition: Partition, reading: Reading, per_row: PerRow) -> np.ndarray:
    """On a worker: one partition's per-row values (never cached: one pass)."""
    return per_row(Part(reading.prepare(partition.read())))


def _same(value: Any) -> Any:
    return value


def _drop_run(run: str) -> int:
    return _CACHE.drop(run)


class DaskRows(Rows):
    """A run's rows on the cluster: each pass a map over the partitions, summed here."""

    def __init__(
        self,
        client: Any,
        partitions: Sequence[Partition],
        reading: Reading,
        n_cols: int,
        cache_bytes: int,
    ) -> None:
        self.client = client
        self.partitions = list(partitions)
        self.shape = (sum(int(p.n_rows) for p in self.partitions), int(n_cols))
        self.run = _RunRows(uuid.uuid4().hex, reading, cache_bytes)

    def _placement(self) -> list[str | None]:
        """A worker for each partition (any other may take it): the same one at every pass,
        so that its cached partitions serve the run's later passes."""
        workers = sorted(self.client.scheduler_info(n_workers=-1)["workers"])
        if not workers:
            return [None] * len(self.partitions)
        return [workers[i % len(workers)] for i in range(len(self.partitions))]

    def total(self, statistic: Statistic) -> tuple[np.ndarray, ...]:
        check_no_generator(statistic)
        # The statistic and the run's reading go to the cluster once per pass, as tasks (not
        # scattered data): if the worker holding them dies, the scheduler recomputes them.
        shared = self.client.submit(_same, statistic, pure=False)
        run = self.client.submit(_same, self.run, pure=False)
        futures = [
            self.client.submit(
                _partition_total,
                i,
                partition,
                run,
                shared,
                pure=False,
                workers=None if worker is None else [worker],
                allow_other_workers=True,
            )
            for i, (partition, worker) in enumerate(
                zip(self.partitions, self._placement(), strict=True)
            )
        ]
        total = None
        try:
            for result in self.client.gather(futures):
                total = add_totals(total, result)
        finally:
            self.client.cancel([*futures, shared, run])
        assert total is not None  # a table has at least one partition
        return total

    def close(self) -> None:
        """Drop the run's cached partitions on every worker."""
        if self.run.cache_bytes > 0:
            self.client.run(_drop_run, self.run.run)


class DaskEngine:
    """The engine of a Dask cluster (a `distributed.Client`); see the module docstring."""

    def __init__(self, client: Any, *, cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.client = client
        self.cache_bytes = int(cache_bytes)
        self.opened: list[DaskRows] = []

    def working(self, partitions: Sequence[Partition], reading: Reading, n_cols: int) -> Rows:
        rows = DaskRows(self.client, partitions, reading, n_cols, self.cache_bytes)
        self.opened.append(rows)
        return rows

    def streamed(self, partitions: Sequence[Partition], reading: Reading, n_cols: int) -> Rows:
        rows = DaskRows(self.client, partitions, reading, n_cols, 0)
        self.opened.append(rows)
        return rows

    def each(
        self, partitions: Sequence[Partition], reading: Reading, per_row: PerRow
    ) -> Iterator[np.ndarray]:
        """Per-row values of every partition, in row order, a few partitions in flight."""
        check_no_generator(per_row)
        pending: list[Any] = []
        todo = iter(partitions)
        while True:
            while len(pending) < _LABELS_IN_FLIGHT:
                partition = next(todo, None)
                if partition is None:
                    break
                pending.append(
                    self.client.submit(_partition_rows, partition, reading, per_row, pure=False)
                )
            if not pending:
                return
            yield pending.pop(0).result()

    def close(self) -> None:
        """Drop every cached partition of the runs this engine served."""
        for rows in self.opened:
            rows.close()
        self.opened.clear()
