"""The ledger and the queue at scale: budget reads against the length of a dataset's ledger,
small jobs per second on one worker, and one tenant's job behind another tenant's 5,000.

For each backend (SQLite; PostgreSQL when it and Redis answer on this machine), on a throwaway
database and Redis database:

1. Latency. `privclust api` and a dataset of 200 rows with a huge budget; the dataset's ledger
   is filled to each checkpoint (0 ... 100,000 jobs) through the service's own functions, in
   this process (`reserve_job`, the worker's start with its `commit`, its end with the audit
   entry: three entries a job, as a worker leaves them). At each checkpoint, through HTTP, one
   request at a time: GET the dataset, POST an estimate, POST a job (k = 1; left queued), and
   a ledger page and a page of the job list; medians.
2. `privclust ledger verify` on the whole database: it must agree.
3. Throughput: one `privclust worker --burst` runs the jobs submitted in step 1 and more up to
   `--tiny-jobs` (200 rows, k = 1); jobs a second from the jobs' own timestamps (first start to
   last finish) and over the worker's whole run.
4. Fairness: 5,000 of tenant A's jobs queued, one worker running them; tenant B submits one
   job; how long until it has succeeded, and how many of A's ran meanwhile.

Prints tables and the load average; never asserts on timings.

    .venv/bin/python bench/ledger.py                        # both backends, up to 100,000 jobs
    .venv/bin/python bench/ledger.py --backends sqlite --checkpoints 0 1000 --queued 500
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.api import auth, bearer_client, new_keys, uploaded  # noqa: E402
from tests.support.data import blobs, csv_bytes  # noqa: E402
from tests.support.machine import bench_redis_url, flushed_redis, throwaway_database  # noqa: E402
from tests.support.processes import (  # noqa: E402
    answers,
    free_port,
    log_tail,
    run_cli,
    start_cli,
    stop,
    wait_until,
)

REDIS_URL = bench_redis_url(11)
ADMIN = "pck_bench_ledger_admin_token"
MU = 0.001  # each job's cost; the cap (epsilon 10,000) leaves room for millions of them
BATCH = 500  # jobs a fill transaction


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f}"


# --- the service under test --------------------------------------------------------------------


@dataclass
class Backend:
    name: str
    env: dict[str, str]
    db_url: str


@contextlib.contextmanager
def backend(name: str, work: Path) -> Iterator[Backend | None]:
    """A fresh database (SQLite file, or a throwaway PostgreSQL database) and a flushed Redis
    database, or None when PostgreSQL or Redis is not reachable."""
    data = work / name
    data.mkdir(parents=True)
    with flushed_redis(REDIS_URL) as redis_url, contextlib.ExitStack() as stack:
        if redis_url is None:
            yield None
            return
        if name == "sqlite":
            db_url: str | None = f"sqlite:///{data / 'privclust.db'}"
        else:
            db_url = stack.enter_context(throwaway_database("privclust_bench_ledger"))
        if db_url is None:
            yield None
            return
        env = {k: v for k, v in os.environ.items() if not k.startswith("PRIVCLUST_")}
        env.update(
            PRIVCLUST_DATA_DIR=str(data),
            PRIVCLUST_DATABASE_URL=db_url,
            PRIVCLUST_REDIS_URL=redis_url,
            PRIVCLUST_ADMIN_TOKEN=ADMIN,
            PRIVCLUST_QUEUE_NAME="bench-ledger",
            PRIVCLUST_WORKER_THREADS="1",
            PRIVCLUST_ACCESS_LOG="false",
            PYTHONUNBUFFERED="1",
        )
        done = run_cli("migrate", env, timeout=300)
        assert done.returncode == 0, done.stderr
        yield Backend(name, env, db_url)


@contextlib.contextmanager
def running(command: str, env: dict[str, str], log: Path, **extra: str) -> Iterator[str]:
    """`privclust <command>` (the API: waits until /healthz answers; /readyz would wait for a
    worker, which this benchmark starts only later); yields its base URL."""
    port = free_port()
    full = {**env, "PRIVCLUST_PORT": str(port), "PRIVCLUST_HOST": "127.0.0.1", **extra}
    proc = start_cli(command, full, log)
    base = f"http://127.0.0.1:{port}"
    try:
        if command == "api":
            wait_until(answers(base + "/healthz"), proc=proc, log=log_tail(log), timeout=90)
        yield base
    finally:
        stop(proc, timeout=30)


def tenant(base: str, name: str) -> tuple[str, str, str]:
    """An owner's and an analyst's key of tenant `name`, and a dataset of 200 rows x 2."""
    with bearer_client(base, ADMIN) as admin:
        owner, analyst = new_keys(admin, tenant=name)
    with httpx.Client(base_url=base, timeout=60) as c:
        body = csv_bytes(blobs(200, 2, 2, seed=len(name)), ["x", "y"], digits=5)
        ds = uploaded(c, owner, body, name=name, epsilon="10000", delta="1e-6", radius="2")
    return owner, analyst, ds["id"]


# --- the ledger, filled through the service's functions ------------------------------------------


def _settings(env: dict[str, str]):  # type: ignore[no-untyped-def]
    """The service's settings for this backend, in this process."""
    from app.kit.config import Settings, get_settings

    os.environ.update({k: v for k, v in env.items() if k.startswith("PRIVCLUST_")})
    get_settings.cache_clear()
    settings: Settings = get_settings()
    return settings


