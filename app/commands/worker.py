"""`privclust worker`: one RQ worker that runs clustering jobs (fork per job)."""

from __future__ import annotations

import argparse
import os

BLAS_ENV = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("worker", help="run one job worker")
    p.add_argument("--burst", action="store_true", help="exit when the queue is empty")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from app.kit.config import get_settings

    settings = get_settings()
    # Thread limits must be in the environment before numpy (and its BLAS) is first imported.
    if settings.worker_threads:
        for name in BLAS_ENV:
            os.environ[name] = str(settings.worker_threads)

    import logging

    from rq import Worker
    from rq.serializers import JSONSerializer

    import worker.tasks  # noqa: F401  (see below)
    from app.jobs import queue
    from privclust.clustering.kernels import warm_up

    # RQ forks a process per job: loading the job code and compiling the vote's kernels here,
    # once, lets every job start with both.
    warm_up()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    conn = queue.redis_connection(queue.resolve_redis_url(settings))
    w = Worker([queue.get_queue(settings, conn)], connection=conn, serializer=JSONSerializer)
    w.work(burst=args.burst, with_scheduler=False, logging_level="INFO")
    return 0
