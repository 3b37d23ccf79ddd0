"""A federated job's end, told to the members of its dataset (best effort).

Each member reserved the job's mu on its own ledger when the job was admitted. When the job
ends without the worker telling them (cancelled while queued, swept after its worker died,
its process lost), the coordinator tells every member the job failed: a member that answered
no release refunds its reservation, one that answered keeps its charge (app.federation.member,
`finish`). A member the coordinator cannot reach ends the job on its own after
PRIVCLUST_FEDERATION_RESERVATION_SECONDS with no release (app.federation.expiry).
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy.orm import Session

from app.coordinator.client import MemberError
from app.coordinator.terms import is_federated, job_calls
from app.jobs import repository as repo
from app.kit.config import get_settings
from app.models import Dataset, Job

log = logging.getLogger("privclust.api")


def tell_members_failed(session: Session, job: Job, what: str) -> None:
    """Tell every member of `job`'s federated dataset that the job ended unsuccessfully
    (nothing for a dataset of this server's own rows). Commits the caller's transaction first:
    none is held while the members answer. `what` names the end in the log."""
    dataset = session.get(Dataset, job.dataset_id)
    if dataset is None or not is_federated(dataset):
        return
    calls = job_calls(session, dataset, str(job.id), job.algorithm, job.mu)(get_settings())
    session.commit()
    try:
        calls.join()  # joined at admission: this gives each member's job back
        calls.finish(succeeded=False)
    except MemberError as exc:  # it ends the job on its own (its reservation's expiry)
        log.warning("job %s: could not tell %s that it %s", job.id, exc.member.name, what)
    finally:
        calls.close()
    # The releases each member answered while the job ran stay as its worker recorded them.
    before = {int(m["position"]): int(m["releases"]) for m in job.member_states or []}
    states = [
        m | {"releases": max(m["releases"], before.get(m["position"], 0))} for m in calls.states()
    ]
    record_members(session, job, states)


def record_members(session: Session, job: Job, states: list[dict[str, Any]]) -> None:
    """Record `job`'s members' states (public facts) in a transaction of its own."""
    repo.set_member_states(session, job.id, states)
    session.commit()
