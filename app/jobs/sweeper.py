"""The API's background sweeper: keeps job states honest while the API runs.

- Fails running jobs whose worker died (no heartbeat); their budget stays charged.
- Re-enqueues queued jobs whose queue entry was lost (app.jobs.reconcile).
- Runs the chores the app gives it (a federation member's expiry of idle member jobs,
  app.federation.expiry), each failure logged and retried at the next round.
- Deletes uploads abandoned by a killed API process (also done at start-up).
- Every PRIVCLUST_LEDGER_CHECK_SECONDS (0: never), checks a bounded batch of datasets'
  ledgers (app.ledger.verify: the replay against the running budget, the hash chain, each
  commit against its job and plan), taking turns across API processes (a Redis lock and
  cursor); one that differs is logged and counted in `privclust_ledger_mismatched_datasets`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from redis import Redis
from redis.exceptions import LockError, RedisError
from sqlalchemy.orm import Session, sessionmaker

from app.datasets import service as datasets_service
from app.jobs import reconcile
from app.jobs import service as jobs_service
from app.jobs.planning import plan_mismatch
from app.kit import queue
from app.kit.config import Settings
from app.kit.db.session import unit_of_work
from app.ledger import verify

log = logging.getLogger("privclust.api")

CLEANUP_EVERY = 600.0  # seconds between looks for partial uploads left by a killed API
LEDGER_CHECK_ENTRIES = 50_000  # ledger entries a batch replays (at least one whole dataset)
LEDGER_MISMATCHED = "privclust:ledger:mismatched"  # Redis set: datasets whose check failed
_LEDGER_CURSOR = "privclust:ledger:check-after"


def mismatched_ledgers(conn: Redis) -> int:
    """How many datasets' running budgets differed from their ledgers at their last check."""
    return int(conn.scard(LEDGER_MISMATCHED))


class Sweeper(threading.Thread):
    """One per API process, for the app's lifespan (`Sweeper.running`)."""

    def __init__(
        self,
        settings: Settings,
        sessions: sessionmaker[Session],
        chores: Sequence[Callable[[], None]] = (),
    ) -> None:
        super().__init__(daemon=True, name="stale-job-sweeper")
        self.settings = settings
        self.sessions = sessions
        self.chores = tuple(chores)
        self.stopped = threading.Event()
        self.every = max(0.5, min(10.0, settings.stale_job_seconds / 3))
        self._queue_down = False

    @classmethod
    @contextmanager
    def running(
        cls,
        settings: Settings,
        sessions: sessionmaker[Session],
        chores: Sequence[Callable[[], None]] = (),
    ) -> Iterator[Sweeper]:
        """Sweep in the background for as long as the block runs (the app's lifespan)."""
        sweeper = cls(settings, sessions, chores)
        sweeper.start()
        try:
            yield sweeper
        finally:
            sweeper.stopped.set()

    def run(self) -> None:
        next_cleanup = time.monotonic() + CLEANUP_EVERY
        ledger_every = self.settings.ledger_check_seconds
        next_ledger_check = time.monotonic() + self.every
        while not self.stopped.wait(self.every):
            self.sweep_stale()
            self.run_chores()
            self.reconcile()
            if ledger_every > 0 and time.monotonic() >= next_ledger_check:
                next_ledger_check = time.monotonic() + ledger_every
                self.check_ledgers()
            if time.monotonic() >= next_cleanup:
                next_cleanup = time.monotonic() + CLEANUP_EVERY
                datasets_service.remove_abandoned_uploads(self.settings, self.sessions)

    def check_ledgers(self, max_entries: int = LEDGER_CHECK_ENTRIES) -> list[verify.Check] | None:
        """One batch of the ledger check; the next batch (in any process) continues where it
        stopped (the cursor in Redis). None when it did not run: another API process holds
        the check's lock (its batch moves the cursor), or the check failed."""
        try:
            conn = queue.redis_connection(queue.resolve_redis_url(self.settings))
            lock = conn.lock("privclust:ledger:check", timeout=3600, blocking=False)
            if not lock.acquire():
                return None
            try:
                raw = conn.get(_LEDGER_CURSOR)
                after = uuid.UUID(raw.decode()) if raw else None  # type: ignore[union-attr]
                checks, after = verify.check_pass(self.sessions, after, max_entries, plan_mismatch)
                conn.set(_LEDGER_CURSOR, str(after) if after else "")
                for check in checks:
                    if check.agrees:
                        conn.srem(LEDGER_MISMATCHED, str(check.dataset_id))
                    else:
                        conn.sadd(LEDGER_MISMATCHED, str(check.dataset_id))
                        log.error("ledger check: %s", check.describe())
                return checks
            finally:
                with contextlib.suppress(LockError):
                    lock.release()
        except Exception:
            log.exception("ledger check failed; will retry")
            return None

    def sweep_stale(self) -> None:
        try:
            with unit_of_work(self.sessions) as session:
                for job_id in jobs_service.sweep_stale_jobs(
                    session, self.settings.stale_job_seconds
                ):
                    log.warning("job %s failed: its worker stopped", job_id)
        except Exception:
            log.exception("stale-job sweep failed; will retry")

    def run_chores(self) -> None:
        for chore in self.chores:
            try:
                chore()
            except Exception:
                log.exception(
                    "sweeper chore %s failed; will retry", getattr(chore, "__name__", chore)
                )

    def reconcile(self) -> None:
        try:
            reconcile.reconcile_queue(
                self.sessions,
                queue.get_queue(self.settings),
                self.settings,
                grace_seconds=self.settings.stale_job_seconds,
            )
        except (RedisError, RuntimeError) as exc:
            if not self._queue_down:  # once per outage, not every few seconds
                log.warning("cannot check queued jobs against the queue: %s", exc)
            self._queue_down = True
            return
        except Exception:
            log.exception("queue reconciliation failed; will retry")
            return
        if self._queue_down:
            log.warning("the queue is reachable again; queued jobs are checked against it")
        self._queue_down = False