def admit_many(env: dict[str, str], dataset_id: str, n: int, finish: bool) -> list[uuid.UUID]:
    """n jobs of MU on the dataset, admitted as the API admits them (`reserve_job` under the
    budget lock), BATCH a transaction; with `finish`, each is then started and finished as the
    worker does it (queued -> running with the `commit` entry, -> succeeded with its audit
    entry); without, they stay queued. Returns their ids."""
    from app.jobs import repository as jobs_repo
    from app.jobs import service as jobs_service
    from app.kit import repository as kit_repo
    from app.kit.db.session import session_factory
    from app.ledger import service as ledger
    from app.models import Dataset, JobStatus, LedgerKind

    sessions = session_factory(_settings(env).resolved_database_url)
    ids: list[uuid.UUID] = []
    with sessions() as s:
        dataset = s.get(Dataset, uuid.UUID(dataset_id))
        assert dataset is not None
        plan = jobs_service.plan_job(dataset, jobs_service.JobRequest(k=1, mu=MU))
    while len(ids) < n:
        with sessions() as s:
            ledger.begin_budget_transaction(s)
            dataset = s.get(Dataset, uuid.UUID(dataset_id))
            for _ in range(min(BATCH, n - len(ids))):
                job = jobs_service.reserve_job(s, dataset, plan, actor=None)
                ids.append(job.id)
                if not finish:
                    continue
                now = kit_repo.now()
                jobs_repo.transition_job(
                    s, job.id, from_status=JobStatus.QUEUED, status=JobStatus.RUNNING,
                    started_at=now, heartbeat_at=now,
                )  # fmt: skip
                ledger.commit(s, job)
                jobs_repo.transition_job(
                    s, job.id, from_status=JobStatus.RUNNING, status=JobStatus.SUCCEEDED,
                    finished_at=kit_repo.now(), centers=[[0.0, 0.0]],
                )  # fmt: skip
                ledger.record(s, job, LedgerKind.SUCCEEDED)
            s.commit()
            s.expunge_all()
    return ids


def analyze(env: dict[str, str]) -> None:
    """Fresh planner statistics after a bulk fill (what autovacuum does in time for a database
    that grows a job at a time), so that the measurement does not race it for the CPU."""
    from sqlalchemy import text

    from app.kit.db.session import get_engine

    with get_engine(_settings(env).resolved_database_url).begin() as conn:
        conn.execute(text("ANALYZE"))


def enqueue(env: dict[str, str], ids: list[uuid.UUID], tenant_name: str) -> None:
    from app.kit import queue

    settings = _settings(env)
    for job_id in ids:
        queue.enqueue_job(settings, job_id, tenant_name)


# --- measurements -------------------------------------------------------------------------------


