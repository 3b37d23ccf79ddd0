"""The /metrics figures read from the database and Redis at each scrape (`StateCollector`).

Jobs run in RQ worker processes, often in other containers, that share nothing with the API but
the database and Redis; reading both at scrape time needs no instrumentation in the workers and
cannot drift from the truth the API itself serves.

Counters here only go up because they count rows that are never updated or deleted: the
failure totals count the append-only ledger's `failed` entries (app.ops.repository), not the
jobs table, so they would hold even if jobs were ever removed. Gauges (jobs by status, datasets,
budgets) are snapshots and move both ways.
"""

from __future__ import annotations

import logging
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from rq import Worker
from sqlalchemy.orm import Session, sessionmaker

from app.jobs.service import LOST_WORKER
from app.jobs.sweeper import mismatched_ledgers
from app.kit import queue
from app.kit.cluster import CLUSTER_PROBE_SECONDS, cluster_view
from app.kit.config import Settings
from app.kit.db.base import utcnow
from app.models import JobStatus
from app.ops import repository as repo
from privclust.clustering import Algorithm

log = logging.getLogger("privclust.metrics")

JOB_STATUSES = tuple(str(status) for status in JobStatus)
# Every method a job can run ("auto" resolves to one of them), so each has a series from start.
ALGORITHMS = tuple(str(a) for a in Algorithm if a != Algorithm.AUTO)
# From 10 ms: small jobs finish in a tenth of a second, large ones take an hour.
JOB_DURATION_BOUNDS = (
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
    1800.0, 3600.0,
)  # fmt: skip
# A dataset is "low" once less than this share of its mu cap remains.
LOW_BUDGET_SHARE = 0.1


class StateCollector(Collector):
    """Job, dataset, budget, queue and worker metrics computed at each scrape."""

    def __init__(self, settings: Settings, sessions: sessionmaker[Session]) -> None:
        self.settings = settings
        self.sessions = sessions

    def collect(self) -> Iterator[Metric]:
        yield from _read_or_down(
            self._from_database,
            "privclust_database_up",
            "1 if the database answered this scrape's queries, else 0",
            "database",
        )
        yield from _read_or_down(
            self._from_redis, "privclust_queue_up", "1 if Redis answered, else 0", "queue"
        )
        if self.settings.dask_scheduler is not None:
            yield from _read_or_down(
                self._from_cluster,
                "privclust_dask_up",
                "1 if the Dask scheduler that runs jobs answered, else 0",
                "Dask scheduler",
            )

    def _from_cluster(self) -> Iterator[Metric]:
        view = cluster_view(self.settings, CLUSTER_PROBE_SECONDS)
        workers = GaugeMetricFamily(
            "privclust_dask_workers",
            "Dask workers by status (running takes tasks; paused: its memory is full)",
            labels=["status"],
        )
        for status in sorted({"running", "paused"} | set(view.statuses)):
            workers.add_metric([status], view.statuses.get(status, 0))
        yield workers
        yield GaugeMetricFamily(
            "privclust_dask_can_run",
            "1 if a Dask worker can take a job's tasks now (one is running), else 0",
            value=int(view.running > 0),
        )

    def _from_redis(self) -> Iterator[Metric]:
        rq_queue = queue.get_queue(self.settings)
        depth = queue.queued_count(self.settings, rq_queue.connection)
        # RQ's worker registry: a worker's key expires when it stops sending heartbeats, so a
        # killed worker drops out (Worker.all skips registrations whose key is gone). All the
        # workers, a tenant pool's (which reads no plain queue) included.
        states = Counter(str(w.get_state()) for w in Worker.all(connection=rq_queue.connection))
        yield GaugeMetricFamily(
            "privclust_queue_depth",
            "Jobs waiting for a worker, in all the queues (one per tenant)",
            value=depth,
        )
        yield GaugeMetricFamily(
            "privclust_ledger_mismatched_datasets",
            "Datasets whose running budget differed from the replay of their ledger when the "
            "API's sweeper last checked them (should always be 0)",
            value=mismatched_ledgers(rq_queue.connection),
        )
        workers = GaugeMetricFamily(
            "privclust_workers",
            "Live RQ workers listening on the job queue, by state (busy: running a job)",
            labels=["state"],
        )
        for state in sorted({"busy", "idle"} | set(states)):
            workers.add_metric([state], states.get(state, 0))
        yield workers

    def _from_database(self) -> Iterator[Metric]:
        with self.sessions() as session:
            counts = repo.job_counts(session)
            failed, swept = repo.failed_entries(session, LOST_WORKER)
            durations = repo.job_run_durations(session, JOB_DURATION_BOUNDS)
            active, deleted = repo.dataset_counts(session)
            budgets = repo.dataset_budgets(session)
            oldest = repo.oldest_jobs(session)
            keys_left = repo.key_budgets_left(session)
            queued = repo.queued_by_tenant(session)
            session.rollback()
        yield _jobs(counts)
        yield _oldest(*oldest)
        yield from _tenant_queues(queued, {b.tenant for b in budgets})
        yield CounterMetricFamily(
            "privclust_jobs_failed",
            "Jobs that ended failed (the ledger's append-only `failed` entries)",
            value=failed,
        )
        yield CounterMetricFamily(
            "privclust_jobs_swept",
            "Running jobs failed by the sweeper because their worker stopped sending heartbeats",
            value=swept,
        )
        yield _durations(durations)
        datasets = GaugeMetricFamily(
            "privclust_datasets", "Datasets, by whether their rows are stored", labels=["state"]
        )
        datasets.add_metric(["stored"], active)
        datasets.add_metric(["deleted"], deleted)
        yield datasets
        yield from _budgets(budgets)
        yield _key_budgets(keys_left)


