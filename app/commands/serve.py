"""`privclust serve`: everything in one command on embedded defaults.

Migrates the database (SQLite under the data dir unless PRIVCLUST_DATABASE_URL is set), starts
an embedded redis-server unless PRIVCLUST_REDIS_URL is set, then the API and one worker as child
processes. Ctrl-C or SIGTERM stops every child; children also die if this process is killed.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import IO

from app.config import Settings, get_settings


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("serve", help="run everything: migrate, Redis, API and a worker")
    p.add_argument("--workers", type=int, default=1, help="number of job workers (default 1)")
    p.set_defaults(func=run)


class AlreadyRunning(Exception):
    pass


def acquire_lock(run_dir: Path) -> IO[str]:
    """One `serve` per data dir: an exclusive flock held for the life of the process."""
    run_dir.mkdir(parents=True, exist_ok=True)
    fh = open(run_dir / "serve.lock", "a+")  # noqa: SIM115 - held open until exit
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        pid = fh.read().strip() or "unknown"
        fh.close()
        raise AlreadyRunning(pid) from None
    fh.seek(0)
    fh.truncate()
    fh.write(str(os.getpid()))
    fh.flush()
    return fh


def _spawn(command: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    from app.embedded_redis import die_with_parent

    # Own process group: Ctrl-C reaches only `serve`, which then stops children in order.
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli", command],
        env=env,
        preexec_fn=die_with_parent,
        process_group=0,
    )


def _wait_healthy(url: str, procs: list[subprocess.Popen[bytes]], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            return False
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                if resp.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


def _stop(procs: list[subprocess.Popen[bytes]], grace: float = 8.0) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def run(args: argparse.Namespace) -> int:
    settings = get_settings()
    data_dir = settings.resolved_data_dir
    run_dir = data_dir / "run"
    try:
        lock = acquire_lock(run_dir)
    except AlreadyRunning as exc:
        print(
            f"privclust is already running for data dir {data_dir} (pid {exc}). Stop it "
            "first, or set PRIVCLUST_DATA_DIR to another directory.",
            file=sys.stderr,
        )
        return 1

    stopping = False

    def _on_signal(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)

    from app.commands.migrate import migrate_and_bootstrap
    from app.embedded_redis import EmbeddedRedis
    from app.services.queue import redis_url_file

    token = migrate_and_bootstrap(settings)
    env = dict(os.environ)
    env["PRIVCLUST_DATA_DIR"] = str(data_dir)
    redis: EmbeddedRedis | None = None
    url_file = redis_url_file(settings)
    children: list[subprocess.Popen[bytes]] = []
    try:
        if not settings.redis_url:
            redis = EmbeddedRedis(data_dir / "redis")
            env["PRIVCLUST_REDIS_URL"] = redis.start()
            url_file.write_text(env["PRIVCLUST_REDIS_URL"])
        children.append(_spawn("api", env))
        children.extend(_spawn("worker", env) for _ in range(max(1, args.workers)))
        base = f"http://{settings.host}:{settings.port}"
        if not _wait_healthy(base + "/healthz", children, timeout=60) and not stopping:
            print("privclust: the API did not start; see the messages above", file=sys.stderr)
            return 1
        if not stopping:
            _banner(settings, base, token)
        while not stopping:
            for p in children:
                if p.poll() is not None:
                    print(
                        f"privclust: a child process exited (code {p.returncode}); stopping",
                        file=sys.stderr,
                    )
                    return 1
            time.sleep(0.3)
        return 0
    finally:
        print("privclust: stopping…", file=sys.stderr, flush=True)
        _stop(children)
        if redis is not None:
            redis.stop()
            url_file.unlink(missing_ok=True)
        lock.close()


def _banner(settings: Settings, base: str, token: str | None) -> None:
    token_file = settings.resolved_data_dir / "admin-token"
    if token:
        admin = f"admin token: {token}  (shown once; also saved in {token_file})"
    elif settings.admin_token:
        admin = "admin token: the value of PRIVCLUST_ADMIN_TOKEN"
    elif token_file.exists():
        admin = f"admin token: in {token_file}"
    else:
        admin = "admin token: generated on first start (see `privclust keys create`)"
    print(
        f"\nprivclust is running\n  API:  {base}\n  docs: {base}/docs\n  {admin}\n"
        "Press Ctrl-C to stop.\n",
        flush=True,
    )
