"""Row passes on a Dask cluster: every partition's exact statistic is computed where the
partition is read, and the sum is taken by the caller.

`DaskEngine(client)` is an engine for privclust.clustering.data.rows.PartitionedTable: a run's every
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

Each worker keeps the partitions it prepared for a run, so that a run's later passes skip
storage and the preparation: in memory within `cache_bytes` per worker process, the rest on the
worker's local disk (prepared rows, clipped and centred: the worker's directory must be as
private as the storage). Both are dropped when the run ends; a run whose caller died is
dropped by the caller's next run (`cached_runs`, `drop_runs`) or, at the latest, once no task
has read it for `lease_seconds`. How the caller waits on a pass is the engine's `wait` (a
service's gives up on a cluster that cannot run the tasks, or on a cancelled job).
"""

from __future__ import annotations

import ctypes
import io
import pickle
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import cloudpickle
import numpy as np

from privclust.clustering.data.rows import (
    Part,
    Partition,
    PerRow,
    Reading,
    Rows,
    Statistic,
    add_totals,
)
from privclust.worker_cache import CACHE, DEFAULT_LEASE_SECONDS, RunRows

# Per worker process: the prepared partitions of the runs in progress, newest last.
DEFAULT_CACHE_BYTES = 512 << 20
# Partitions whose per-row outputs (the owner's labels) are in flight at once.
_LABELS_IN_FLIGHT = 4

# Waits until every future of a pass is done (or raises to end the run).
Wait = Callable[[Sequence[Any]], None]


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


# glibc's malloc options (mallopt): the trim and memory-map thresholds.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
# What glibc's own dynamic thresholds grow to (the memory-map one's ceiling, and twice that).
_MMAP_THRESHOLD_BYTES, _TRIM_THRESHOLD_BYTES = 32 << 20, 64 << 20
_malloc_tuned = False


def _tune_malloc() -> None:
    """Give this worker process glibc's usual allocation thresholds back.

    Dask's nanny starts workers with MALLOC_TRIM_THRESHOLD_=65536, which also freezes glibc's
    memory-map threshold at 128 KiB: every temporary array of a pass above that is mapped and
    unmapped again, and its pages faulted in each time. A vote of 1,000,000 x 16 rows took 9 to
    11 s in a Dask worker against 5.4 s in a plain process, and 11 to 13 s in a plain process
    given the same variable. The thresholds glibc would have grown to on its own (32 MiB, and
    twice that for trimming) restore the plain process's time; freed memory above them still
    goes back to the system."""
    global _malloc_tuned
    if _malloc_tuned:
        return
    _malloc_tuned = True
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)
        libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD_BYTES)
    except (OSError, AttributeError):  # not glibc: its own allocator's defaults stand
        pass


def _partition_total(
    index: int, partition: Partition, run: RunRows, statistic: Statistic
) -> tuple[np.ndarray, ...]:
    """On a worker: one partition's exact statistic."""
    _tune_malloc()
    if run.cache_bytes > 0 or run.spill:
        CACHE.start_reaper()
    return statistic(CACHE.get(run, index, partition))


def _partition_rows(partition: Partition, reading: Reading, per_row: PerRow) -> np.ndarray:
    """On a worker: one partition's per-row values (never cached: one pass)."""
    _tune_malloc()
    return per_row(Part(reading.prepare(partition.read())))


def _on(worker: str | None) -> dict[str, Any]:
    """Where a partition's task should run: on `worker` if it is still there, else anywhere
    (the client's view of the workers may be empty for a moment, e.g. while one restarts)."""
    return {} if worker is None else {"workers": [worker], "allow_other_workers": True}


def _same(value: Any) -> Any:
    return value


def _done(futures: Sequence[Any]) -> None:
    """The plain wait: `gather` itself waits for every task."""


def _cached_runs() -> list[str]:
    return sorted(CACHE.runs())


def _drop_runs(runs: Sequence[str]) -> int:
    return sum(CACHE.drop(run) for run in runs)


def cached_runs(client: Any) -> dict[str, list[str]]:
    """Per worker address: the runs whose prepared partitions it holds (a run's name is its
    engine's `owner`, a dot, and a random part)."""
    return dict(client.run(_cached_runs))


def drop_runs(client: Any, runs: Sequence[str]) -> None:
    """Drop these runs' prepared partitions on every worker."""
    if runs:
        client.run(_drop_runs, list(runs))


class DaskRows(Rows):
    """A run's rows on the cluster: each pass a map over the partitions, summed here."""

    def __init__(
        self,
        client: Any,
        partitions: Sequence[Partition],
        reading: Reading,
        n_cols: int,
        engine: DaskEngine,
        cache_bytes: int,
        spill: bool,
    ) -> None:
        self.client = client
        self.partitions = list(partitions)
        self.shape = (sum(int(p.n_rows) for p in self.partitions), int(n_cols))
        self.wait = engine.wait
        # No cache at all (0, no spill): every pass reads every partition from storage again.
        # The run is named after its owner, so that the owner's next run can tell a dead one.
        name = f"{engine.owner}.{uuid.uuid4().hex}"
        self.run = RunRows(name, reading, cache_bytes, spill, engine.lease_seconds)

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
                **_on(worker),
            )
            for i, (partition, worker) in enumerate(
                zip(self.partitions, self._placement(), strict=True)
            )
        ]
        total = None
        try:
            self.wait(futures)
            for result in self.client.gather(futures):
                total = add_totals(total, result)
        finally:
            self.client.cancel([*futures, shared, run])
        assert total is not None  # a table has at least one partition
        return total

    def close(self) -> None:
        """Drop the run's cached partitions on every worker."""
        if self.run.cache_bytes > 0 or self.run.spill:
            drop_runs(self.client, [self.run.run])


class DaskEngine:
    """The engine of a Dask cluster (a `distributed.Client`); see the module docstring."""

    def __init__(
        self,
        client: Any,
        *,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        spill: bool | None = None,
        owner: str = "",
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        wait: Wait | None = None,
    ) -> None:
        self.client = client
        self.cache_bytes = int(cache_bytes)
        # Partitions beyond the cache go to the worker's disk (default: when there is a cache).
        self.spill = self.cache_bytes > 0 if spill is None else spill
        self.owner = owner
        self.lease_seconds = float(lease_seconds)
        self.wait: Wait = wait or _done
        self.opened: list[DaskRows] = []

    def working(self, partitions: Sequence[Partition], reading: Reading, n_cols: int) -> Rows:
        cache = self.cache_bytes
        rows = DaskRows(self.client, partitions, reading, n_cols, self, cache, self.spill)
        self.opened.append(rows)
        return rows

    def streamed(self, partitions: Sequence[Partition], reading: Reading, n_cols: int) -> Rows:
        rows = DaskRows(self.client, partitions, reading, n_cols, self, 0, False)
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
            self.wait(pending[:1])
            yield pending.pop(0).result()

    def close(self) -> None:
        """Drop every cached partition of the runs this engine served."""
        for rows in self.opened:
            rows.close()
        self.opened.clear()
