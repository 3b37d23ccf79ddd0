"""Admitting work against a dataset's budget: the one choreography a job and a sweep share.

`Admission.run` is the order, written once:
0. a dataset that is not ready (still importing, or its import failed) is refused (409
   `dataset-not-ready`): it has no rows nor released count to plan with;
1. plan: invalid parameters are refused (422) before anything else;
2. end the read transaction, then ping the queue: while the queue is down the request is
   refused cleanly (503) before anything is charged;
3. open the budget transaction, lock the dataset, check the operator's cap on queued jobs
   (429), submit (reserve the budget), commit;
4. if the Idempotency-Key's unique constraint refused the insert, replay the request that
   committed first;
5. enqueue only after the commit; what could not be queued is failed and refunded (no noise
   can have been drawn for it).
"""

from __future__ import annotations

import logging
import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.coordinator.client import MemberError
from app.coordinator.terms import is_federated, job_calls, refused
from app.datasets import service as datasets_service
from app.jobs import lifecycle
from app.jobs import repository as repo
from app.jobs.members import record_members
from app.kit import queue
from app.kit.clock import SYSTEM_CLOCK, Clock
from app.kit.config import Settings
from app.kit.errors import Conflict, InvalidParameter, ServiceUnavailable, TooManyQueuedJobs
from app.ledger import service as ledger
from app.models import Dataset, Job, Sweep

log = logging.getLogger("privclust.api")

R = TypeVar("R", bound="Request")  # what was asked for
P = TypeVar("P")  # its plan
A = TypeVar("A", Job, Sweep)  # what is admitted: a job, or a sweep of jobs

NOT_QUEUED = "the job could not be queued"
QUEUE_FULL_RETRY_AFTER = 5  # seconds: the Retry-After of a 429 too-many-queued-jobs


class Request(Protocol):
    def fingerprint(self, dataset_id: uuid.UUID) -> str:
        """A digest of the request's body: an Idempotency-Key replays only the same body."""
        ...


@dataclass(frozen=True)
class QueueLimits:
    """The operator's caps on queued jobs (None: no cap), from the settings."""

    per_tenant: int | None = None
    per_key: int | None = None

    @classmethod
    def of(cls, settings: Settings) -> QueueLimits:
        return cls(settings.max_queued_jobs_per_tenant, settings.max_queued_jobs_per_key)


@dataclass(frozen=True)
class Asker:
    """Who asks for an estimate, and when: the key whose cap and pace apply (None: only the
    dataset's) and the service's clock."""

    key_id: uuid.UUID | None = None
    clock: Clock = SYSTEM_CLOCK


@dataclass(frozen=True)
class Submitter:
    """Who submits work and how: the tenant, the key (whose cap, pace and queue limit apply;
    None: none), the request's Idempotency-Key (None: none) and the service's clock."""

    tenant: str
    key_id: uuid.UUID | None
    idempotency_key: str | None = None
    clock: Clock = SYSTEM_CLOCK


