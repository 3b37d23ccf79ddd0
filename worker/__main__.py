"""`python -m worker [--burst]`: one RQ worker that takes each tenant's queue in turn
(worker.fair) and runs its jobs in a long-lived job process (worker.runner). `privclust worker`
sets the thread limits and executes this module, so that the command line (app/commands) stays
above the worker and never imports it."""

from __future__ import annotations

import argparse
import logging

from app.kit import queue
from app.kit.config import get_settings
from worker import runner
from worker.fair import FairWorker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker")
    parser.add_argument("--burst", action="store_true", help="exit when the queue is empty")
    args = parser.parse_args(argv)
    settings = get_settings()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    # Jobs run in one long-lived job process (worker.runner), started here, ready before the
    # first job: the library imported, its kernels compiled, its database connections pooled.
    job_runner = runner.JobRunner(
        settings.resolved_database_url,
        job_timeout=settings.job_timeout_seconds,
        max_rss_mb=settings.worker_max_rss_mb,
    )
    job_runner.start()
    runner.install(job_runner)
    conn = queue.redis_connection(queue.resolve_redis_url(settings))
    try:
        w = FairWorker(settings, conn, job_runner)
        w.work(burst=args.burst, with_scheduler=False, logging_level="INFO")
    finally:
        runner.install(None)
        job_runner.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
