"""Row passes on a real Dask cluster (LocalCluster, two worker processes): the same exact
statistics, and so the same released results from the same generator, bit for bit, as one
working copy in this process; no generator ever crosses to the cluster; a worker killed in the
middle of a run changes nothing."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from privclust.clustering import cluster, nearest_centre_blocks
from privclust.clustering.data.rows import PartitionedTable, Reading, WorkingCopy
from privclust.clustering.evolution.vote import VoteCounts
from privclust.distributed import DaskEngine, GeneratorInStatistic
from tests.support.dask import blocks, local_cluster
from tests.support.data import blobs

pytestmark = pytest.mark.slow

ALGORITHMS = ["pe-means", "hdpe-means", "fastlloyd", "lsh-coreset", "pe-lloyd", "auto"]


@pytest.fixture(scope="module")
def dask_client() -> Iterator[object]:
    with local_cluster() as (_, client):
        yield client


def _same(a: object, b: object) -> bool:
    fields = ("centers", "sizes", "loss", "loss_se", "n_public", "algorithm")
    return all(np.array_equal(np.asarray(getattr(a, f)), np.asarray(getattr(b, f))) for f in fields)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_method_releases_the_same_result_on_dask_as_in_process(
    dask_client: object, algorithm: str
) -> None:
    # 20 columns: above pe-lloyd's projection threshold, so its projected search runs too.
    X = blobs(3000, 20, 4, seed=1)
    engine = DaskEngine(dask_client)
    table = PartitionedTable(blocks(X, 900), 20, engine)
    keywords = dict(algorithm=algorithm, epsilon=2.0, delta=1e-6, radius=1.5, summaries=True)
    here = cluster(X, 4, rng=np.random.default_rng(7), n_public=2990, **keywords)
    there = cluster(table, 4, rng=np.random.default_rng(7), n_public=2990, **keywords)
    engine.close()
    assert _same(here, there)


def test_a_box_domain_and_the_runs_own_count_agree_too(dask_client: object) -> None:
    X = blobs(3000, 3, 3, seed=2) * 40.0 + 50.0
    engine = DaskEngine(dask_client)
    table = PartitionedTable(blocks(X, 1000), 3, engine)
    keywords = dict(epsilon=1.0, delta=1e-6, lower=[0, 0, 0], upper=[100, 100, 100])
    here = cluster(X, 3, rng=np.random.default_rng(3), **keywords)
    there = cluster(table, 3, rng=np.random.default_rng(3), **keywords)
    engine.close()
    assert _same(here, there)


def test_a_pass_on_dask_is_the_in_process_statistic_bit_for_bit(dask_client: object) -> None:
    X = blobs(5000, 8, 5, seed=3)
    reading = Reading(radius=1.5, center=None, dtype="float32")
    candidates = np.random.default_rng(0).uniform(-0.6, 0.6, (64, 8))
    (here,) = WorkingCopy(reading.prepare(X)).total(VoteCounts(candidates))
    engine = DaskEngine(dask_client)
    (there,) = (
        PartitionedTable(blocks(X, 777), 8, engine).rows(reading).total(VoteCounts(candidates))
    )
    engine.close()
    assert here.dtype == there.dtype == np.int64
    assert np.array_equal(here, there) and here.sum() == 5000


def test_the_labels_come_back_in_row_order(dask_client: object) -> None:
    X = blobs(2500, 4, 3, seed=4)
    centres = np.array([[0.3, 0.3, 0.3, 0.3], [-0.3, 0.0, 0.2, 0.1], [0.0, -0.4, 0.0, 0.0]])
    here = np.concatenate(list(nearest_centre_blocks(X, centres, radius=1.5)))
    table = PartitionedTable(blocks(X, 600), 4, DaskEngine(dask_client))
    there = np.concatenate(list(nearest_centre_blocks(table, centres, radius=1.5)))
    assert np.array_equal(here, there)


def test_a_statistic_holding_a_generator_is_refused(dask_client: object) -> None:
    class Noisy:
        def __init__(self) -> None:
            self.rng = np.random.default_rng()

        def __call__(self, part: object) -> tuple[np.ndarray, ...]:
            return (np.zeros(1, dtype=np.int64),)

    rows = PartitionedTable(blocks(blobs(100, 2, 2), 50), 2, DaskEngine(dask_client)).rows(
        Reading(radius=1.0, center=None)
    )
    with pytest.raises(GeneratorInStatistic):
        rows.total(Noisy())


def test_a_float_statistic_is_refused(dask_client: object) -> None:
    rows = PartitionedTable(blocks(blobs(100, 2, 2), 50), 2, DaskEngine(dask_client)).rows(
        Reading(radius=1.0, center=None)
    )
    with pytest.raises(TypeError, match="exact integers"):
        rows.total(lambda part: (part.points.sum(axis=0),))


def test_a_worker_killed_mid_run_changes_nothing() -> None:
    """Dask recomputes the partitions the dead worker held; the statistics, and so the run,
    are the same as in process (and the noise was drawn here, once)."""
    X = blobs(4000, 6, 3, seed=5)
    keywords = dict(algorithm="fastlloyd", epsilon=1.0, delta=1e-6, radius=1.5, n_public=4000)
    here = cluster(X, 3, rng=np.random.default_rng(9), **keywords)
    with local_cluster() as (lc, client):
        # No cache: every pass reads every partition again, slowly, so the run lasts seconds.
        engine = DaskEngine(client, cache_bytes=0)
        table = PartitionedTable(blocks(X, 500, delay=0.05), 6, engine)
        killed = threading.Event()

        def kill_one() -> None:
            time.sleep(1.0)
            nanny = next(iter(lc.workers.values()))  # type: ignore[attr-defined]
            os.kill(nanny.process.process.pid, signal.SIGKILL)  # the nanny starts another
            killed.set()

        killer = threading.Thread(target=kill_one)
        killer.start()
        start = time.monotonic()
        there = cluster(table, 3, rng=np.random.default_rng(9), **keywords)
        killer.join()
        assert killed.is_set() and time.monotonic() - start > 1.0  # killed while it ran
    assert _same(here, there)


def _spilled_files(client: object) -> int:
    def count(dask_worker: object) -> int:
        directory = Path(dask_worker.local_directory)  # type: ignore[attr-defined]
        return len(list(directory.glob("privclust-*.npy")))

    return sum(client.run(count).values())  # type: ignore[attr-defined]


def test_partitions_beyond_the_memory_cache_spill_to_disk_and_go_with_the_run(
    dask_client: object,
) -> None:
    X = blobs(3000, 5, 3, seed=6)
    keywords = dict(algorithm="pe-means", epsilon=1.0, delta=1e-6, radius=1.5, n_public=3000)
    here = cluster(X, 3, rng=np.random.default_rng(2), **keywords)
    # One byte of memory cache: every prepared partition is spilled and read back.
    engine = DaskEngine(dask_client, cache_bytes=1)
    there = cluster(
        PartitionedTable(blocks(X, 500), 5, engine), 3, rng=np.random.default_rng(2), **keywords
    )
    assert _spilled_files(dask_client) == 6
    engine.close()
    assert _spilled_files(dask_client) == 0
    assert _same(here, there)
