"""A federated dataset: no row stored here, its rows held by 2 to 16 members (privclust servers
that each hold their own rows), every release their secure sum (app.coordinator).

Creating one checks every member's seat (reachable, its key valid, the dataset it names, the
same columns), has every member join the release of the noisy row count (each checks the
declared domain and charges the count on its own ledger), and only then records the dataset and
charges the count on this ledger, as an upload's count is charged; the members then answer the
count's release. A member that refuses is named in the 409/422 and nothing is charged anywhere
(the members that had joined answered nothing and refund).
"""

from __future__ import annotations

import json
import uuid
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy.orm import Session

from app.coordinator import repository as coordinator_repo
from app.coordinator.client import MemberAddress, MemberError
from app.coordinator.service import FederatedJob, Federation, seat_of
from app.coordinator.terms import MemberFailed, public_domain, refused
from app.datasets.domain import resolve_domain
from app.datasets.terms import NewDataset, check_terms, dataset_row
from app.kit import repository as kit_repo
from app.kit.config import Settings
from app.kit.errors import InvalidParameter
from app.ledger import service as ledger
from app.models import ApiKey, Dataset, DatasetKind, DatasetStatus
from privclust.clustering.data.release import Gaussian
from privclust.clustering.data.rows import RowCount
from privclust.federation.shares import MAX_MEMBERS, MIN_MEMBERS
from privclust.privacy.noise import count_sigma

COUNT_JOB = "row-count"


def parse_members(raw: str) -> list[MemberAddress]:
    """The `members` form field: a JSON list of {url, dataset_id, key} (422 naming `members`)."""
    try:
        items = json.loads(raw)
    except ValueError as exc:
        raise InvalidParameter("members must be a JSON list", field="members") from exc
    if not isinstance(items, list) or not MIN_MEMBERS <= len(items) <= MAX_MEMBERS:
        raise InvalidParameter(
            f"members is a JSON list of {MIN_MEMBERS} to {MAX_MEMBERS} members", field="members"
        )
    members = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or set(item) != {"url", "dataset_id", "key"}:
            raise InvalidParameter("each member is {url, dataset_id, key}", field="members")
        url, dataset_id, key = item["url"], item["dataset_id"], item["key"]
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
            raise InvalidParameter(f"member {i}: url must be http(s)://host", field="members")
        try:
            uuid.UUID(str(dataset_id))
        except ValueError as exc:
            raise InvalidParameter(f"member {i}: dataset_id is a UUID", field="members") from exc
        if not isinstance(key, str) or not 8 <= len(key) <= 200:
            raise InvalidParameter(f"member {i}: key is a member API key", field="members")
        members.append(MemberAddress(i, url.rstrip("/"), str(dataset_id), key))
    if len({(m.url, m.dataset_id) for m in members}) != len(members):
        raise InvalidParameter("a member is named twice", field="members")
    return members


def _checked(new: NewDataset, colluding: int, count: int) -> None:
    if not new.table.plain:
        raise InvalidParameter("a federated dataset takes no table terms", field="members")
    if new.count_public:
        raise InvalidParameter("a federated dataset's row count is private", field="count_public")
    if not new.columns:
        raise InvalidParameter("a federated dataset declares its columns", field="columns")
    if not 0 <= colluding < count:
        raise InvalidParameter(f"colluding must be in [0, {count - 1}]", field="colluding")


def _seats(members: list[MemberAddress], columns: list[str], settings: Settings) -> list[dict]:
    seats = []
    for member in members:
        try:
            seat = seat_of(member, settings)
        except MemberError as exc:
            raise refused(exc, "the federation") from exc
        if list(seat["dataset"].get("columns") or []) != columns:
            raise refused(MemberError(member, "its dataset has other columns", 422), "it")
        seats.append(seat)
    if len({s["public_key"] for s in seats}) != len(seats):
        raise InvalidParameter("two members have the same public key", field="members")
    return seats


def create_federated(
    session: Session,
    owner: ApiKey,
    new: NewDataset,
    members: list[MemberAddress],
    colluding: int,
    settings: Settings,
) -> Dataset:
    """See the module docstring. Returns the dataset, ready with its noisy row count."""
    _checked(new, colluding, len(members))
    terms = check_terms(new)
    assert new.columns is not None and terms.count_mu is not None
    domain = resolve_domain(new.domain, len(new.columns))
    session.commit()  # no transaction is held while the members are called
    seats = _seats(members, list(new.columns), settings)
    dataset = dataset_row(
        uuid.uuid4(), owner, new, terms, domain,
        n_rows=None, n_rows_dp=None, n_cols=len(new.columns), columns=list(new.columns),
        storage_path=None, status=DatasetStatus.READY, kind=DatasetKind.FEDERATED,
        federation=_public_terms(members, seats, colluding),
    )  # fmt: skip
    publics = tuple(str(s["public_key"]) for s in seats)
    federation = Federation(str(dataset.id), tuple(members), publics, colluding)
    job = FederatedJob(
        federation, COUNT_JOB, "count", terms.count_mu, "float64", public_domain(dataset), settings
    )
    try:
        return _count(session, owner, dataset, job, members)
    finally:
        job.close()


def _public_terms(members: list[MemberAddress], seats: list[dict], colluding: int) -> dict:
    return {
        "colluding": colluding,
        "members": [
            {
                "url": m.url,
                "dataset_id": m.dataset_id,
                "public_key": s["public_key"],
                "fingerprint": s["fingerprint"],
            }
            for m, s in zip(members, seats, strict=True)
        ],
    }


def _count(
    session: Session,
    owner: ApiKey,
    dataset: Dataset,
    job: FederatedJob,
    members: list[MemberAddress],
) -> Dataset:
    """Join every member, record and charge, then release the count."""
    try:
        job.join()
    except MemberError as exc:
        raise refused(exc, "the federated row count") from exc
    try:
        kit_repo.add(session, dataset)
        session.flush()
        for member in members:
            coordinator_repo.add_member_key(session, dataset.id, member.position, member.key)
        ledger.open_dataset_budget(session, dataset, owner.id)
        session.commit()
    except BaseException:
        session.rollback()
        job.finish(succeeded=False)
        raise
    assert dataset.count_mu is not None
    noise = Gaussian(1.0, count_sigma(dataset.count_mu))
    try:
        (released,) = job.release(RowCount(), [noise])
    except MemberError as exc:
        job.finish(succeeded=False)
        dataset.status = DatasetStatus.FAILED
        dataset.failure_reason = (
            f"{exc.member.name} failed while the row count was released; its budget stays charged"
        )
        session.commit()
        raise MemberFailed(dataset.failure_reason, dataset_id=str(dataset.id)) from exc
    dataset.n_rows_dp = max(int(released[0]), 0)  # floored at 0, as an upload's (post-processing)
    session.commit()
    job.finish(succeeded=True)
    return dataset


def member_view(dataset: Dataset) -> list[dict[str, Any]] | None:
    """A federated dataset's members as the API shows them (never their keys)."""
    if dataset.federation is None:
        return None
    return [
        {
            "position": i,
            "url": m["url"],
            "dataset_id": m["dataset_id"],
            "fingerprint": m["fingerprint"],
        }
        for i, m in enumerate(dataset.federation["members"])
    ]
