"""The member's side of a federation: what a coordinator may learn of the seat a member key
holds (docs/threat-model.md).

A coordinator that was given a member key checks, before it admits the member into a federated
dataset, that the member is reachable, that its dataset is ready with the federation's domain
and columns, and which X25519 public key it masks with (`seat`). It learns only public
metadata: the dataset as an analyst sees it, never its rows or its exact row count.
"""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy.orm import Session

from app.datasets import service as datasets_service
from app.federation import repository as repo
from app.kit.errors import Conflict
from app.models import ApiKey
from privclust.federation.keys import fingerprint


class Seat(NamedTuple):
    """A member key's dataset (with its budget) and its public key."""

    dataset: datasets_service.DatasetView
    public_key: bytes

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.public_key)


def seat(session: Session, key: ApiKey) -> Seat:
    """The calling member key's seat. Conflict when the dataset's rows were deleted or it is
    not ready: the federation cannot use it."""
    assert key.dataset_id is not None  # a member key always names its dataset
    view = datasets_service.view_dataset(session, key.dataset_id, key.tenant)
    if view.dataset.deleted_at is not None:
        raise Conflict("the member's dataset has been deleted", code="dataset-deleted")
    datasets_service.require_ready(view.dataset)
    row = repo.seat_of(session, key.id)
    if row is None:
        raise RuntimeError(f"member key {key.id} has no seat")
    return Seat(view, bytes(row.public_key))
