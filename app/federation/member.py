"""A member's part in federated jobs: join (its own ledger charges the job), answer releases
with masked vectors only, finish (docs/threat-model.md, docs/algorithms.md section 15).

What the member enforces itself, whatever the coordinator asks:
- the plan it joined names its own public key among the members, its dataset's domain and
  columns, and a method from `METHOD_PASSES`; it charges the plan's mu on its own ledger
  (reserved at join, committed before the first noise share is drawn);
- each release's cost, mu_i^2, comes from the noise the coordinator asks for against the
  sensitivity the member computes itself (privclust.federation.pricing); the sum over the
  releases it answered never exceeds the charged mu^2 (composition: sqrt(sum mu_i^2));
- a release index is answered once: the same request gets the same stored words back, another
  request for that index is refused; the noise share is drawn from OS entropy;
- nothing but masked words leaves it; the exact statistic and the share are never stored or
  logged, and no refusal repeats a value computed from the rows.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from dataclasses import dataclass
from datetime import timedelta
from fractions import Fraction
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.coordinator.terms import public_domain
from app.datasets import service as datasets_service
from app.federation import repository as repo
from app.federation.labels import checked_centres, keep_centres
from app.federation.rows import ROW_DTYPES, member_rows, reading_of
from app.kit.db.base import utcnow
from app.kit.errors import Conflict, InvalidParameter, NotFound
from app.ledger import members as member_ledger
from app.ledger import service as ledger
from app.models import ApiKey, Dataset, JobStatus, MemberAnswer, MemberJob
from privclust.clustering import Algorithm
from privclust.clustering.data.rows import Reading
from privclust.federation.keys import MemberKey, check_public_key
from privclust.federation.masks import MaskScope
from privclust.federation.passes import (
    CLUSTER_LOSSES,
    LLOYD_SUMS,
    ROW_COUNT,
    VOTE_COUNTS,
    CandidatesDiffer,
    PassError,
    check_ring_bits,
    decode,
)
from privclust.federation.pricing import decode_noises, release_mu_squared, required_sensitivities
from privclust.federation.protocol import MemberSeat, answer_pass
from privclust.federation.shares import MAX_MEMBERS, MIN_MEMBERS, NoiseShares
from privclust.tabular import TableSpec

# The passes each federated method may ask a member for ("count": the federated dataset's
# noisy row count).
METHOD_PASSES: dict[str, tuple[str, ...]] = {
    "count": (ROW_COUNT,),
    Algorithm.FASTLLOYD.value: (LLOYD_SUMS,),
    Algorithm.PE_MEANS.value: (VOTE_COUNTS,),
    Algorithm.PE_LLOYD.value: (VOTE_COUNTS, LLOYD_SUMS, CLUSTER_LOSSES),
}
# The releases of one job (an index beyond it is refused).
MAX_RELEASES = 100_000


@dataclass(frozen=True)
class Join:
    """What a coordinator asks a member to join: the job and its public plan."""

    federation: str
    job: str
    method: str
    mu: float
    dtype: str
    members: list[str]
    colluding: int
    domain: dict[str, Any]

    def plan(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "dtype": self.dtype,
            "members": list(self.members),
            "colluding": self.colluding,
        }


def _dataset_of(session: Session, key: ApiKey) -> Dataset:
    assert key.dataset_id is not None  # a member key always names its dataset
    dataset = ledger.tenant_dataset(session, key.dataset_id, key.tenant)
    if dataset.deleted_at is not None:
        raise Conflict("the member's dataset has been deleted", code="dataset-deleted")
    datasets_service.require_ready(dataset)
    return dataset


def _check_join(session: Session, key: ApiKey, dataset: Dataset, request: Join) -> None:
    if request.method not in METHOD_PASSES:
        raise InvalidParameter(
            f"a member takes part in {', '.join(METHOD_PASSES)} jobs, not {request.method!r}",
            field="method",
        )
    if request.dtype not in ROW_DTYPES:
        raise InvalidParameter(f"dtype must be one of {ROW_DTYPES}", field="dtype")
    if public_domain(dataset) != request.domain:
        raise InvalidParameter(
            "the federation's declared domain, columns or table terms differ from this "
            "member's dataset",
            field="domain",
            code="domain-mismatch",
        )
    publics = _publics(request.members)
    if not MIN_MEMBERS <= len(publics) <= MAX_MEMBERS or len(set(publics)) != len(publics):
        raise InvalidParameter(
            f"{MIN_MEMBERS} to {MAX_MEMBERS} distinct member keys", field="members"
        )
    if _seat_key(session, key).public not in publics:
        raise InvalidParameter("this member's key is not among the members'", field="members")
    if not 0 <= request.colluding < len(publics):
        raise InvalidParameter("colluding must be in [0, members - 1]", field="colluding")


def _publics(members: list[str]) -> list[bytes]:
    try:
        publics = [base64.b64decode(m, validate=True) for m in members]
        for public in publics:
            check_public_key(public)
    except ValueError as exc:
        raise InvalidParameter("each member key is 32 bytes in base64", field="members") from exc
    return publics


def _seat_key(session: Session, key: ApiKey) -> MemberKey:
    row = repo.seat_of(session, key.id)
    if row is None:
        raise RuntimeError(f"member key {key.id} has no seat")
    return MemberKey.from_private_bytes(bytes(row.private_key))


def join(session: Session, key: ApiKey, request: Join) -> MemberJob:
    """Join a federated job: check its plan against this member, then reserve its mu on the
    member's own ledger (409 naming the limit when there is no room; nothing charged). The
    same request again gets the same member job; another plan under the same names is 409."""
    dataset = _dataset_of(session, key)
    _check_join(session, key, dataset, request)
    existing = repo.member_job_by_names(session, key.id, request.federation, request.job)
    if existing is not None:
        return _same_join(existing, request)
    ledger.begin_budget_transaction(session)
    existing = repo.member_job_by_names(session, key.id, request.federation, request.job)
    if existing is not None:
        return _same_join(existing, request)
    member_job = MemberJob(
        id=uuid.uuid4(),
        key_id=key.id,
        dataset_id=dataset.id,
        federation=request.federation,
        job=request.job,
        plan=request.plan(),
        mu=request.mu,
        answered_sq="0/1",
        status=JobStatus.RUNNING,
    )
    note = f"federated {request.method} job {request.job} of federation {request.federation}"
    member_ledger.reserve_member_job(session, member_job, note)
    session.commit()
    return member_job


def _same_join(existing: MemberJob, request: Join) -> MemberJob:
    if existing.plan != request.plan() or existing.mu != request.mu:
        raise Conflict(
            "this member already joined that job with another plan", code="member-job-conflict"
        )
    return existing


def member_job(session: Session, key: ApiKey, member_job_id: uuid.UUID) -> MemberJob:
    """The key's member job, its row locked for the caller's budget transaction: a release's
    claim and the job's end (`finish`, the expiry) read its status and its answers under this
    lock, one after the other, so an end never refunds a job whose first release is being
    claimed (on SQLite the transaction's BEGIN IMMEDIATE serializes them already)."""
    found = session.get(MemberJob, member_job_id, with_for_update=True, populate_existing=True)
    if found is None or found.key_id != key.id:
        raise NotFound("no such federated job for this member", code="member-job-not-found")
    return found


def _digest(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


# A claimed release whose words were never stored (its process died while computing) may be
# taken over after this long: that draw was never sent, so drawing again releases nothing twice.
STALE_CLAIM = timedelta(seconds=120)


@dataclass(frozen=True)
class _Claim:
    """A release this request alone computes (`attempt`), with everything the computation
    needs, read before the claim's transaction ended."""

    member_job_id: uuid.UUID
    release: int
    attempt: str
    stored: str
    reading: Reading
    statistic: Any
    noises: Any
    seat: MemberSeat
    scope: MaskScope


def answer(
    session: Session, key: ApiKey, member_job_id: uuid.UUID, release: int, body: dict[str, Any]
) -> bytes:
    """The masked words of one release (little-endian uint64); see the module docstring.

    Two short transactions around the pass: the first claims the release (its price counted
    and the charge committed, under the budget lock), the pass and the share are computed with
    no transaction held, the second stores the words. Another request for a release being
    computed is 409 `release-in-progress` (retry: it gets the stored words)."""
    if not 0 <= release < MAX_RELEASES:
        raise InvalidParameter(f"a release index is in [0, {MAX_RELEASES})", field="release")
    claim = _claim(session, key, member_job_id, release, _digest(body), body)
    if isinstance(claim, bytes):
        return claim
    rows = member_rows(claim.stored, claim.reading)
    bits = int(body.get("bits", 64))  # checked by `_priced` when the claim was made
    _, masked = answer_pass(
        rows, claim.statistic, claim.noises, claim.seat, claim.scope, _test_rng(release), bits
    )
    words = np.ascontiguousarray(masked, dtype=f"<u{bits // 8}").tobytes()
    ledger.begin_budget_transaction(session)
    row = session.get(MemberAnswer, (claim.member_job_id, release))
    assert row is not None
    if row.attempt == claim.attempt and not row.words:
        row.words = words
    # Else another request took the claim over: its words stand and these are never sent.
    stored = bytes(row.words)
    session.commit()
    if not stored:
        raise _in_progress()
    return stored


def _in_progress() -> Conflict:
    return Conflict("that release is being computed; ask again", code="release-in-progress")


def _claim(
    session: Session,
    key: ApiKey,
    member_job_id: uuid.UUID,
    release: int,
    digest: str,
    body: dict[str, Any],
) -> _Claim | bytes:
    """The stored words of the release, or this request's claim on it (committed)."""
    ledger.begin_budget_transaction(session)  # one claim at a time on this server
    job = member_job(session, key, member_job_id)
    dataset = _dataset_of(session, key)
    stored = session.get(MemberAnswer, (job.id, release))
    attempt = uuid.uuid4().hex
    if stored is not None:
        if stored.request_digest != digest:
            raise Conflict("that release was answered for another request", code="release-taken")
        if stored.words:
            words = bytes(stored.words)
            session.commit()
            return words
        if utcnow() - stored.created_at < STALE_CLAIM:
            raise _in_progress()
        stored.attempt, stored.created_at = attempt, utcnow()
        statistic, noises, _ = _priced(job, dataset, body)
        member_ledger.commit_member_job(session, job)  # done with the claim; never skipped
    else:
        statistic, noises = _counted(session, job, dataset, body, release, digest, attempt)
    claim = _Claim(
        job.id, release, attempt, str(dataset.storage_path),
        reading_of(dataset, job.plan["dtype"]), statistic, noises,
        _seat(session, key, job),
        MaskScope(federation=job.federation, job=job.job, pass_index=release, release=0),
    )  # fmt: skip
    session.commit()
    return claim


def _counted(
    session: Session,
    job: MemberJob,
    dataset: Dataset,
    body: dict[str, Any],
    release: int,
    digest: str,
    attempt: str,
) -> tuple[Any, Any]:
    """Price a new release, refuse it past the charge, commit the charge and record the
    claim (its words still empty)."""
    if job.status != JobStatus.RUNNING:
        raise Conflict(f"the federated job is {job.status}", code="member-job-finished")
    statistic, noises, mu_sq = _priced(job, dataset, body)
    answered = Fraction(job.answered_sq) + mu_sq
    if answered > Fraction(job.mu) ** 2 * _SLACK:
        raise Conflict(
            f"this release would take the job past the mu={job.mu:.6g} the member charged",
            code="member-budget-spent",
        )
    member_ledger.commit_member_job(session, job)
    session.add(
        MemberAnswer(
            member_job_id=job.id, release=release, request_digest=digest, words=b"",
            mu_sq=f"{mu_sq.numerator}/{mu_sq.denominator}", attempt=attempt,
        )
    )  # fmt: skip
    job.answered_sq = f"{answered.numerator}/{answered.denominator}"
    return statistic, noises


# The plan's float arithmetic (sigma from mu, sqrt of a weight) may put the sum of the
# releases' mu^2 a few ulps above mu^2; a relative slack of 1e-9 absorbs that and nothing more.
_SLACK = Fraction(1) + Fraction(1, 10**9)


def _priced(job: MemberJob, dataset: Dataset, body: dict[str, Any]) -> tuple[Any, Any, Fraction]:
    try:
        statistic = decode(body.get("pass"), dataset.n_cols)
        if body.get("pass", {}).get("pass") not in METHOD_PASSES[job.plan["method"]]:
            raise PassError(f"a {job.plan['method']} job asks for no such pass")
        bound = TableSpec.of(dataset.table_spec).contribution_bound
        required = required_sensitivities(statistic, dataset.n_cols, bound)
        noises = decode_noises(body.get("noises"), len(required))
        check_ring_bits(body["pass"]["pass"], body.get("bits", 64))
        return statistic, noises, release_mu_squared(noises, required)
    except CandidatesDiffer as exc:
        raise InvalidParameter(str(exc), field="pass", code="candidates-differ") from exc
    except PassError as exc:
        raise InvalidParameter(str(exc), field="pass") from exc


def _seat(session: Session, key: ApiKey, job: MemberJob) -> MemberSeat:
    members = tuple(_publics(job.plan["members"]))
    return MemberSeat(
        key=_seat_key(session, key),
        members=members,
        shares=NoiseShares(len(members), int(job.plan["colluding"])),
    )


def _test_rng(release: int) -> np.random.Generator | None:
    """None (OS entropy) except under a test that fixes the noise of each release."""
    return _FIXED_NOISE[0](release) if _FIXED_NOISE else None


# Test-only: the generator members draw a release's shares from, by release index.
_FIXED_NOISE: list[Any] = []


def finish(
    session: Session,
    key: ApiKey,
    member_job_id: uuid.UUID,
    succeeded: bool,
    centers: list[list[float]] | None = None,
) -> MemberJob:
    """The coordinator says the job ended: refunded on the member's ledger if it answered no
    release, else charged; a job that succeeded keeps its released `centers`."""
    ledger.begin_budget_transaction(session)
    job = member_job(session, key, member_job_id)
    released = checked_centres(session, job, succeeded, centers)
    end(session, job, succeeded, "the federated job ended before this member answered a release")
    keep_centres(job, released)
    session.commit()
    return job


def end(session: Session, job: MemberJob, succeeded: bool, note: str) -> None:
    """End a running member job in the caller's budget transaction: refunded (`cancelled`,
    with `note`) when it answered no release, else `succeeded` or `failed`, its charge kept.
    A job that ended already keeps its end."""
    if job.status != JobStatus.RUNNING:
        return
    answered = session.scalars(
        select(MemberAnswer.release).where(MemberAnswer.member_job_id == job.id).limit(1)
    ).first()
    if answered is None and member_ledger.refund_member_job(session, job, note):
        job.status = JobStatus.CANCELLED  # ended before any noise: refunded
    else:
        job.status = JobStatus.SUCCEEDED if succeeded else JobStatus.FAILED
    job.finished_at = utcnow()
