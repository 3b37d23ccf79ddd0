"""The engine that runs a job's passes over the rows: this process, or the operator's Dask
cluster (PRIVCLUST_DASK_SCHEDULER), whose client each process opens once and keeps.

Exact, non-private statistics cross the wire to and from the cluster: docs/self-hosting.md says
how to run it with TLS (the client takes Dask's own `DASK_DISTRIBUTED__COMM__TLS__*` settings).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from app.kit.cluster_watch import ClusterWatch, WorkerView, scheduler_view
from app.kit.config import Settings
from privclust.clustering.choices import Algorithm
from privclust.clustering.data.rows import Engine, InProcess, Partition

log = logging.getLogger("privclust.cluster")

_lock = threading.Lock()
_clients: dict[str, Any] = {}


# What a worker process holds besides the run's cache and tasks (Python, NumPy, Dask, Arrow).
WORKER_BASE_BYTES = 256 << 20
# The share of a worker's memory limit that the base, the tasks and the cache may use: Dask's
# own spill target (it pauses a worker at 0.8).
WORKER_MEMORY_SHARE = 0.6
# Of that (less the base), the share a worker's tasks may hold at once; the cache has the rest.
TASK_SHARE = 0.5
# The fewest rows a partition is split down to (a worker too small for it is logged).
MIN_PARTITION_ROWS = 1 << 14


@dataclass(frozen=True)
class PassMemory:
    """What a method's run holds on a worker, in copies of a partition's rows as stored
    (n_rows x d float64 values), from bench/pass_memory.py's measures (bench/RESULTS.md)."""

    # One task at once: its partition being read and prepared (a whole Parquet row group as
    # float64: 3.3 copies at the peak; as float32, 1.6), or the prepared partition, what its
    # passes derive from it and the largest pass's temporaries.
    task: float
    # A cached partition's memory per byte the cache counts (its prepared rows): 2 where the
    # passes keep a projection of the rows beside them.
    cached: float


PASS_MEMORY: dict[str, PassMemory] = {
    # 1 prepared + 1 projection + a pass of 2.32: 4.3, rounded up.
    Algorithm.HDPE_MEANS: PassMemory(task=5.0, cached=2.0),
    # float32 rows, passes of at most 0.99: 1.5, below what they were read with.
    Algorithm.PE_LLOYD: PassMemory(task=3.0, cached=1.0),
    Algorithm.PE_MEANS: PassMemory(task=3.0, cached=1.0),
    # float64 rows read (3.3), passes of 0.32.
    Algorithm.FASTLLOYD: PassMemory(task=3.5, cached=1.0),
    # float64 rows read (3.3), a pass of 1.22; the rows' hash codes kept beside them (0.06).
    Algorithm.LSH_CORESET: PassMemory(task=3.5, cached=1.1),
}
# A method not measured (or not known when the rows are planned): the largest of each.
ANY_METHOD = PassMemory(
    task=max(m.task for m in PASS_MEMORY.values()),
    cached=max(m.cached for m in PASS_MEMORY.values()),
)
# How long /readyz and a metrics scrape wait for the Dask scheduler's answer.
CLUSTER_PROBE_SECONDS = 2.0
# How often a job that waits for a running worker at its start asks the scheduler again.
_RUNNING_WORKER_POLL = 0.25


class ClusterUnreachable(RuntimeError):
    """The Dask scheduler did not answer in time."""

    # What the job's error says (analysts read it; the log has the details).
    reason = "could not be reached"