def _jobs(rows: Sequence[tuple[str, str, int]]) -> Metric:
    jobs = GaugeMetricFamily(
        "privclust_jobs", "Jobs in each status, by algorithm", labels=["status", "algorithm"]
    )
    by_pair = {(status, algorithm): n for status, algorithm, n in rows}
    algorithms = sorted(set(ALGORITHMS) | {a for _, a, _ in rows})
    for status in sorted(set(JOB_STATUSES) | {s for s, _, _ in rows}):
        for algorithm in algorithms:
            jobs.add_metric([status, algorithm], by_pair.get((status, algorithm), 0))
    return jobs


def _age(since: datetime, now: datetime) -> float:
    if since.tzinfo is None:  # a backend that drops the zone: UTC
        since = since.replace(tzinfo=UTC)
    return (now - since).total_seconds()


def _tenant_queues(
    queued: Sequence[tuple[str, int, datetime]], tenants: set[str]
) -> Iterator[Metric]:
    """Per tenant (every tenant with a dataset, 0 when nothing waits): its jobs waiting for a
    worker, and the age of the oldest of them."""
    depth = GaugeMetricFamily(
        "privclust_tenant_jobs_queued",
        "The tenant's jobs admitted and not yet started (the jobs table's `queued`)",
        labels=["tenant"],
    )
    age = GaugeMetricFamily(
        "privclust_tenant_job_oldest_queued_age_seconds",
        "Age of the tenant's oldest queued job (since it was admitted); 0 when none waits",
        labels=["tenant"],
    )
    now = utcnow()
    waiting = {tenant: (n, oldest) for tenant, n, oldest in queued}
    for tenant in sorted(tenants | waiting.keys()):
        n, oldest = waiting.get(tenant, (0, None))
        depth.add_metric([tenant], n)
        age.add_metric([tenant], 0.0 if oldest is None else _age(oldest, now))
    yield depth
    yield age


