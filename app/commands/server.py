"""`privclust api`: run the HTTP API with uvicorn (PRIVCLUST_API_WORKERS processes)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from app.kit.processes import pid_alive

if TYPE_CHECKING:
    from fastapi import FastAPI

# How long uvicorn's supervisor waits for a worker process to answer (see `_run`).
WORKER_HEALTHCHECK_SECONDS = 60


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("api", help="run the HTTP API (PRIVCLUST_HOST:PRIVCLUST_PORT)")
    p.add_argument("--host", help="override PRIVCLUST_HOST")
    p.add_argument("--port", type=int, help="override PRIVCLUST_PORT")
    p.set_defaults(func=run)


def worker_app() -> FastAPI:
    """The app of one of several uvicorn worker processes, which must not outlive their parent."""
    import signal

    from app.kit.embedded_redis import exit_with_parent
    from app.main import create_app

    exit_with_parent(signal.SIGKILL)
    return create_app()


def _metrics_dir() -> str | None:
    """A fresh directory for prometheus-client's multiprocess mode, shared by this process's
    uvicorn workers (app.ops.metrics), or None when the operator set PROMETHEUS_MULTIPROC_DIR.

    Set before anything imports prometheus_client: it picks its storage at import time.
    """
    import os
    import shutil
    import tempfile
    from pathlib import Path

    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return None
    # Directories of `privclust api` processes that were killed (no chance to remove theirs).
    for old in Path(tempfile.gettempdir()).glob("privclust-metrics-*-*"):
        pid = old.name.split("-")[2]
        if pid.isdigit() and old.stat().st_uid == os.getuid() and not pid_alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    path = tempfile.mkdtemp(prefix=f"privclust-metrics-{os.getpid()}-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    return path


def run(args: argparse.Namespace) -> int:
    import shutil

    metrics_dir = _metrics_dir()
    try:
        return _run(args)
    finally:
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def _run(args: argparse.Namespace) -> int:
    import sys

    import uvicorn

    from app.kit.config import default_password_warning, get_settings
    from app.main import create_app

    settings = get_settings()
    if warning := default_password_warning(settings):
        print(warning, file=sys.stderr, flush=True)
    options: dict[str, Any] = {
        "host": args.host or settings.host,
        "port": args.port or settings.port,
        "log_level": "info",
        "access_log": settings.access_log,
        "proxy_headers": True,
        "timeout_graceful_shutdown": 5,
        # uvicorn kills a worker process that does not answer its supervisor's ping within this
        # many seconds, and a worker answers only once it has imported the app: 5 s (uvicorn's
        # default) is too short on a busy machine, where each replacement was killed in turn
        # and the API never started. A worker that really hangs is still replaced.
        "timeout_worker_healthcheck": WORKER_HEALTHCHECK_SECONDS,
    }
    if settings.api_workers > 1:
        # Processes sharing the listening socket; each builds its app from the environment.
        uvicorn.run(
            "app.commands.server:worker_app",
            factory=True,
            workers=settings.api_workers,
            **options,
        )
    else:
        uvicorn.run(create_app(settings), **options)
    return 0