class Admission(ABC, Generic[R, P, A]):
    """One request to admit work on `dataset`; a subclass says what is planned and reserved."""

    def __init__(
        self,
        dataset: Dataset,
        req: R,
        actor: uuid.UUID | None,
        idempotency_key: str | None,
        limits: QueueLimits | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.dataset, self.req, self.actor = dataset, req, actor
        self.idempotency_key = idempotency_key
        self.fingerprint = req.fingerprint(dataset.id)
        self.limits = limits or QueueLimits()
        self.clock = clock
        # The time the admission is decided at (paces), read under the budget lock.
        self.now = clock.now()

    @abstractmethod
    def job_count(self, plan: P) -> int:
        """How many jobs admitting `plan` queues."""

    @abstractmethod
    def plan(self) -> P:
        """Validate and price the request (InvalidParameter: 422); charges nothing."""

    @abstractmethod
    def reserve(self, session: Session, plan: P) -> A:
        """Add what is admitted and reserve its budget (BudgetExceeded: nothing charged), under
        the dataset's budget lock."""

    @abstractmethod
    def existing(self, session: Session, key: str) -> A | None:
        """What the tenant admitted earlier under Idempotency-Key `key`, if anything."""

    @abstractmethod
    def jobs(self, session: Session, admitted: A) -> Sequence[Job]:
        """The jobs to enqueue, in order."""

    @abstractmethod
    def not_queued(self, admitted: A, refunded: int, jobs: int) -> ServiceUnavailable | None:
        """The 503 for jobs that could not be queued (`refunded` of `jobs` were failed and
        refunded), or None when every job is in a worker's hands after all."""

    @classmethod
    def admit(
        cls, session: Session, settings: Settings, dataset_id: uuid.UUID, req: R, by: Submitter
    ) -> tuple[Dataset, A, bool]:
        """Admit `req` on the submitter's dataset under the operator's queue limits (`run`):
        (the dataset, what was admitted, created)."""
        dataset = datasets_service.get_dataset(session, dataset_id, by.tenant)
        limits = QueueLimits.of(settings)
        admission: Admission[R, P, A] = cls(
            dataset, req, by.key_id, by.idempotency_key, limits, by.clock
        )
        admitted, created = admission.run(session, settings)
        return dataset, admitted, created

    def run(self, session: Session, settings: Settings) -> tuple[A, bool]:
        """Admit the request (see the module's docstring): (what was admitted, created);
        created is False when the Idempotency-Key replayed an earlier request."""
        datasets_service.require_ready(self.dataset)  # 409: nothing to plan with yet
        plan = self.plan()  # invalid parameters: 422 before anything else
        # Refuse cleanly while the queue is down, before anything is charged. The ping may wait
        # for its socket timeout: end the read transaction first, so that no database connection
        # (and no PostgreSQL transaction or SQLite snapshot) is held meanwhile.
        session.commit()
        queue.redis_connection(queue.resolve_redis_url(settings)).ping()
        admitted, created = self._submit_once(session, plan)
        if created:
            self._join_members(session, settings, admitted)
            self._enqueue_or_refund(session, settings, admitted)
        else:
            session.refresh(admitted)  # it may have moved on since it was admitted
        return admitted, created

    def submit(self, session: Session, plan: P) -> tuple[A, bool]:
        """Admit in the current transaction, opened by `ledger.begin_budget_transaction`; the
        caller commits, and only then enqueues. Returns (what was admitted, created).

        With an Idempotency-Key already used for the same body, what that request admitted
        comes back and nothing is charged again. The key is looked up twice: once without the
        lock (the cheap path of a plain retry), and again under the dataset's budget lock,
        because a request with the same key may have committed while this one waited for that
        lock; without the second look it would be refused as over budget instead of replaying.
        Same key on two datasets at once: the unique constraint refuses the second insert
        (IntegrityError); `run` rolls back and replays.
        """
        key = self.idempotency_key
        if key is not None and not (1 <= len(key) <= 200):
            raise InvalidParameter(
                "Idempotency-Key must be 1 to 200 characters", field="Idempotency-Key"
            )
        existing = self.replay(session)
        if existing is None:
            ledger.lock_for_admission(session, self.dataset.id)  # held until commit
            self.now = self.clock.now()
            existing = self.replay(session)
        if existing is not None:
            return existing, False
        self.check_queue_room(session, self.job_count(plan))
        return self.reserve(session, plan), True

    def check_queue_room(self, session: Session, adding: int) -> None:
        """429 `too-many-queued-jobs` (nothing charged) when `adding` more queued jobs would
        pass the operator's cap for the tenant or for the key. Counted in the admission's
        transaction under a per-tenant lock (PostgreSQL: an advisory lock; SQLite: the write
        lock every admission holds), so concurrent admissions cannot overshoot a cap."""
        caps = [
            ("tenant", self.limits.per_tenant, None),
            ("key", self.limits.per_key, self.actor),
        ]
        wanted = [(scope, cap, key) for scope, cap, key in caps if cap is not None]
        if not wanted:
            return
        repo.lock_tenant_queue(session, self.dataset.tenant)
        for scope, cap, key in wanted:
            if scope == "key" and key is None:
                continue
            assert cap is not None
            queued = repo.count_queued(session, self.dataset.tenant, key, limit=cap)
            if queued + adding > cap:
                raise TooManyQueuedJobs(
                    f"the {scope} already has {queued} jobs waiting to run (at most {cap}"
                    f" may wait at once); nothing was charged, try again once some have started",
                    retry_after=QUEUE_FULL_RETRY_AFTER,
                    scope=scope,
                    queued=queued,
                    limit=cap,
                )

    def replay(self, session: Session) -> A | None:
        """What an earlier request with this Idempotency-Key admitted, or None; 409
        `idempotency-key-reused` if its body differed."""
        if self.idempotency_key is None:
            return None
        existing = self.existing(session, self.idempotency_key)
        if existing is not None and existing.request_fingerprint != self.fingerprint:
            # The problem names what the key admitted: `job_id` or `sweep_id`.
            admitted: dict[str, Any] = {f"{type(existing).__name__.lower()}_id": str(existing.id)}
            raise Conflict(
                "this Idempotency-Key was already used with a different request body",
                code="idempotency-key-reused",
                **admitted,
            )
        return existing

    def _submit_once(self, session: Session, plan: P) -> tuple[A, bool]:
        ledger.begin_budget_transaction(session)
        try:
            admitted, created = self.submit(session, plan)
            session.commit()
        except IntegrityError:
            # The Idempotency-Key's unique constraint: a request with the same key committed
            # first (on another dataset, whose lock this one does not share). Replay it, or 409
            # if the body differs; any other integrity error is not ours to explain.
            session.rollback()
            existing = self.replay(session)
            if existing is None:
                raise
            return existing, False
        return admitted, created

    def _join_members(self, session: Session, settings: Settings, admitted: A) -> None:
        """On a federated dataset, every member joins each admitted job (each charges it on
        its own ledger) before it is queued. A member that refuses is named; every job is
        failed and refunded here, and every member that had joined is told (it refunds)."""
        if not is_federated(self.dataset):
            return
        jobs = self.jobs(session, admitted)
        made = [
            job_calls(session, self.dataset, str(job.id), job.algorithm, job.mu)(settings)
            for job in jobs
        ]
        session.commit()  # no transaction is held while the members answer
        joined = []
        try:
            for calls in made:
                calls.join()
                joined.append(calls)
        except MemberError as exc:
            for calls in joined:
                calls.finish(succeeded=False)
            reason = f"{exc.member.name} refused the job; nothing was charged"
            for job in jobs:
                lifecycle.fail_unqueued(session, job.id, reason)
            session.commit()
            raise refused(exc, "the job") from exc
        finally:
            for job, calls in zip(jobs, made, strict=True):
                calls.close()
                record_members(session, job, calls.states())

    def _enqueue_or_refund(self, session: Session, settings: Settings, admitted: A) -> None:
        jobs = self.jobs(session, admitted)
        for position, job in enumerate(jobs):
            try:
                queue.enqueue_job(settings, job.id, job.tenant)
            except Exception as exc:
                # This job and the ones after it never reached the queue: fail and refund them
                # (no noise drawn); those already queued run as admitted.
                refunded = sum(
                    lifecycle.fail_unqueued(session, unqueued.id, NOT_QUEUED)
                    for unqueued in jobs[position:]
                )
                session.commit()
                error = self.not_queued(admitted, refunded, len(jobs))
                if error is not None:
                    raise error from exc
                # The enqueue reached Redis and only its reply was lost: a worker has the job.
                log.warning(
                    "job %s: enqueue reported %r, but a worker has taken the job", job.id, exc
                )
                session.refresh(job)
                return