def _oldest(running: datetime | None, queued: datetime | None) -> Metric:
    ages = GaugeMetricFamily(
        "privclust_job_oldest_age_seconds",
        "Age of the oldest job in a status: running (since it started), queued (since it was "
        "admitted); 0 when there is none",
        labels=["status"],
    )
    now = utcnow()
    for status, since in ((JobStatus.RUNNING, running), (JobStatus.QUEUED, queued)):
        ages.add_metric([str(status)], 0.0 if since is None else _age(since, now))
    return ages


def _durations(durations: Sequence[tuple[str, int, float, list[int]]]) -> Metric:
    histogram = HistogramMetricFamily(
        "privclust_job_duration_seconds",
        "Run time of jobs that started and finished (started_at to finished_at)",
        labels=["algorithm"],
    )
    for algorithm, n, total, within in durations:
        bounds = zip(JOB_DURATION_BOUNDS, within, strict=True)
        buckets = [(repr(float(b)), float(c)) for b, c in bounds]
        buckets.append(("+Inf", float(n)))
        histogram.add_metric([algorithm], buckets, total)
    return histogram


def _budgets(budgets: list[repo.DatasetBudget]) -> Iterator[Metric]:
    """Per tenant: the mu its datasets have spent and reserved, and how many of its datasets
    that can still run jobs have less than LOW_BUDGET_SHARE of their cap left."""
    spent: dict[str, float] = defaultdict(float)
    reserved: dict[str, float] = defaultdict(float)
    low: dict[str, int] = defaultdict(int)
    for b in budgets:
        spent[b.tenant] += math.sqrt(b.spent_sq)
        reserved[b.tenant] += math.sqrt(b.reserved_sq)
        remaining = math.sqrt(max(0.0, b.mu_cap**2 - b.spent_sq - b.reserved_sq))
        # The console's scale: shares of mu^2 (what composes), not of mu.
        low[b.tenant] += int(b.stored and remaining**2 < LOW_BUDGET_SHARE * b.mu_cap**2)
    families = (
        (
            "privclust_budget_mu_spent",
            "Mu charged to the tenant's datasets: each dataset's spent mu (its row count and "
            "every job that started, composed), summed over its datasets",
            spent,
        ),
        (
            "privclust_budget_mu_reserved",
            "Mu reserved by the tenant's admitted jobs that have not started, summed over its "
            "datasets",
            reserved,
        ),
        (
            "privclust_budget_datasets_low",
            f"The tenant's datasets with stored rows and less than {LOW_BUDGET_SHARE:.0%} of "
            "their budget left, as the console shows it (a share of mu_cap^2, since mu^2 adds "
            "up over jobs)",
            low,
        ),
    )
    for name, help_text, values in families:
        family = GaugeMetricFamily(name, help_text, labels=["tenant"])
        for tenant in sorted(values):
            family.add_metric([tenant], values[tenant])
        yield family


def _key_budgets(keys_left: Sequence[tuple[str, str, float]]) -> Metric:
    """Per capped key: the least mu any of its caps leaves (a key capped on several datasets is
    first stopped by the cap with the least left)."""
    least: dict[tuple[str, str], float] = {}
    for tenant, key, left in keys_left:
        least[tenant, key] = min(left, least.get((tenant, key), math.inf))
    family = GaugeMetricFamily(
        "privclust_key_budget_mu_remaining",
        "Mu a capped API key may still spend: the least left under any of its caps per dataset",
        labels=["tenant", "key_id"],
    )
    for (tenant, key), left in sorted(least.items()):
        family.add_metric([tenant, key], left)
    return family


def _read_or_down(
    read: Callable[[], Iterator[Metric]], up_name: str, up_help: str, what: str
) -> Iterator[Metric]:
    """`read`'s metrics, then the gauge `up_name`: 1 if it read them all, 0 if it failed (the
    failure is logged, never raised into the scrape)."""
    up = GaugeMetricFamily(up_name, up_help)
    try:
        yield from read()
        up.add_metric([], 1)
    except Exception as exc:
        log.warning("metrics: cannot read the %s: %s", what, exc)
        up.add_metric([], 0)
    yield up
