"""What every member of a federation must share, and a federated dataset's federation."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from app.coordinator import repository as repo
from app.coordinator.client import MemberAddress, MemberError
from app.coordinator.service import FederatedJob, Federation
from app.kit.config import Settings
from app.kit.errors import InvalidParameter, PrivclustError
from app.models import Dataset, DatasetKind
from privclust.clustering import Algorithm
from privclust.clustering.registry import METHODS


def public_domain(dataset: Dataset) -> dict[str, Any]:
    """The declared terms a federation's members must share with it (all public): the
    columns, the domain and the table terms."""
    return {
        "columns": list(dataset.columns),
        "domain_kind": dataset.domain_kind,
        "radius": float(dataset.radius),
        "center": [float(v) for v in dataset.center],
        "lower": None if dataset.lower is None else [float(v) for v in dataset.lower],
        "upper": None if dataset.upper is None else [float(v) for v in dataset.upper],
        "table_spec": dataset.table_spec,
    }


def is_federated(dataset: Dataset) -> bool:
    return dataset.kind == DatasetKind.FEDERATED


def federation_of(session: Session, dataset: Dataset) -> Federation:
    """A federated dataset's federation: its members (with the keys it calls them with) in
    public order, their public keys and c."""
    terms = dataset.federation
    assert terms is not None and is_federated(dataset)
    keys = repo.member_keys(session, dataset.id)
    members = tuple(
        MemberAddress(position=i, url=m["url"], dataset_id=m["dataset_id"], key=keys[i])
        for i, m in enumerate(terms["members"])
    )
    publics = tuple(str(m["public_key"]) for m in terms["members"])
    return Federation(str(dataset.id), members, publics, int(terms["colluding"]))


class MemberRefused(PrivclustError, status=409, code="member-refused", title="Member refused"):
    """A member of the federation refused (no room in its budget, a different domain, a key it
    does not know) or could not be reached: nothing was charged anywhere."""


class MemberFailed(PrivclustError, status=502, code="member-failed", title="Member failed"):
    """A member failed after the charge: what was charged stays charged."""


def refused(exc: MemberError, what: str) -> MemberRefused:
    """The problem that names the member that refused (its own status when it answered 409 or
    422; 422 when it could not be reached or answered something else)."""
    status = exc.status if exc.status in (409, 422) else 422
    return MemberRefused(
        f"{exc.member.name} refused {what}: {exc.detail}; nothing was charged",
        status=status,
        member=exc.member.position,
        member_url=exc.member.url,
        member_code=exc.code,
    )


# The methods a federated dataset runs: each release of theirs is a pass the members answer.
FEDERATED_METHODS = (Algorithm.FASTLLOYD, Algorithm.PE_MEANS, Algorithm.PE_LLOYD)


def check_federated_plan(algorithm: str, projected: bool, summaries: bool) -> None:
    """422 naming what a federated dataset cannot run yet (nothing charged)."""
    if algorithm not in FEDERATED_METHODS:
        names = ", ".join(m.value for m in FEDERATED_METHODS)
        raise InvalidParameter(
            f"{algorithm} does not run on a federated dataset yet (it runs {names} and auto)",
            field="algorithm",
        )
    if projected:
        raise InvalidParameter(
            f"{algorithm} in a projection (more than 16 columns) does not run on a federated "
            "dataset yet",
            field="algorithm",
        )
    if summaries:
        raise InvalidParameter(
            "private summaries do not run on a federated dataset yet", field="summaries"
        )


def job_calls(
    session: Session, dataset: Dataset, job: str, algorithm: str, mu: float
) -> Callable[[Settings], FederatedJob]:
    """The calls of one job of a federated dataset to its members (not yet joined), made with
    the settings of the process that runs them; read now, in the caller's transaction."""
    dtype = np.dtype(METHODS[Algorithm(algorithm)].rows_dtype).name
    return partial(
        FederatedJob, federation_of(session, dataset), job, algorithm, mu, dtype,
        public_domain(dataset),
    )  # fmt: skip
