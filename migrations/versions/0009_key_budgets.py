"""budgets: a cap per API key, and a pace per period for datasets and key caps

Revision ID: 0009_key_budgets
Revises: 0008_ledger_chain
Create Date: 2026-12-02 01:00:00.000000

`key_budgets` holds the owner's cap on what one key may spend of one dataset (as given: epsilon
and delta, or mu alone; and mu_cap), the key's running spend (exact sums of squares of its
jobs' spent and reserved mu, and its job count) and an optional pace. A row exists only while
a cap is set; the service fills its spend from a replay of the key's ledger entries when the
cap is set, so nothing is backfilled here. `dataset_budgets` gains the dataset's optional pace:
its period (`day`, `week`, `month`, in UTC), its mu, the start of the current period and the
exact sum of squares admitted in it (zero for every existing dataset: no pace yet). The
downgrade drops both (the ledger is untouched either way).
"""

import sqlalchemy as sa

from migrations import steps

revision: str = "0009_key_budgets"
down_revision: str | None = "0008_ledger_chain"


def _pace_columns() -> list[sa.Column]:
    return [
        sa.Column("pace_period", sa.String(length=8), nullable=True),
        sa.Column("pace_mu", sa.Float(), nullable=True),
        sa.Column("pace_start", sa.DateTime(timezone=True), nullable=True),
        sa.Column("pace_used_sq", sa.Text(), nullable=False, server_default="0/1"),
    ]


STEPS = (
    steps.table(
        "key_budgets",
        sa.Column("dataset_id", sa.Uuid(), nullable=False),
        sa.Column("key_id", sa.Uuid(), nullable=False),
        sa.Column("epsilon", sa.Float(), nullable=True),
        sa.Column("delta", sa.Float(), nullable=True),
        *steps.running_budget_columns(),
        *_pace_columns(),
        sa.Column("updated_by", sa.Uuid(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        steps.references("key_budgets", "dataset_id", "datasets"),
        steps.references("key_budgets", "key_id", "api_keys"),
        steps.primary_key("key_budgets", "dataset_id", "key_id"),
    ),
    steps.alter("dataset_budgets", *steps.columns(*_pace_columns())),
)

upgrade, downgrade = steps.migration(STEPS)
