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
from typing import Any

from app.kit.cluster_watch import ClusterWatch, WorkerView, scheduler_view
from app.kit.config import Settings
from privclust.clustering.data.rows import Engine, InProcess, Partition

log = logging.getLogger("privclust.cluster")

_lock = threading.Lock()
_clients: dict[str, Any] = {}


# What a worker process holds besides the run's cache and tasks (Python, NumPy, Dask, Arrow).
WORKER_BASE_BYTES = 256 << 20
# A task holds about this many copies of its partition at once (read, prepared, temporaries):
# on 10,000,000 x 16 in 1,048,576-row partitions, hdpe-means' workers (one thread, 2 GiB) peaked
# at 1,749 MB with a 512 MiB cache (bench/RESULTS.md), about 7 partitions above the base.
TASK_COPIES = 7
# The share of a worker's memory limit that the base, the tasks and the cache may use: Dask's
# own spill target (its pause threshold is 0.8).
WORKER_MEMORY_SHARE = 0.6
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


def fit_cache(engine: Engine, partitions: Sequence[Partition], n_cols: int) -> None:
    """Keep no more of a run's prepared rows in a worker's memory than fits beside its tasks:
    within WORKER_MEMORY_SHARE of the smallest worker's memory limit, less the process's base
    and what its threads' tasks hold at once (TASK_COPIES of the largest partition each); the
    rest of the run's partitions go to the worker's disk."""
    from privclust.distributed import DaskEngine

    if not isinstance(engine, DaskEngine):
        return
    try:
        view = scheduler_view(engine.client)
    except Exception:  # the stall watch will say what is wrong with the scheduler
        return
    largest = max(int(p.n_rows) for p in partitions) * n_cols * 8
    fits = cache_that_fits(view, largest, engine.cache_bytes)
    if fits < engine.cache_bytes:
        log.info("cache of %d MiB per worker (its memory limit allows no more)", fits >> 20)
        engine.cache_bytes = fits


def cache_that_fits(view: WorkerView, largest_partition_bytes: int, wanted: int) -> int:
    """The bytes of prepared rows a worker may keep (see `fit_cache`); `wanted` when the
    workers have no memory limit."""
    if view.memory_limit is None:
        return wanted
    working = view.threads * TASK_COPIES * largest_partition_bytes
    fits = int(view.memory_limit * WORKER_MEMORY_SHARE) - WORKER_BASE_BYTES - working
    return max(0, min(wanted, fits))


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
