"""What the scheduler's view of its workers says about a cluster that cannot run a task, and a
worker's lease on a run's cached rows (a clock the test controls)."""

from __future__ import annotations

import numpy as np
import pytest

from app.kit.cluster_watch import worker_view
from privclust.clustering.data.rows import Reading
from privclust.worker_cache import PartCache, RunRows
from tests.support.dask import Block


def _identity(*statuses: str, executing: int = 0, threads: int = 2) -> dict:
    return {
        "workers": {
            f"tcp://w{i}": {
                "status": status,
                "memory_limit": 2 << 30,
                "nthreads": threads,
                "metrics": {"task_counts": {"executing": executing}},
            }
            for i, status in enumerate(statuses)
        }
    }


def test_a_cluster_without_workers_or_with_every_worker_paused_cannot_run_a_task() -> None:
    assert worker_view({"workers": {}}).why_blocked() == "has no worker connected to its scheduler"
    paused = worker_view(_identity("paused", "paused"))
    assert paused.running == 0 and paused.why_blocked() is not None
    assert "every worker (2) paused because its memory is full" in paused.why_blocked()
    closing = worker_view(_identity("paused", "closing_gracefully")).why_blocked()
    assert closing == "has no running worker (1 closing_gracefully, 1 paused)"


def test_a_running_worker_or_a_task_still_executing_is_not_a_stall() -> None:
    assert worker_view(_identity("paused", "running")).why_blocked() is None
    # A paused worker finishes the tasks it has started: the pass may still make progress.
    assert worker_view(_identity("paused", executing=1)).why_blocked() is None
    view = worker_view(_identity("running", "running"))
    assert (view.memory_limit, view.threads) == (2 << 30, 2)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_worker_drops_a_run_that_no_task_has_read_for_its_lease() -> None:
    clock = _Clock()
    cache = PartCache(clock)
    reading = Reading(radius=10.0, center=None)
    rows = np.arange(40, dtype=np.float64).reshape(20, 2)
    # Room for one partition of each run in memory: the other is spilled to disk.
    dead = RunRows("job-a.1", reading, cache_bytes=160, spill=True, lease_seconds=60)
    live = RunRows("job-b.1", reading, cache_bytes=160, spill=True, lease_seconds=60)
    for i in range(2):
        cache.get(dead, i, Block(rows[10 * i : 10 * i + 10]))
    spilled = list(cache.spilled.values())
    assert len(spilled) == 1 and spilled[0].exists()
    clock.now = 50.0
    cache.get(live, 0, Block(rows[:10]))
    clock.now = 100.0  # the dead run was last read 100 s ago, the live one 50 s ago
    assert cache.reap() == ["job-a.1"]
    assert cache.runs() == {"job-b.1"} and not spilled[0].exists()
    clock.now = 111.0
    assert cache.reap() == ["job-b.1"] and cache.runs() == set()


def _worker_memory(plan: object, view: object, n_cols: int, method: str | None) -> int:
    """What the plan lets a worker hold at most: the base, its threads' tasks, its cache."""
    from app.kit.cluster import ANY_METHOD, PASS_MEMORY, WORKER_BASE_BYTES

    memory = PASS_MEMORY.get(method or "", ANY_METHOD)
    tasks = view.threads * memory.task * plan.partition_rows * n_cols * 8  # type: ignore[attr-defined]
    return int(WORKER_BASE_BYTES + tasks + memory.cached * plan.cache_bytes)  # type: ignore[attr-defined]


