"""A real Dask cluster for the tests: a LocalCluster of worker processes, and partitions that
carry their own rows (so a worker process can read them without the test's storage)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Block:
    """A partition holding its rows; `delay` seconds to read it (a slow store, for the tests
    that stop a worker in the middle of a pass)."""

    rows: np.ndarray
    delay: float = 0.0

    @property
    def n_rows(self) -> int:
        return len(self.rows)

    def read(self) -> np.ndarray:
        if self.delay:
            time.sleep(self.delay)
        return self.rows


def blocks(X: np.ndarray, rows: int, delay: float = 0.0) -> list[Block]:
    """X cut into partitions of `rows` rows (the last one shorter)."""
    return [Block(X[i : i + rows], delay) for i in range(0, len(X), rows)]


@contextmanager
def local_cluster(n_workers: int = 2, **options: object) -> Iterator[tuple[object, object]]:
    """(the LocalCluster, a Client of it): worker processes with one thread each, no dashboard;
    `options` go to LocalCluster (e.g. memory_limit=0: no memory monitor, so that a worker
    paused by `pause_workers` stays paused)."""
    from dask.distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=":0",
            host="127.0.0.1",
            **options,  # type: ignore[arg-type]
        ) as cluster,
        Client(cluster) as client,
    ):
        yield cluster, client


@contextmanager
def process_cluster(
    n_workers: int = 2, host: str = "127.0.0.1", env: dict[str, str] | None = None
) -> Iterator[tuple[object, str]]:
    """A scheduler and its workers as separate `dask` processes (what an operator runs), with
    `env` added to this process's environment: (the scheduler's Popen, its address)."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from dask.distributed import Client

    from tests.support.processes import free_port

    dask = str(Path(sys.executable).with_name("dask"))
    address = f"tcp://{host}:{free_port()}"
    port = address.rsplit(":", 1)[1]
    quiet = {
        "stdout": subprocess.DEVNULL,
        "stderr": subprocess.DEVNULL,
        "env": {**os.environ, **(env or {})},
    }
    scheduler = subprocess.Popen(
        [dask, "scheduler", "--host", host, "--port", port, "--dashboard-address", ":0"],
        start_new_session=True,
        **quiet,  # type: ignore[call-overload]
    )
    workers = subprocess.Popen(
        [
            *(dask, "worker", address, "--nworkers", str(n_workers), "--nthreads", "1"),
            *("--dashboard-address", ":0", "--host", host),
        ],
        start_new_session=True,
        **quiet,  # type: ignore[call-overload]
    )
    try:
        with Client(address, timeout=60) as client:
            client.wait_for_workers(n_workers, timeout=60)
        yield scheduler, address
    finally:
        for process in (workers, scheduler):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in (workers, scheduler):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def _set_status(dask_worker: object, status: str) -> None:
    from distributed.core import Status

    dask_worker.status = Status[status]  # type: ignore[attr-defined]


def pause_workers(client: object) -> None:
    """Pause every worker as Dask's memory monitor does when a worker's memory is full (it
    takes no new task, and tells the scheduler)."""
    client.run(_set_status, status="paused")  # type: ignore[attr-defined]
    _until_status(client, "paused")


def resume_workers(client: object) -> None:
    client.run(_set_status, status="running")  # type: ignore[attr-defined]
    _until_status(client, "running")


def _until_status(client: object, status: str) -> None:
    """Wait until the scheduler has every worker in `status` (it hears of it asynchronously)."""
    for _ in range(600):
        workers = client.scheduler_info(n_workers=-1)["workers"].values()  # type: ignore[attr-defined]
        if all(w["status"] == status for w in workers):
            return
        time.sleep(0.05)
    raise AssertionError(f"the workers never became {status}")
