"""The fair worker run in the test's own process: the queue's tasks taken in burst, its job
process never started, so that every task runs here."""

from __future__ import annotations

import signal

from redis import Redis

from app.kit.config import Settings


def run_tasks_here(settings: Settings, max_jobs: int | None = None) -> None:
    """Take the queue's tasks (at most `max_jobs`) as `privclust worker` would, and run them in
    this process; the signal handlers RQ's worker takes over are given back after it."""
    from worker.fair import FairWorker
    from worker.runner import JobRunner

    conn = Redis.from_url(settings.redis_url or "")
    runner = JobRunner(settings.resolved_database_url, job_timeout=60, max_rss_mb=4096)
    worker = FairWorker(settings, conn, runner)  # the runner is not started: tasks run here
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        worker.work(burst=True, max_jobs=max_jobs)
    finally:  # RQ's worker takes over Ctrl-C and SIGTERM in the process that runs it
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