def test_partitions_and_cache_are_planned_within_the_smallest_workers_spill_target() -> None:
    from app.kit.cluster import PASS_MEMORY, WORKER_BASE_BYTES, plan_for_workers

    mib, gib = 1 << 20, 1 << 30
    stored = 1 << 20  # rows of a stored partition (128 MiB of 16 float64 columns)
    for limit in (1 * gib, 2 * gib, 4 * gib, 16 * gib):
        for threads in (1, 2, 4):
            identity = _identity("running", "running", threads=threads)
            for worker in identity["workers"].values():
                worker["memory_limit"] = limit
            view = worker_view(identity)
            for method in [*PASS_MEMORY, None, "a-method-not-measured"]:
                plan = plan_for_workers(view, 16, stored, 4 * gib, method)
                assert plan.partition_rows is not None and 0 < plan.partition_rows <= stored
                assert plan.cache_bytes >= 0
                assert _worker_memory(plan, view, 16, method) <= 0.6 * limit, (limit, method)

    two = worker_view(_identity("running", "running", threads=1))  # 2 GiB, one thread
    budget = int(0.6 * 2 * gib) - WORKER_BASE_BYTES
    # hdpe-means (5 copies a task): its 1,048,576-row partitions split in two; the cache, kept
    # beside a projection as large as the rows, gets half the rest.
    hdpe = plan_for_workers(two, 16, stored, 4 * gib, "hdpe-means")
    assert hdpe.partition_rows == int(budget * 0.5 / (5 * 16 * 8))
    assert stored // 2 < hdpe.partition_rows < stored
    assert hdpe.cache_bytes == int((budget - 5 * 128 * hdpe.partition_rows) / 2)
    assert 240 * mib < hdpe.cache_bytes < 250 * mib
    # pe-lloyd (3 copies) keeps the stored partitions, and more cache.
    pe = plan_for_workers(two, 16, stored, 4 * gib, "pe-lloyd")
    assert pe.partition_rows == stored and 580 * mib < pe.cache_bytes < 590 * mib
    # The method unknown: the most any measured method needs.
    assert plan_for_workers(two, 16, stored, 4 * gib, None) == hdpe
    # Never more cache than asked for, never larger partitions than stored.
    assert plan_for_workers(two, 16, 1000, 100 * mib, "pe-lloyd").cache_bytes == 100 * mib
    assert plan_for_workers(two, 16, 1000, 0, "pe-lloyd").partition_rows == 1000
    # No limit reported: as stored, as asked.
    no_limit = worker_view({"workers": {"tcp://w": {"status": "running", "nthreads": 1}}})
    unplanned = plan_for_workers(no_limit, 16, stored, 512 * mib, "hdpe-means")
    assert unplanned.partition_rows is None and unplanned.cache_bytes == 512 * mib


class _Scheduler:
    """What a client's `scheduler` answers: the workers' identity."""

    def __init__(self, identity: dict) -> None:
        self.identity = lambda **_: identity


class _Client:
    """A Dask client as `scheduler_view` asks it."""

    status = "running"

    def __init__(self, identity: dict) -> None:
        self.scheduler = _Scheduler(identity)

    def sync(self, call: object, **keywords: object) -> object:
        keywords.pop("callback_timeout", None)
        return call(**keywords)  # type: ignore[operator]


def test_a_run_reads_the_stored_partitions_split_as_planned_and_releases_the_same(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pathlib import Path

    from app.datasets import storage
    from app.kit import cluster as planner
    from app.kit.cluster import fit_to_workers, plan_for_workers
    from privclust.clustering import cluster
    from privclust.clustering.data.rows import InProcess, PartitionedTable
    from privclust.distributed import DaskEngine
    from tests.support.data import blobs

    X = blobs(3000, 4, 3, seed=5)
    writer = storage.new_rows_writer(str(tmp_path), "c" * 32, partition_rows=1000)
    writer.start(4)
    writer.append(X.copy())
    writer.commit()
    stored = storage.row_partitions(writer.stored, 1000)
    # Workers whose limit leaves the tasks room for 400 rows of hdpe-means' partitions (a
    # small table: no floor on the pieces).
    monkeypatch.setattr(planner, "MIN_PARTITION_ROWS", 1)
    identity = _identity("running", "running", threads=1)
    limit = int(((256 << 20) + 2 * 400 * 5 * 4 * 8) / 0.6) + 1
    for worker in identity["workers"].values():
        worker["memory_limit"] = limit
    engine = DaskEngine(_Client(identity), cache_bytes=1 << 30)
    planned = fit_to_workers(engine, stored, 4, "hdpe-means")
    plan = plan_for_workers(worker_view(identity), 4, 1000, 1 << 30, "hdpe-means")
    assert plan.partition_rows == 400
    assert [p.n_rows for p in planned] == [333, 333, 334] * 3
    assert engine.cache_bytes == plan.cache_bytes < 1 << 30
    assert np.concatenate([p.read() for p in planned]).tobytes() == X.tobytes()
    # Elsewhere than on a cluster: as stored.
    assert fit_to_workers(InProcess(), stored, 4, "hdpe-means") == stored
    # The pieces are a partitioning like any other: the same release from the same generator.
    keywords = dict(algorithm="hdpe-means", epsilon=1.0, delta=1e-6, radius=1.5)
    here = cluster(PartitionedTable(stored, 4), 3, rng=np.random.default_rng(2), **keywords)
    there = cluster(PartitionedTable(planned, 4), 3, rng=np.random.default_rng(2), **keywords)
    assert np.array_equal(here.centers, there.centers) and Path(writer.stored).exists()
