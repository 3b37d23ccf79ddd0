"""The API's background sweeper: keeps job states honest while the API runs.

- Fails running jobs whose worker died (no heartbeat); their budget stays charged.
- Re-enqueues queued jobs whose queue entry was lost (app.jobs.reconcile).
- Deletes uploads abandoned by a killed API process (also done at start-up).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from redis.exceptions import RedisError
from sqlalchemy.orm import Session, sessionmaker

from app.datasets import service as datasets_service
from app.jobs import queue, reconcile
from app.jobs import service as jobs_service
from app.kit.config import Settings
from app.kit.db.session import unit_of_work

log = logging.getLogger("privclust.api")

CLEANUP_EVERY = 600.0  # seconds between looks for partial uploads left by a killed API


class Sweeper(threading.Thread):
    """One per API process, for the app's lifespan (`Sweeper.running`)."""

    def __init__(self, settings: Settings, sessions: sessionmaker[Session]) -> None:
        super().__init__(daemon=True, name="stale-job-sweeper")
        self.settings = settings
        self.sessions = sessions
        self.stopped = threading.Event()
        self.every = max(0.5, min(10.0, settings.stale_job_seconds / 3))
        self._queue_down = False

    @classmethod
    @contextmanager
    def running(cls, settings: Settings, sessions: sessionmaker[Session]) -> Iterator[Sweeper]:
        """Sweep in the background for as long as the block runs (the app's lifespan)."""
        sweeper = cls(settings, sessions)
        sweeper.start()
        try:
            yield sweeper
        finally:
            sweeper.stopped.set()

    def run(self) -> None:
        next_cleanup = time.monotonic() + CLEANUP_EVERY
        while not self.stopped.wait(self.every):
            self.sweep_stale()
            self.reconcile()
            if time.monotonic() >= next_cleanup:
                next_cleanup = time.monotonic() + CLEANUP_EVERY
                datasets_service.remove_abandoned_uploads(self.settings, self.sessions)

    def sweep_stale(self) -> None:
        try:
            with unit_of_work(self.sessions) as session:
                for job_id in jobs_service.sweep_stale_jobs(
                    session, self.settings.stale_job_seconds
                ):
                    log.warning("job %s failed: its worker stopped", job_id)
        except Exception:
            log.exception("stale-job sweep failed; will retry")

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
