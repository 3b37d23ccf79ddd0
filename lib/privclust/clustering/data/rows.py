"""A run's rows as every method reads them: passes that return exact statistics.

The methods never index the rows. Each pass over them is a `Statistic`: a function of one
partition of the prepared rows (read from storage, clipped into the domain and centred, as
`Reading` says) that returns exact integers (vote counts, grid sums, counts per tree node), and
the pass is their sum over the partitions (`Rows.total`). Every row's contribution is a function
of that row and public values alone (the vote, the labels and the projections are built so:
privclust.clustering.evolution.vote),
and integer sums do not depend on the order they are added in, so a
run over any partitioning of the rows, in this process or on a cluster
(privclust.distributed), gets the same statistics, bit for bit, as one pass over the whole
working copy.

No statistic draws noise. The caller adds noise to the total, once, in its own process; an
engine that computes a partition again (Dask reruns a lost task) only computes the same exact
statistic again.

- `Table`: a dataset's rows before a run reads them: an array (`ArrayTable`) or stored
  partitions read by an `Engine` (`PartitionedTable`).
- `Rows`: what a run reads them as: `WorkingCopy` (one prepared copy in this process, as every
  run read them before partitions existed), or an engine's partitions.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from privclust.clustering.data.domain import prepare_rows
from privclust.clustering.errors import data_shape

if TYPE_CHECKING:
    from privclust.clustering.data.scaling import Box

# Rows per block when an array is streamed (a summary's or the labels' one pass): bounds their
# working memory.
STREAM_BLOCK_ROWS = 1 << 16

Statistic = Callable[["Part"], tuple[np.ndarray, ...]]
"""A pass over one partition: exact integer arrays (their sum over partitions is the pass)."""

PerRow = Callable[["Part"], np.ndarray]
"""A value for every row of one partition (the owner's labels), in row order."""


@dataclass(frozen=True, eq=False)
class Reading:
    """How a run reads stored rows: clipped into the ball of `radius` around `center` (the
    origin when None) and centred on it, as `dtype` (privclust.clustering.data.domain.prepare_rows),
    through the `box` first when the domain is per-column bounds."""

    radius: float
    center: np.ndarray | None
    dtype: str = "float64"
    box: Box | None = None

    def prepare(self, block: Any) -> np.ndarray:
        points, _ = prepare_rows(
            block, self.radius, self.center, dtype=np.dtype(self.dtype).type, box=self.box
        )
        return points


class Part:
    """One prepared partition, and the arrays that passes derived from it (a projection, the
    rows' hash codes), kept while the partition lives so that later passes reuse them."""

    __slots__ = ("_derived", "points")

    def __init__(self, points: np.ndarray) -> None:
        self.points = points
        self._derived: dict[Hashable, Part] = {}

    def derived(self, key: Hashable, make: Callable[[np.ndarray], np.ndarray]) -> Part:
        """The partition of `make(points)`, made once per `key`."""
        part = self._derived.get(key)
        if part is None:
            part = self._derived[key] = Part(make(self.points))
        return part

    def forget(self, key: Hashable) -> None:
        self._derived.pop(key, None)


def token(*arrays: np.ndarray) -> str:
    """A key for what is derived from public arrays (a projection matrix, hyperplanes): the
    same arrays give the same key in every process."""
    digest = hashlib.blake2b(digest_size=16)
    for a in arrays:
        a = np.ascontiguousarray(a)
        digest.update(repr((a.dtype.str, a.shape)).encode())
        digest.update(a.data)
    return digest.hexdigest()


def add_totals(
    total: tuple[np.ndarray, ...] | None, part: tuple[np.ndarray, ...]
) -> tuple[np.ndarray, ...]:
    """The exact sum of two statistics; only integers are summed (a float sum would depend on
    the order of the partitions, and so on the engine)."""
    for a in part:
        if not np.issubdtype(np.asarray(a).dtype, np.integer):
            raise TypeError(f"a statistic must be exact integers, got {np.asarray(a).dtype}")
    if total is None:
        return tuple(np.array(a, dtype=np.int64) for a in part)
    if len(total) != len(part) or any(
        a.shape != np.shape(b) for a, b in zip(total, part, strict=True)
    ):
        raise ValueError("partitions returned statistics of different shapes")
    return tuple(a + np.asarray(b, dtype=np.int64) for a, b in zip(total, part, strict=True))


class Rows(ABC):
    """The prepared rows of a run, read only through passes."""

    shape: tuple[int, int]

    @abstractmethod
    def total(self, statistic: Statistic) -> tuple[np.ndarray, ...]:
        """`statistic` summed over every partition (int64)."""

    def forget(self, key: Hashable) -> None:  # noqa: B027 - only a working copy keeps anything
        """Drop what passes derived under `key` (a projection no later pass reads)."""

    def projected(
        self, matrix: np.ndarray, make: Callable[[np.ndarray], np.ndarray]
    ) -> DerivedRows:
        """These rows as `make(points)` (a projection by the public `matrix`), each partition
        derived where it is read."""
        return DerivedRows(self, token(matrix), make, (self.shape[0], int(matrix.shape[0])))


class WorkingCopy(Rows):
    """The whole prepared copy in this process: one partition."""

    def __init__(self, points: np.ndarray) -> None:
        self.part = Part(points)
        self.shape = (int(points.shape[0]), int(points.shape[1]))

    def total(self, statistic: Statistic) -> tuple[np.ndarray, ...]:
        return add_totals(None, statistic(self.part))

    def forget(self, key: Hashable) -> None:
        self.part.forget(key)


@dataclass(frozen=True, eq=False)
class OnDerived:
    """A statistic of the partition derived under `key` by `make`."""

    key: Hashable
    make: Callable[[np.ndarray], np.ndarray]
    statistic: Statistic

    def __call__(self, part: Part) -> tuple[np.ndarray, ...]:
        return self.statistic(part.derived(self.key, self.make))


class DerivedRows(Rows):
    """Rows derived from other rows partition by partition (`Rows.projected`)."""

    def __init__(
        self,
        base: Rows,
        key: Hashable,
        make: Callable[[np.ndarray], np.ndarray],
        shape: tuple[int, int],
    ) -> None:
        self.base, self.key, self.make, self.shape = base, key, make, shape

    def total(self, statistic: Statistic) -> tuple[np.ndarray, ...]:
        return self.base.total(OnDerived(self.key, self.make, statistic))

    def release(self) -> None:
        """Drop the derived partitions a working copy kept (no later pass reads them)."""
        self.base.forget(self.key)


# --------------------------------------------------------------------------------------------
# Tables: the rows before a run reads them


class Partition(Protocol):
    """A block of stored rows that any process can read (it may be pickled and sent to one)."""

    @property
    def n_rows(self) -> int: ...

    def read(self) -> np.ndarray: ...


class Engine(Protocol):
    """Who reads a table's partitions and sums the passes over them."""

    def working(self, partitions: Sequence[Partition], reading: Reading, n_cols: int) -> Rows:
        """The rows a run passes over many times."""
        ...

    def streamed(self, partitions: Sequence[Partition], reading: Reading, n_cols: int) -> Rows:
        """The rows read for one pass (a summary), no copy kept."""
        ...

    def each(
        self, partitions: Sequence[Partition], reading: Reading, per_row: PerRow
    ) -> Iterator[np.ndarray]:
        """`per_row` of every partition, in row order."""
        ...


class Table(ABC):
    """A dataset's rows before a run reads them."""

    shape: tuple[int, int]

    @abstractmethod
    def rows(self, reading: Reading) -> Rows:
        """The rows as a run passes over them many times."""

    @abstractmethod
    def streamed(self, reading: Reading) -> Rows:
        """The rows read once, block by block (what a summary reads)."""

    @abstractmethod
    def each(self, reading: Reading, per_row: PerRow) -> Iterator[np.ndarray]:
        """`per_row` of every block of prepared rows, in row order."""


class ArrayTable(Table):
    """An N x d array (a read-only memmap is fine): read into one working copy."""

    def __init__(self, X: Any) -> None:
        self.X = X
        self.shape = data_shape(X)

    def rows(self, reading: Reading) -> Rows:
        return WorkingCopy(reading.prepare(self.X))

    def streamed(self, reading: Reading) -> Rows:
        return _InProcessPasses(list(_slices(self.X)), reading, self.shape)

    def each(self, reading: Reading, per_row: PerRow) -> Iterator[np.ndarray]:
        return InProcess().each(list(_slices(self.X)), reading, per_row)


@dataclass(frozen=True)
class _Slice:
    """Rows start..start + n_rows of an array, as a partition."""

    X: Any
    start: int
    n_rows: int

    def read(self) -> np.ndarray:
        return self.X[self.start : self.start + self.n_rows]


def _slices(X: Any) -> Iterator[_Slice]:
    n, rows = data_shape(X)[0], STREAM_BLOCK_ROWS
    for start in range(0, n, rows):
        yield _Slice(X, start, min(rows, n - start))


class _InProcessPasses(Rows):
    """Partitions read and prepared in this process at every pass, one at a time."""

    def __init__(
        self, partitions: Sequence[Partition], reading: Reading, shape: tuple[int, int]
    ) -> None:
        self.partitions, self.reading, self.shape = partitions, reading, shape

    def total(self, statistic: Statistic) -> tuple[np.ndarray, ...]:
        total = None
        for partition in self.partitions:
            total = add_totals(total, statistic(Part(self.reading.prepare(partition.read()))))
        assert total is not None  # a table has at least one row
        return total


class InProcess:
    """The engine of one process: a run's rows are read once into a working copy, partition
    by partition; a summary's are read one partition at a time."""

    def working(self, partitions: Sequence[Partition], reading: Reading, n_cols: int) -> Rows:
        n_rows = sum(int(p.n_rows) for p in partitions)
        first = reading.prepare(partitions[0].read())
        out = np.empty((n_rows, n_cols), dtype=first.dtype)
        start = 0
        for i, partition in enumerate(partitions):
            block = first if i == 0 else reading.prepare(partition.read())
            out[start : start + len(block)] = block
            start += len(block)
            del block
        return WorkingCopy(out)

    def streamed(self, partitions: Sequence[Partition], reading: Reading, n_cols: int) -> Rows:
        n_rows = sum(int(p.n_rows) for p in partitions)
        return _InProcessPasses(partitions, reading, (n_rows, n_cols))

    def each(
        self, partitions: Sequence[Partition], reading: Reading, per_row: PerRow
    ) -> Iterator[np.ndarray]:
        for partition in partitions:
            yield per_row(Part(reading.prepare(partition.read())))


class PartitionedTable(Table):
    """Stored partitions of rows (in row order), read by `engine` (default: this process)."""

    def __init__(
        self, partitions: Sequence[Partition], n_cols: int, engine: Engine | None = None
    ) -> None:
        if not partitions:
            raise ValueError("a table has at least one partition")
        self.partitions = list(partitions)
        self.engine: Engine = InProcess() if engine is None else engine
        self.shape = (sum(int(p.n_rows) for p in self.partitions), int(n_cols))

    def rows(self, reading: Reading) -> Rows:
        return self.engine.working(self.partitions, reading, self.shape[1])

    def streamed(self, reading: Reading) -> Rows:
        return self.engine.streamed(self.partitions, reading, self.shape[1])

    def each(self, reading: Reading, per_row: PerRow) -> Iterator[np.ndarray]:
        return self.engine.each(self.partitions, reading, per_row)


def as_table(X: Any) -> Table:
    """X as a table: itself, or an array's."""
    return X if isinstance(X, Table) else ArrayTable(X)
