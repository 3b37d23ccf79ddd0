"""Jobs at scale from Parquet: in one process, and on a local Dask cluster of worker processes.

For each size N x 16 (k = 16, epsilon 1; `--algorithm`, default auto: pe-lloyd), the rows are
written once as Parquet partitions (one row group each) into a scratch folder, in the layout
object storage holds them (app.datasets.storage); then the same job runs
- in process: the partitions read into one working copy (the RQ worker without a cluster);
- on a LocalCluster of `--workers` worker processes (one thread each): every pass a map over
  the partitions, summed here.
The cluster's engine is the service's: its partitions and cache planned from the workers'
memory limits for the job's method (app.kit.cluster.fit_to_workers), and its waits given up
after 60 s with no worker able to run a task (app.kit.cluster_watch), so a run that outgrows the
workers ends instead of waiting for ever. It prints wall time, the peak RSS of this process and
of each Dask worker process, how often Dask paused a worker (its logs' "Pausing worker"), and
whether both runs released the same centres from the same seeded generator (they must: the
passes' statistics are exact). The cluster runs first, so this process's peak in its row is the
client's alone. Nothing here asserts on time; CSV ingest speed is bench/ingest_speed.py's.
With `--lake FOLDER` the Parquet parts are kept there (written if it holds none), so that
several runs read one lake; never commit it.

    .venv/bin/python bench/scale.py --rows 1e6 1e7 --workers 2
    .venv/bin/python bench/scale.py --rows 1e7 --algorithm hdpe-means --skip-in-process \
        --memory-limit 2GiB --lake /tmp/lake-1e7
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from app.datasets.storage.rows import RowPartition
from app.kit.cluster import fit_to_workers
from app.kit.cluster_watch import ClusterWatch
from privclust.clustering import cluster
from privclust.clustering.data.rows import PartitionedTable
from privclust.distributed import DaskEngine

D, K, PARTITION_ROWS = 16, 16, 1 << 20


def write_parquet(folder: Path, n: int) -> list[RowPartition]:
    """n x D rows as Parquet parts of PARTITION_ROWS rows: bench/speed.py's memory-mapped sets
    (make_blobs' K centres in [-10, 10]^D, random_state=1, unit spread), written a part at a
    time, so centred on the centres' mean and scaled by a bound from the centres (no pass over
    the rows) instead of by the rows' largest norm; a few rows beyond the unit ball are clipped
    by the job, as declared domains clip."""
    from sklearn.datasets import make_blobs

    _, _, centres = make_blobs(
        n_samples=K, n_features=D, centers=K, random_state=1, return_centers=True
    )
    shift = centres.mean(axis=0)
    scale = float(np.linalg.norm(centres - shift, axis=1).max()) + 6.0
    rng = np.random.default_rng(1)
    parts = []
    for i, start in enumerate(range(0, n, PARTITION_ROWS)):
        m = min(PARTITION_ROWS, n - start)
        rows = (centres[rng.integers(0, K, m)] + rng.normal(0.0, 1.0, (m, D)) - shift) / scale
        table = pa.table({f"c{j}": rows[:, j] for j in range(D)})
        path = folder / f"part-{i:05d}.parquet"
        pq.write_table(table, path, row_group_size=PARTITION_ROWS, compression="none")
        parts.append(RowPartition(str(path), m, D, start, 0))
    return parts


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker_peaks(client: object) -> list[float]:
    """Each Dask worker process's peak resident set, in MB."""
    return sorted(client.run(peak_rss_mb).values())  # type: ignore[attr-defined]


def pauses(client: object) -> int:
    """How often Dask paused a worker for its memory, from the workers' logs."""
    logs = client.get_worker_logs(n=10_000)  # type: ignore[attr-defined]
    return sum("Pausing worker" in line for lines in logs.values() for _, line in lines)


