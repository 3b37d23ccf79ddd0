"""What the Dask scheduler says about its workers, and how a job waits on its passes: it gives
up on a cluster that cannot run its tasks, and on a job asked to stop.

A pass whose tasks cannot run (no worker connected, every worker paused because its memory is
full, the scheduler gone) would otherwise wait for ever: Dask keeps such tasks `no-worker` or
`queued` until a worker comes. The job ends instead once the scheduler's own view has shown
no running worker, no task executing and no task of the pass finished for `stall_seconds`
(PRIVCLUST_DASK_STALL_SECONDS). A slow pass is never a stall: a running worker, or a task
executing on a paused one, counts as progress however long it takes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# How long a wait on the scheduler's answer about its workers may take.
IDENTITY_TIMEOUT_SECONDS = 10.0


class ClusterStalled(RuntimeError):
    """The cluster could not run the job's tasks for the stall time; the message says why."""


class RunInterrupted(Exception):
    """The job was asked to stop (cancelled, or swept) while it waited on the cluster."""


@dataclass(frozen=True)
class WorkerView:
    """The scheduler's view of its workers: how many in each status (running, paused, ...),
    tasks executing now, and the smallest worker's memory limit and threads."""

    statuses: Mapping[str, int]
    executing: int
    memory_limit: int | None
    threads: int

    @property
    def running(self) -> int:
        return self.statuses.get("running", 0)

    def why_blocked(self) -> str | None:
        """Why no task can start now (None when a worker runs, or a task executes)."""
        total = sum(self.statuses.values())
        if total == 0:
            return "has no worker connected to its scheduler"
        if self.running or self.executing:
            return None
        if self.statuses.get("paused", 0) == total:
            return f"has every worker ({total}) paused because its memory is full"
        held = ", ".join(f"{n} {status}" for status, n in sorted(self.statuses.items()))
        return f"has no running worker ({held})"


def worker_view(identity: Mapping[str, Any]) -> WorkerView:
    """The view from the scheduler's `identity` (every worker's)."""
    workers = list((identity.get("workers") or {}).values())
    statuses: dict[str, int] = {}
    for w in workers:
        statuses[str(w.get("status"))] = statuses.get(str(w.get("status")), 0) + 1
    executing = sum(
        int(((w.get("metrics") or {}).get("task_counts") or {}).get("executing", 0))
        for w in workers
    )
    limits = [int(w["memory_limit"]) for w in workers if w.get("memory_limit")]
    threads = [int(w.get("nthreads") or 1) for w in workers]
    return WorkerView(statuses, executing, min(limits, default=None), max(threads, default=1))


def scheduler_view(client: Any, timeout: float = IDENTITY_TIMEOUT_SECONDS) -> WorkerView:
    """Ask the scheduler now (OSError or TimeoutError if it does not answer in `timeout`)."""
    if client.status not in ("running", "connecting"):
        raise OSError(f"the client of the Dask scheduler is {client.status}")
    identity = client.sync(client.scheduler.identity, n_workers=-1, callback_timeout=timeout)
    return worker_view(identity)


def _never() -> bool:
    return False


@dataclass
class ClusterWatch:
    """An engine's wait on a pass (privclust.distributed.Wait): returns once every task is
    done; RunInterrupted once `should_stop()` says so (checked every `poll_seconds`);
    ClusterStalled once the cluster could not run a task for `stall_seconds`."""

    client: Any
    stall_seconds: float
    should_stop: Callable[[], bool] = _never
    poll_seconds: float = 0.5
    clock: Callable[[], float] = field(default=time.monotonic)

    def __call__(self, futures: Sequence[Any]) -> None:
        pending = list(futures)
        # Set by the client's thread whenever a task ends (the engine's client need not be
        # this process's default one, which distributed.wait would use).
        ended = threading.Event()
        for future in pending:
            future.add_done_callback(lambda _: ended.set())
        since = self.clock()  # when the pass last made progress, or could have
        while True:
            if self.should_stop():
                raise RunInterrupted()
            ended.wait(self.poll_seconds)
            ended.clear()  # the futures themselves say which ended
            left = [f for f in pending if not f.done()]
            if not left:
                return
            reason = None if len(left) < len(pending) else self._blocked()
            pending = left
            if reason is None:
                since = self.clock()
            elif self.clock() - since >= self.stall_seconds:
                raise ClusterStalled(
                    f"the Dask cluster that runs jobs {reason}, and the job's tasks could not "
                    f"run for {self.stall_seconds:g} s"
                )

    def _blocked(self) -> str | None:
        try:
            return scheduler_view(self.client).why_blocked()
        except Exception as exc:  # any failure to answer is the scheduler's
            return f"does not answer ({type(exc).__name__})"
