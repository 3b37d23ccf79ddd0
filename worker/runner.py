"""The worker's job process: one long-lived child that runs the worker's jobs, one at a time.

Why not RQ's work horse, forked per job: for a small job the fork cost more than the job. On
200 rows with k = 1, a job's 150 ms went to the fork and the child's first touches of the
parent's memory, a new database engine and its first connections, and the library's first
call in a fresh process; the clustering itself, warm, takes 2 ms (bench/RESULTS.md, "Small
jobs"). This child is started once (spawned, not forked: it inherits no thread, lock or socket
of the worker), imports the library, compiles its kernels and keeps its database connections
pooled, then takes job ids over a pipe.

A crash stays isolated to its job: the job still runs in a process of its own. If that process
dies (a segfault, the OOM killer), overruns the job timeout, or is stopped with the worker, only
its current job is affected: the worker ends that job (refunded if it had not started, else
failed and charged, `JobRun.lost`) and starts a fresh process for the next one. A process that
a job left holding more than PRIVCLUST_WORKER_MAX_RSS_MB of memory is replaced after the job.
The child dies with the worker (PR_SET_PDEATHSIG), as the work horse did.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from rq.timeouts import JobTimeoutException

from app.jobs import service as jobs_service

log = logging.getLogger("privclust.worker")

START_TIMEOUT = 300.0  # seconds for a new job process to import and compile everything
POLL_SECONDS = 1.0  # how often the worker looks at a running job's process


class JobProcessError(RuntimeError):
    """The job process could not run a job (it reported an error, or could not start)."""


def _die_with_parent() -> None:
    """If the worker is killed, its job process must not run on (PR_SET_PDEATHSIG)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, signal.SIGKILL)
        except OSError:  # pragma: no cover - non-glibc systems
            pass


def _resident_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError):  # pragma: no cover - not Linux
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _child_main(conn: Connection, parent_pid: int) -> None:
    """The job process: get ready, then run each job id received until the pipe closes."""
    _die_with_parent()
    if os.getppid() != parent_pid:  # the worker died before the line above took effect
        os._exit(0)
    # Ctrl-C in a terminal reaches the whole process group: the worker decides what stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    from privclust.clustering.evolution.kernels import warm_up
    from worker import execute

    warm_up()
    conn.send(("ready", os.getpid()))
    while True:
        try:
            job_id = conn.recv()
        except EOFError:  # the worker closed the pipe: it is stopping
            os._exit(0)
        try:
            reply: tuple[str, Any] = ("done", execute.run_job_here(job_id))
        except Exception as exc:
            log.exception("job %s: the job process could not run it", job_id)
            reply = ("error", f"{type(exc).__name__}: {exc}")
        conn.send((*reply, _resident_mb()))


@dataclass
class _Child:
    process: multiprocessing.process.BaseProcess
    conn: Connection


class JobRunner:
    """The worker's side: starts the job process, hands it jobs, and replaces it when it dies
    or grows. One job at a time (an RQ worker runs one job at a time)."""

    def __init__(self, db_url: str, job_timeout: float, max_rss_mb: float) -> None:
        self.db_url = db_url
        self.job_timeout = job_timeout
        self.max_rss_mb = max_rss_mb
        self.child: _Child | None = None
        # Called every POLL_SECONDS while a job runs (the RQ worker's own heartbeats).
        self.keepalive: Callable[[], None] | None = None

    def start(self) -> None:
        """Start the job process and wait until it is ready (imports, kernels compiled)."""
        context = multiprocessing.get_context("spawn")
        ours, theirs = context.Pipe()
        process = context.Process(
            target=_child_main, args=(theirs, os.getpid()), name="privclust-job", daemon=True
        )
        process.start()
        theirs.close()
        if not ours.poll(START_TIMEOUT):
            process.kill()
            raise JobProcessError("the job process did not start in time")
        try:
            _, pid = ours.recv()
        except EOFError as exc:
            raise JobProcessError(f"the job process exited at start ({process.exitcode})") from exc
        log.info("job process %s ready", pid)
        self.child = _Child(process, ours)

    def stop(self) -> None:
        """Close the pipe (the process exits) and wait for it; kill it if it lingers."""
        child, self.child = self.child, None
        if child is None:
            return
        child.conn.close()
        child.process.join(5)
        if child.process.is_alive():
            child.process.kill()
            child.process.join()

    def _kill(self) -> None:
        child, self.child = self.child, None
        if child is not None:
            child.process.kill()
            child.process.join()
            child.conn.close()

    def run(self, job_id: str) -> str:
        """Run the job in the job process; its final status (as the task returns it)."""
        if self.child is None or not self.child.process.is_alive():
            self.stop()
            self.start()
        assert self.child is not None
        child = self.child
        deadline = time.monotonic() + self.job_timeout
        try:
            child.conn.send(job_id)
            reply = self._wait(child, deadline)
        except BaseException as exc:
            # RQ's own timeout, or the worker stopping cold: the job cannot finish.
            self._kill()
            self._lose(job_id, timed_out=isinstance(exc, JobTimeoutException))
            raise
        if reply is None:
            return self._lose(job_id, timed_out=time.monotonic() >= deadline)
        kind, value, rss = reply
        if rss > self.max_rss_mb:
            log.info("job %s left its process at %.0f MiB: starting a fresh one", job_id, rss)
            self.stop()
        if kind == "error":
            raise JobProcessError(f"job {job_id}: {value}")
        return str(value)

    def _wait(self, child: _Child, deadline: float) -> tuple[str, Any, float] | None:
        """The process's reply, or None when it died or the job ran out of time (killed)."""
        while True:
            if child.conn.poll(POLL_SECONDS):
                try:
                    return child.conn.recv()
                except EOFError:
                    break
            if not child.process.is_alive():
                break
            if time.monotonic() >= deadline:
                break
            if self.keepalive is not None:
                self.keepalive()
        self._kill()
        return None

    def _lose(self, job_id: str, timed_out: bool) -> str:
        """End a job whose process died or was stopped (see `JobRun.lost`)."""
        why = "ran out of time" if timed_out else "died"
        log.warning("job %s: its process %s; the job ends failed", job_id, why)
        run = jobs_service.JobRun(self.db_url, uuid.UUID(job_id))
        if timed_out:
            return run.lost(jobs_service.TIMED_OUT)
        return run.lost()


_current: JobRunner | None = None


def install(runner: JobRunner | None) -> None:
    """Make `runner` run this process's jobs (`privclust worker` installs one)."""
    global _current
    _current = runner


def current() -> JobRunner | None:
    return _current
