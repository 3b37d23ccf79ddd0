"""What the scheduler's view of its workers says about a cluster that cannot run a task, and a
worker's lease on a run's cached rows (a clock the test controls)."""

from __future__ import annotations

import numpy as np

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


def test_the_cache_fits_beside_the_tasks_in_the_smallest_workers_memory() -> None:
    from app.kit.cluster import WORKER_BASE_BYTES, cache_that_fits

    mib, gib = 1 << 20, 1 << 30
    budget = int(0.6 * 2 * gib) - WORKER_BASE_BYTES  # 2 GiB workers, Dask's spill target
    one_thread = worker_view(_identity("running", "running", threads=1))
    # 1,000,000 x 16 float64 partitions (122 MiB): a task holds 7 copies.
    partition = 1_000_000 * 16 * 8
    assert cache_that_fits(one_thread, partition, 512 * mib) == budget - 7 * partition
    assert 100 * mib < budget - 7 * partition < 128 * mib
    # Two threads: two tasks' copies, and no room left for a cache (the rows go to disk).
    two_threads = worker_view(_identity("running", "running", threads=2))
    assert cache_that_fits(two_threads, partition, 512 * mib) == 0
    # Small partitions: never more than asked for.
    assert cache_that_fits(one_thread, mib, 100 * mib) == 100 * mib
    assert cache_that_fits(one_thread, mib, 4 * gib) == budget - 7 * mib
    no_limit = worker_view({"workers": {"tcp://w": {"status": "running", "nthreads": 1}}})
    assert cache_that_fits(no_limit, partition, 512 * mib) == 512 * mib
