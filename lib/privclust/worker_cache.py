"""A Dask worker process's cache of the partitions it prepared for a run (privclust.distributed):
kept in memory within the run's `cache_bytes`, the rest spilled to the worker's local disk, and
dropped when the run ends or when no task has read it for its lease."""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from privclust.clustering.data.rows import Part, Partition, Reading

# A worker drops a run's cached partitions once no task has read them for this long.
DEFAULT_LEASE_SECONDS = 600.0
# How often a worker process looks for runs whose lease ran out.
REAP_EVERY_SECONDS = 30.0


@dataclass(frozen=True)
class RunRows:
    """What every task of a run reads: its partitions' preparation, the run's cache key, and
    how much of its prepared rows a worker keeps (`cache_bytes` in memory; the rest, with
    `spill`, on the worker's local disk)."""

    run: str
    reading: Reading
    cache_bytes: int
    spill: bool = True
    lease_seconds: float = DEFAULT_LEASE_SECONDS


class PartCache:
    """A worker process's prepared partitions, by (run, partition index).

    A run's passes read every partition in turn, so an LRU smaller than the run would miss
    every time: partitions are kept in memory while they fit under the run's `cache_bytes` and
    never evicted for newer ones; the others are written once to the worker's local directory
    as prepared .npy files and read back at later passes (read, not memory-mapped, so a
    process's resident memory stays at one partition). Both are dropped when the run ends
    (`drop`), or when no task has read the run for its lease (`reap`, every
    REAP_EVERY_SECONDS in a thread of the worker process); a worker that dies takes its memory
    with it and Dask removes its directory."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.lock = threading.Lock()
        self.parts: dict[tuple[str, int], Part] = {}
        self.spilled: dict[tuple[str, int], Path] = {}
        self.clock = clock
        # Per run: (when a task last read it, its lease in seconds).
        self.leases: dict[str, tuple[float, float]] = {}
        self.reaper: threading.Thread | None = None

    def get(self, run: RunRows, index: int, partition: Partition) -> Part:
        key = (run.run, index)
        with self.lock:
            self.leases[run.run] = (self.clock(), run.lease_seconds)
            part = self.parts.get(key)
            path = self.spilled.get(key)
        if part is not None:
            return part
        if path is not None and path.exists():
            return Part(np.load(path, allow_pickle=False))
        part = Part(run.reading.prepare(partition.read()))
        with self.lock:
            held = sum(p.points.nbytes for k, p in self.parts.items() if k[0] == run.run)
            if held + part.points.nbytes <= run.cache_bytes:
                self.parts[key] = part
                return part
        if run.spill:
            self._spill(key, part.points)
        return part

    def _spill(self, key: tuple[str, int], points: np.ndarray) -> None:
        path = local_directory() / f"privclust-{key[0]}-{key[1]}.npy"
        partial = path.with_suffix(".part")
        with open(partial, "wb") as f:
            np.save(f, points, allow_pickle=False)
        os.replace(partial, path)
        with self.lock:
            self.spilled[key] = path

    def drop(self, run: str) -> int:
        with self.lock:
            self.leases.pop(run, None)
            keys = [key for key in self.parts if key[0] == run]
            for key in keys:
                del self.parts[key]
            files = [key for key in self.spilled if key[0] == run]
            for key in files:
                self.spilled.pop(key).unlink(missing_ok=True)
        return len(keys) + len(files)

    def runs(self) -> set[str]:
        """The runs this process holds partitions of (in memory or spilled)."""
        with self.lock:
            return {key[0] for key in self.parts} | {key[0] for key in self.spilled}

    def reap(self) -> list[str]:
        """Drop every run whose lease ran out; the runs dropped."""
        now = self.clock()
        with self.lock:
            expired = [run for run, (at, lease) in self.leases.items() if now - at > lease]
        for run in expired:
            self.drop(run)
        return expired

    def start_reaper(self) -> None:
        """Reap in a daemon thread of this process from now on (once per process)."""
        with self.lock:
            if self.reaper is not None:
                return
            self.reaper = threading.Thread(target=self._reap_forever, daemon=True)
        self.reaper.start()

    def _reap_forever(self) -> None:
        while True:
            time.sleep(REAP_EVERY_SECONDS)
            self.reap()


def local_directory() -> Path:
    """The Dask worker's own scratch directory (this process's temporary one elsewhere)."""
    try:
        from dask.distributed import get_worker

        return Path(get_worker().local_directory)
    except (ImportError, ValueError):
        return Path(tempfile.gettempdir())


CACHE = PartCache()