class ClusterCannotRun(ClusterUnreachable):
    """The scheduler answers, but no worker can run a task (none, or every one paused)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def dask_client(settings: Settings, timeout: float | None = None) -> Any:
    """This process's client of the configured scheduler, connected now if it is not (within
    `timeout`, default `dask_connect_seconds`, else ClusterUnreachable)."""
    address = settings.dask_scheduler
    assert address is not None
    timeout = settings.dask_connect_seconds if timeout is None else timeout
    with _lock:
        client = _clients.get(address)
        if client is not None and client.status == "running":
            return client
        if client is not None:
            _close_quietly(client)
        from dask.distributed import Client

        try:
            client = Client(
                address,
                timeout=timeout,
                set_as_default=False,
                name="privclust",
            )
        except (OSError, TimeoutError) as exc:
            raise ClusterUnreachable(
                f"the Dask scheduler at {address} did not answer within {timeout:g} s: {exc}"
            ) from exc
        _clients[address] = client
        return client


def cluster_view(settings: Settings, timeout: float) -> WorkerView:
    """The configured scheduler's view of its workers, asked now (ClusterUnreachable if it
    does not answer within `timeout`): what /readyz and the metrics report."""
    client = dask_client(settings, timeout)
    try:
        return scheduler_view(client, timeout)
    except Exception as exc:  # any failure to answer is the scheduler's
        raise ClusterUnreachable(f"the Dask scheduler did not answer: {exc!r}") from exc


# Of the owners of the runs cached on the cluster, those whose rows must be kept.
KeepRuns = Callable[[Collection[str]], set[str]]


def row_engine(
    settings: Settings,
    owner: str = "",
    should_stop: Callable[[], bool] | None = None,
    keep: KeepRuns | None = None,
) -> Engine:
    """The engine for a job's passes: the Dask cluster's when one is configured, else this
    process's. The cluster's is connected now and must have a running worker within
    `dask_connect_seconds` (else ClusterUnreachable: the job has not started, nothing is
    charged); the cached rows of ended runs are dropped first (`drop_dead_runs` with `keep`).
    Its runs are named after `owner` (the job), and its passes end early when `should_stop()`
    says so or the cluster stalls (app.kit.cluster_watch)."""
    if settings.dask_scheduler is None:
        return InProcess()
    from privclust.distributed import DaskEngine

    client = dask_client(settings)
    if keep is not None:
        try:
            drop_dead_runs(client, keep)
        except Exception:  # a worker that cannot answer now: its leases drop them later
            log.exception("could not drop the cached rows of ended runs")
    wait_for_running_worker(client, settings.dask_connect_seconds)
    watch = ClusterWatch(client, settings.dask_stall_seconds)
    if should_stop is not None:
        watch.should_stop = should_stop
    return DaskEngine(client, cache_bytes=settings.dask_cache_mb << 20, owner=owner, wait=watch)


def wait_for_running_worker(client: Any, seconds: float) -> WorkerView:
    """The scheduler's view once a worker runs; ClusterCannotRun if none did within `seconds`
    (ClusterUnreachable if the scheduler did not answer)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            view = scheduler_view(client, timeout=seconds)
        except Exception as exc:  # any failure to answer is the scheduler's
            raise ClusterUnreachable(f"the Dask scheduler did not answer: {exc!r}") from exc
        if view.running:
            return view
        if time.monotonic() >= deadline:
            reason = view.why_blocked() or "has no running worker"
            raise ClusterCannotRun(reason)
        time.sleep(_RUNNING_WORKER_POLL)


@dataclass(frozen=True)
class WorkerPlan:
    """How a run's rows fit each worker: partitions of at most `partition_rows` rows (None:
    as stored) and at most `cache_bytes` of prepared rows kept in a worker's memory."""

    partition_rows: int | None
    cache_bytes: int