def _median_ms(call: Callable[[], httpx.Response], n: int, ok: int) -> float:
    times = []
    for _ in range(n):
        started = time.perf_counter()
        r = call()
        times.append(time.perf_counter() - started)
        assert r.status_code == ok, r.text
    return statistics.median(times) * 1000


def latencies(base: str, analyst: str, dataset_id: str, n: int) -> dict[str, float]:
    body = {"k": 1, "mu": MU}
    with httpx.Client(base_url=base, headers=auth(analyst), timeout=60) as c:
        url = f"/v1/datasets/{dataset_id}"
        c.get(url)  # a warm connection
        return {
            "GET dataset": _median_ms(lambda: c.get(url), n, 200),
            "estimate": _median_ms(lambda: c.post(url + "/jobs/estimate", json=body), n, 200),
            "submit": _median_ms(lambda: c.post(url + "/jobs", json=body), max(n // 2, 1), 202),
            "ledger page": _median_ms(lambda: c.get(url + "/ledger?order=desc"), n // 2, 200),
            "job list page": _median_ms(
                lambda: c.get("/v1/jobs", params={"dataset_id": dataset_id}), n // 2, 200
            ),
        }


def job_times(env: dict[str, str], ids: list[uuid.UUID]) -> tuple[int, float]:
    """(succeeded, seconds from the first start to the last finish) among these jobs."""
    from sqlalchemy import func, select

    from app.kit.db.session import session_factory
    from app.models import Job, JobStatus

    with session_factory(_settings(env).resolved_database_url)() as s:
        row = s.execute(
            select(func.count(), func.min(Job.started_at), func.max(Job.finished_at)).where(
                Job.id.in_(ids), Job.status == JobStatus.SUCCEEDED
            )
        ).one()
    n, first, last = row
    return int(n), (last - first).total_seconds() if n else 0.0


def job_status(base: str, key: str, job_id: str) -> str:
    return str(
        httpx.get(f"{base}/v1/jobs/{job_id}", headers=auth(key), timeout=30).json()["status"]
    )


# --- the phases ---------------------------------------------------------------------------------


@dataclass
class Latencies:
    rows: list[tuple[int, dict[str, float], float, str]]
    dataset_id: str
    submitted: list[uuid.UUID]  # the jobs the measurements submitted, still queued


def run_latency(b: Backend, work: Path, checkpoints: list[int], n: int) -> Latencies:
    """Latencies at each checkpoint of the ledger's length."""
    result = Latencies([], "", [])
    with running("api", b.env, work / f"{b.name}-api.log") as base:
        _, analyst, result.dataset_id = tenant(base, "acme")
        filled = 0
        for target in checkpoints:
            started = time.monotonic()
            admit_many(b.env, result.dataset_id, target - filled, finish=True)
            analyze(b.env)
            fill_s, filled, before = time.monotonic() - started, target, load()
            medians = latencies(base, analyst, result.dataset_id, n)
            result.rows.append((target, medians, fill_s, before))
            shown = ", ".join(f"{k} {v:.1f} ms" for k, v in medians.items())
            print(f"  {target:>7} jobs: {shown} (fill {fill_s:.0f} s; {before})", flush=True)
        result.submitted = queued_jobs(base, analyst)
    return result


def queued_jobs(base: str, key: str) -> list[uuid.UUID]:
    """Every queued job the key's tenant has, a page at a time."""
    ids: list[uuid.UUID] = []
    params: dict[str, object] = {"status": "queued", "limit": 200}
    with httpx.Client(base_url=base, headers=auth(key), timeout=60) as c:
        while True:
            page = c.get("/v1/jobs", params=params).json()
            ids += [uuid.UUID(item["id"]) for item in page["items"]]
            if not page["next_cursor"]:
                return ids
            params["cursor"] = page["next_cursor"]


def run_verify(b: Backend) -> str:
    started = time.monotonic()
    done = run_cli(["ledger", "verify", "--quiet"], b.env, timeout=3600)
    took = time.monotonic() - started
    last = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
    return f"exit {done.returncode}: {last} ({took:.1f} s)"


def run_throughput(b: Backend, lat: Latencies, total: int) -> str:
    """One `privclust worker --burst` on the queued tiny jobs, topped up to `total`."""
    more = admit_many(b.env, lat.dataset_id, max(0, total - len(lat.submitted)), finish=False)
    enqueue(b.env, more, "acme")
    ids = lat.submitted + more
    before = load()
    started = time.monotonic()
    done = run_cli(["worker", "--burst"], b.env, timeout=3600)
    wall = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-2000:]
    n, span = job_times(b.env, ids)
    return (
        f"{n} of {len(ids)} tiny jobs: {n / span:.1f} jobs/s from the first start to the last "
        f"finish ({span:.1f} s); {n / wall:.1f} jobs/s over the worker's whole run ({wall:.1f} "
        f"s, its start included); {before}"
    )


def run_fairness(b: Backend, work: Path, queued: int) -> str:
    """Tenant `busy` has `queued` jobs waiting and one worker on them; `other` submits one."""
    with running("api", b.env, work / f"{b.name}-fair-api.log") as base:
        _, _, busy_dataset = tenant(base, "busy")
        ids = admit_many(b.env, busy_dataset, queued, finish=False)
        enqueue(b.env, ids, "busy")
        _, other_analyst, other_dataset = tenant(base, "other")
        before = load()
        with running("worker", b.env, work / f"{b.name}-fair-worker.log"):
            while job_times(b.env, ids)[0] < 10:  # the worker is busy with the burst
                time.sleep(0.2)
            ahead = queued - job_times(b.env, ids)[0]
            r = httpx.post(
                f"{base}/v1/datasets/{other_dataset}/jobs",
                headers=auth(other_analyst), json={"k": 1, "mu": MU}, timeout=60,
            )  # fmt: skip
            assert r.status_code == 202, r.text
            submitted = time.monotonic()
            while job_status(base, other_analyst, r.json()["id"]) != "succeeded":
                assert time.monotonic() - submitted < 600, "the other tenant's job never ran"
                time.sleep(0.05)
            waited = time.monotonic() - submitted
            busy_done, _ = job_times(b.env, ids)
    return (
        f"behind {ahead} queued jobs of another tenant, a job finished {waited:.2f} s after its "
        f"submission ({busy_done} of the other tenant's jobs had run by then); {before}"
    )


def print_table(name: str, rows: list[tuple[int, dict[str, float], float, str]]) -> None:
    names = list(rows[0][1])
    print(
        f"\n| jobs on the dataset ({name}) | " + " | ".join(f"{k} (median)" for k in names) + " |"
    )
    print("|---" * (len(names) + 1) + "|")
    empty = rows[0][1]
    for target, medians, _, _ in rows:
        cells = [
            f"{medians[k]:.1f} ms" + (f" ({medians[k] / empty[k]:.1f}x)" if target else "")
            for k in names
        ]
        print(f"| {target:,} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", nargs="+", default=["sqlite", "postgres"])
    parser.add_argument(
        "--checkpoints", nargs="+", type=int, default=[0, 1000, 10_000, 30_000, 100_000]
    )
    parser.add_argument("--requests", type=int, default=200, help="a median's requests")
    parser.add_argument("--tiny-jobs", type=int, default=1000)
    parser.add_argument("--queued", type=int, default=5000)
    args = parser.parse_args()
    stamp = time.strftime("%Y-%m-%d %H:%M")
    print(f"privclust ledger benchmark, {stamp}, {os.cpu_count()} cores, {load()}")
    with tempfile.TemporaryDirectory(prefix="bench-ledger-") as tmp:
        work = Path(tmp)
        for name in args.backends:
            with backend(name, work) as b:
                if b is None:
                    continue
                print(f"\n== {name}")
                lat = run_latency(b, work, sorted(args.checkpoints), args.requests)
                print_table(name, lat.rows)
                print(f"\nprivclust ledger verify: {run_verify(b)}")
                print(f"throughput, one worker: {run_throughput(b, lat, args.tiny_jobs)}")
                print(f"fairness, one worker: {run_fairness(b, work, args.queued)}")
                print(f"privclust ledger verify: {run_verify(b)}")
    print(f"\n{load()}")


if __name__ == "__main__":
    main()
