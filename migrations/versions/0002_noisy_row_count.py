"""datasets: the noisy row count n_rows_dp, count_public and count_mu

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23 07:00:00.000000

Datasets uploaded before this revision showed their exact row count to analysts, so that count
is already published: they are backfilled as `count_public = true` with `n_rows_dp = n_rows`
(and no count release, so `count_mu` stays null). From then on their jobs use the replace-one
relation, the one under which a published N is consistent with the guarantee.
"""

import sqlalchemy as sa
from alembic import op

from migrations import steps

revision: str = "0002"
down_revision: str | None = "0001"

# Added nullable, backfilled, then made NOT NULL: existing rows have no value to default to.
ADDED = steps.alter(
    "datasets",
    *steps.columns(
        sa.Column("n_rows_dp", sa.Integer(), nullable=True),
        sa.Column("count_public", sa.Boolean(), nullable=True),
        sa.Column("count_mu", sa.Float(), nullable=True),
    ),
)


def upgrade() -> None:
    ADDED.apply()
    datasets = steps.view("datasets", "n_rows", "n_rows_dp", "count_public")
    op.execute(datasets.update().values(n_rows_dp=datasets.c.n_rows, count_public=sa.true()))
    ADDED.require("n_rows_dp", "count_public")


def downgrade() -> None:
    ADDED.revert()
