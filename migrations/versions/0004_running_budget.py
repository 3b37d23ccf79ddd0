"""ledger: each dataset's running budget, kept in step with its ledger

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25 09:00:00.000000

Every budget read used to replay the dataset's whole ledger. `dataset_budgets` holds that
replay's result per dataset (the cap, the exact sums of squares of spent and reserved mu as
"numerator/denominator", the job count), and from this revision on the ledger service moves it
in the same transaction as each entry. The upgrade backfills it from a replay of each dataset's
ledger, written out here as it stands at this revision (app.ledger.state.replay), so that the
migration does not change if that code does; `privclust ledger verify` compares the two.
Jobs gain indexes on (tenant, status) and (created_by, status): the operator's caps on queued
jobs count only those rows. The downgrade drops the table and the indexes (the ledger itself is
untouched either way).
"""

from collections.abc import Sequence
from datetime import UTC, datetime
from fractions import Fraction

import sqlalchemy as sa
from alembic import op

from migrations import steps

revision: str = "0004"
down_revision: str | None = "0003"

ledger = steps.view("ledger_entries", "id", "dataset_id", "kind", "job_id", "mu")
datasets = steps.view("datasets", "id")
budgets = steps.view(
    "dataset_budgets", "dataset_id", "mu_cap", "spent_sq", "reserved_sq", "jobs", "updated_at"
)


def _square(mu: float) -> Fraction:
    value = float(mu)
    if value != value or value in (float("inf"), float("-inf")) or value < 0:
        raise ValueError(f"a ledger entry holds mu={mu!r}: fix it before migrating")
    return Fraction(value) ** 2


def _replay(rows: Sequence[sa.Row]) -> dict:
    """The running budget of one dataset's entries, folded as the ledger's replay does."""
    cap = 0.0
    releases = Fraction(0)
    spent: dict = {}
    reserved: dict = {}
    jobs = 0
    for kind, job_id, mu in rows:
        if kind == "cap" and mu is not None:
            cap = float(mu)
        elif kind == "count" and mu is not None:
            releases += _square(mu)
        elif job_id is None:
            continue
        elif kind == "reserve" and mu is not None:
            reserved[job_id] = _square(mu)
            jobs += 1
        elif kind == "commit" and job_id in reserved:
            spent[job_id] = reserved.pop(job_id)
        elif kind == "refund":
            reserved.pop(job_id, None)
    spent_sq = releases + sum(spent.values(), Fraction(0))
    reserved_sq = sum(reserved.values(), Fraction(0))
    return {
        "mu_cap": cap,
        "spent_sq": f"{spent_sq.numerator}/{spent_sq.denominator}",
        "reserved_sq": f"{reserved_sq.numerator}/{reserved_sq.denominator}",
        "jobs": jobs,
    }


STEPS = (
    steps.table(
        "dataset_budgets",
        sa.Column("dataset_id", sa.Uuid(), nullable=False),
        *steps.running_budget_columns(),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        steps.references("dataset_budgets", "dataset_id", "datasets"),
        steps.primary_key("dataset_budgets", "dataset_id"),
    ),
    steps.alter(
        "jobs",
        steps.AddIndex("ix_jobs_tenant_status", ["tenant", "status"]),
        steps.AddIndex("ix_jobs_created_by_status", ["created_by", "status"]),
    ),
)


def upgrade() -> None:
    steps.apply(STEPS)
    conn = op.get_bind()
    now = datetime.now(UTC)
    for (dataset_id,) in conn.execute(sa.select(datasets.c.id)).all():
        rows = conn.execute(
            sa.select(ledger.c.kind, ledger.c.job_id, ledger.c.mu)
            .where(ledger.c.dataset_id == dataset_id)
            .order_by(ledger.c.id)
        ).all()
        conn.execute(
            budgets.insert().values(dataset_id=dataset_id, updated_at=now, **_replay(rows))
        )


def downgrade() -> None:
    steps.revert(STEPS)