def plan_for_workers(
    view: WorkerView,
    n_cols: int,
    stored_rows: int,
    wanted_cache: int,
    method: str | None = None,
) -> WorkerPlan:
    """The partitions and cache that fit the smallest worker's reported memory limit, by
    construction: the process's base, what its threads' tasks hold at once (each
    `PassMemory.task` copies of its partition) and the cache (`PassMemory.cached` per byte it
    counts) stay within WORKER_MEMORY_SHARE of the limit (Dask's spill target; it pauses a
    worker at 80%). The tasks may take TASK_SHARE of what the base leaves, which sets the
    largest partition (never larger than the `stored_rows` a stored partition holds); the cache
    has the rest, and never more than `wanted_cache`. No limit reported: as stored, as wanted."""
    if view.memory_limit is None:
        return WorkerPlan(None, wanted_cache)
    memory = PASS_MEMORY.get(method or "", ANY_METHOD)
    budget = int(view.memory_limit * WORKER_MEMORY_SHARE) - WORKER_BASE_BYTES
    row_bytes = 8 * n_cols
    per_task = view.threads * memory.task * row_bytes  # the tasks' bytes per partition row
    rows = int(max(0, budget) * TASK_SHARE / per_task)
    if rows < MIN_PARTITION_ROWS:
        log.warning(
            "a Dask worker's memory limit (%d MiB) leaves no room for partitions of %d rows",
            view.memory_limit >> 20,
            MIN_PARTITION_ROWS,
        )
        rows = MIN_PARTITION_ROWS
    rows = min(rows, stored_rows)
    cache = int((budget - per_task * rows) / memory.cached)
    return WorkerPlan(rows, max(0, min(wanted_cache, cache)))


def fit_to_workers(
    engine: Engine, partitions: Sequence[Partition], n_cols: int, method: str | None = None
) -> list[Partition]:
    """The partitions a run on `engine` reads: on a Dask cluster, each stored partition split
    into pieces that fit the workers' memory limits beside the engine's cache, which is cut to
    fit too (`plan_for_workers`, from the scheduler's view of the workers now); elsewhere, as
    stored. Splitting changes no statistic: a pass is a sum over the rows' partitions,
    whatever they are."""
    from privclust.distributed import DaskEngine

    if not isinstance(engine, DaskEngine):
        return list(partitions)
    try:
        view = scheduler_view(engine.client)
    except Exception:  # the stall watch will say what is wrong with the scheduler
        return list(partitions)
    largest = max(int(p.n_rows) for p in partitions)
    plan = plan_for_workers(view, n_cols, largest, engine.cache_bytes, method)
    if plan.cache_bytes < engine.cache_bytes:
        log.info(
            "cache of %d MiB per worker (its memory limit allows no more)", plan.cache_bytes >> 20
        )
        engine.cache_bytes = plan.cache_bytes
    if plan.partition_rows is None or plan.partition_rows >= largest:
        return list(partitions)
    log.info("partitions split into pieces of at most %d rows", plan.partition_rows)
    return [piece for p in partitions for piece in _split(p, plan.partition_rows)]


def _split(partition: Partition, most_rows: int) -> Sequence[Partition]:
    split = getattr(partition, "split", None)
    return [partition] if split is None else split(most_rows)


def drop_dead_runs(client: Any, keep: KeepRuns) -> list[str]:
    """Drop, on every worker, the cached rows of runs whose owner `keep` does not keep (a job
    that has ended: its process was killed, or its cluster went away before it could drop
    them). The runs dropped."""
    from privclust.distributed import cached_runs, drop_runs

    held = {run for runs in cached_runs(client).values() for run in runs}
    kept = keep({run.rpartition(".")[0] for run in held})
    dead = sorted(run for run in held if run.rpartition(".")[0] not in kept)
    if dead:
        log.info("dropping the cached rows of %d ended runs on the cluster", len(dead))
        drop_runs(client, dead)
    return dead


def close_engine(engine: Engine) -> None:
    """Drop what the engine kept for its runs (a cluster's cached partitions); a cluster that is
    gone by now has nothing to drop."""
    close = getattr(engine, "close", None)
    if close is None:
        return
    with contextlib.suppress(Exception):  # the job's outcome is already decided
        close()


def _close_quietly(client: Any) -> None:
    with contextlib.suppress(Exception):  # replacing a broken client
        client.close(timeout=2)