def existing_parts(folder: Path, n: int) -> list[RowPartition] | None:
    """The parts `write_parquet` left in `folder` for n rows, if it did."""
    paths = sorted(folder.glob("part-*.parquet"))
    starts = range(0, n, PARTITION_ROWS)
    if len(paths) != len(starts):
        return None
    return [
        RowPartition(str(path), min(PARTITION_ROWS, n - start), D, start, 0)
        for path, start in zip(paths, starts, strict=True)
    ]


def row(*cells: str) -> None:
    print("| " + " | ".join(cells) + " |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=float, nargs="+", default=[1e6])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--algorithm", default="auto", help="the job's algorithm (default auto)")
    parser.add_argument("--skip-in-process", action="store_true")
    parser.add_argument("--memory-limit", default="2GB", help="each Dask worker's limit")
    parser.add_argument("--scratch", default=None, help="folder for the Parquet files")
    parser.add_argument("--lake", default=None, help="folder that keeps the Parquet parts")
    args = parser.parse_args()
    from dask.distributed import Client, LocalCluster

    keywords = dict(algorithm=args.algorithm, epsilon=1.0, delta=1e-9, radius=1.0)
    row(
        "N x 16",
        "algorithm",
        "Parquet",
        "where",
        "wall s",
        "peak RSS MB",
        "workers' peak RSS MB",
        "pauses",
        "same",
    )
    row(*["---"] * 9)
    with tempfile.TemporaryDirectory(dir=args.scratch) as scratch:
        for n in (int(r) for r in args.rows):
            folder = Path(args.lake or scratch) / f"n{n}"
            folder.mkdir(parents=True, exist_ok=True)
            t = time.perf_counter()
            parts = existing_parts(folder, n)
            kept = parts is not None
            if parts is None:
                parts = write_parquet(folder, n)
            size = sum(p.stat().st_size for p in folder.iterdir()) / 1e9
            took = "kept" if kept else f"in {time.perf_counter() - t:.0f} s"
            wrote = f"{size:.1f} GB {took}"
            with (
                LocalCluster(
                    n_workers=args.workers,
                    threads_per_worker=1,
                    processes=True,
                    memory_limit=args.memory_limit,
                    dashboard_address=":0",
                ) as lc,
                Client(lc) as client,
            ):
                engine = DaskEngine(client, wait=ClusterWatch(client, stall_seconds=60))
                planned = fit_to_workers(engine, parts, D, args.algorithm)
                print(
                    f"{len(planned)} partitions of at most {max(p.n_rows for p in planned):,} "
                    f"rows; cache per worker: {engine.cache_bytes >> 20} MiB",
                    flush=True,
                )
                t = time.perf_counter()
                there = cluster(
                    PartitionedTable(planned, D, engine),
                    K,
                    rng=np.random.default_rng(1),
                    n_public=n,
                    **keywords,
                )
                wall = time.perf_counter() - t
                peaks = worker_peaks(client)
                paused = pauses(client)
                engine.close()
            peaks_text = ", ".join(f"{p:.0f}" for p in peaks)
            where = f"Dask, {args.workers} workers"
            ran = there.algorithm
            peak = f"{peak_rss_mb():.0f}"
            row(f"{n:,}", ran, wrote, where, f"{wall:.1f}", peak, peaks_text, str(paused), "-")
            here = None
            if not args.skip_in_process:
                t = time.perf_counter()
                here = cluster(
                    PartitionedTable(parts, D),
                    K,
                    rng=np.random.default_rng(1),
                    n_public=n,
                    **keywords,
                )
                wall = time.perf_counter() - t
                same = str(np.array_equal(here.centers, there.centers))
                peak = f"{peak_rss_mb():.0f}"
                row(f"{n:,}", ran, wrote, "in process", f"{wall:.1f}", peak, "-", "-", same)
            if args.lake is None:
                shutil.rmtree(folder)  # a generated data set: never kept


if __name__ == "__main__":
    main()
