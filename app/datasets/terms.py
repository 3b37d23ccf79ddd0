"""What an owner asks for when creating a dataset (by upload or by import), and its checks.

Everything here is settled before a byte of the rows is read: the name, the budget's cap, the
cost of the noisy row count and the domain's shape. A request that fails them changes nothing.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from typing import Any

from app.datasets.domain import DomainSpec, ResolvedDomain, check_domain_shape
from app.datasets.table_terms import (
    check_count_per_unit,
    check_table_domain,
    check_table_spec,
    stored_spec,
)
from app.kit.errors import InvalidParameter
from app.ledger import service as ledger
from app.models import ApiKey, Dataset
from privclust.privacy import noise
from privclust.tabular import TableSpec


@dataclass(frozen=True)
class NewDataset:
    """What an owner asks for with an upload or an import (the rows aside), not yet checked."""

    name: str
    epsilon: float
    delta: float
    domain: DomainSpec
    columns: list[str] | None = None
    count_mu: float | None = None
    count_public: bool = False
    # The privacy unit, missing values and categories (app.datasets.table_terms).
    table: TableSpec = field(default_factory=TableSpec)


@dataclass(frozen=True)
class Terms:
    """What a new dataset's parameters settle before its rows are read."""

    name: str
    mu_cap: float
    count_mu: float | None


def check_terms(new: NewDataset) -> Terms:
    """The name, the cap and the count's cost, checked before anything is stored."""
    name = new.name.strip()
    if not name or len(name) > 200:
        raise InvalidParameter("name must be 1 to 200 characters", field="name")
    mu_cap = ledger.check_cap(new.epsilon, new.delta)
    count_cost = check_count_options(new.count_mu, new.count_public, mu_cap)
    # The budget the new dataset would show, before a byte is stored: a cap the budget
    # arithmetic cannot represent is refused here, not after the dataset exists.
    opening = ledger.LedgerState(
        mu_cap=mu_cap, dataset_releases=[] if count_cost is None else [count_cost]
    )
    ledger.representable_view(new.epsilon, new.delta, opening)
    check_domain_shape(new.domain)
    check_table_spec(new.table)
    check_table_domain(new.table, new.domain)
    check_count_per_unit(count_cost, new.table)
    return Terms(name=name, mu_cap=mu_cap, count_mu=count_cost)


def check_count_options(count_mu: float | None, count_public: bool, mu_cap: float) -> float | None:
    """The GDP cost of the noisy row count: None when the owner declared N public.

    Default: `noise.default_count_mu(mu_cap)`. An owner's `count_mu` must be finite, > 0 and
    strictly below mu_cap (422 `invalid-parameter` naming `count_mu`).
    """
    if count_public:
        if count_mu is not None:
            raise InvalidParameter(
                "count_mu is the cost of the noisy row count; with count_public=true no count is "
                "released, so give one or the other",
                field="count_mu",
            )
        return None
    if count_mu is None:
        chosen, field = noise.default_count_mu(mu_cap), "epsilon"
    else:
        if not math.isfinite(count_mu) or count_mu <= 0.0:
            raise InvalidParameter("count_mu must be a finite number > 0", field="count_mu")
        if count_mu >= mu_cap:
            raise InvalidParameter(
                f"count_mu must be below the dataset's mu_cap ({mu_cap:.6g}), or nothing would "
                "be left for jobs",
                field="count_mu",
            )
        chosen, field = float(count_mu), "count_mu"
    if chosen < 1.0 / noise.MAX_NOISE_STD:
        raise InvalidParameter(
            f"the row count's cost (count_mu={chosen:.3g}) is too small to release: its noise "
            f"would exceed {noise.MAX_NOISE_STD:g}",
            field=field,
        )
    return chosen


def dataset_row(
    dataset_id: uuid.UUID,
    owner: ApiKey,
    new: NewDataset,
    terms: Terms,
    domain: ResolvedDomain,
    **rows: Any,
) -> Dataset:
    """A new dataset's row as the request set it (its owner, terms and declared domain), with
    what its `rows` are (an upload's stored matrix and count; an import's source, not yet
    read)."""
    return Dataset(
        id=dataset_id,
        tenant=owner.tenant,
        name=terms.name,
        count_public=new.count_public,
        count_mu=terms.count_mu,
        center=domain.center,
        radius=domain.radius,
        domain_kind=domain.kind,
        lower=domain.lower,
        upper=domain.upper,
        epsilon=new.epsilon,
        delta=new.delta,
        mu_cap=terms.mu_cap,
        created_by=owner.id,
        table_spec=stored_spec(new.table),
        **rows,
    )
