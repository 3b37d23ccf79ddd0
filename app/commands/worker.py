"""`privclust worker`: one RQ worker that runs clustering jobs, fair across tenants, in a job
process of its own (executed as `python -m worker`: worker/__main__.py); its health probe."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from app.kit.processes import pid_alive

if TYPE_CHECKING:
    from app.kit.config import Settings

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
    p.add_argument(
        "--check",
        action="store_true",
        help="health probe: exit 0 if a live worker of this host is registered in Redis",
    )
    p.set_defaults(func=run)


def check(settings: Settings) -> int:
    """Healthy while a worker process on this host (a container: its own hostname) is alive
    and registered in Redis. RQ lets a worker's registration expire when its heartbeats stop
    (worker_ttl + 60 s: 8 minutes by default), so a stuck worker turns unhealthy too."""
    import socket
    import sys

    from rq import Worker

    from app.kit import queue

    conn = queue.redis_connection(queue.resolve_redis_url(settings))
    host = socket.gethostname()
    for w in Worker.all(connection=conn):  # a tenant pool's worker reads no plain queue
        if w.hostname == host and w.pid is not None and pid_alive(w.pid):
            return 0
    print(f"no live worker of {host} is registered in Redis", file=sys.stderr)
    return 1


def run(args: argparse.Namespace) -> int:
    from app.kit.config import get_settings

    settings = get_settings()
    if args.check:
        return check(settings)
    # Thread limits must be in the environment before numpy (and its BLAS) is first imported:
    # the worker (worker/__main__.py) runs as a fresh interpreter in this process, so they are.
    if settings.worker_threads:
        for name in BLAS_ENV:
            os.environ[name] = str(settings.worker_threads)
    argv = [sys.executable, "-m", "worker", *(["--burst"] if args.burst else [])]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)
