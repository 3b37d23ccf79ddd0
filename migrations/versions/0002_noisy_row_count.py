"""datasets: the noisy row count n_rows_dp, count_public and count_mu

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23 07:00:00.000000

Datasets uploaded before this revision showed their exact row count to analysts, so that count
is already published: they are backfilled as `count_public = true` with `n_rows_dp = n_rows`
(and no count release, so `count_mu` stays null). From then on their jobs use the replace-one
relation, the one under which a published N is consistent with the guarantee.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Added nullable, backfilled, then made NOT NULL: existing rows have no value to default to.
    with op.batch_alter_table("datasets", schema=None) as batch_op:
        batch_op.add_column(sa.Column("n_rows_dp", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("count_public", sa.Boolean(), nullable=True))
        batch_op.add_column(sa.Column("count_mu", sa.Float(), nullable=True))

    datasets = sa.table(
        "datasets",
        sa.column("n_rows", sa.Integer()),
        sa.column("n_rows_dp", sa.Integer()),
        sa.column("count_public", sa.Boolean()),
    )
    op.execute(datasets.update().values(n_rows_dp=datasets.c.n_rows, count_public=sa.true()))

    with op.batch_alter_table("datasets", schema=None) as batch_op:
        batch_op.alter_column("n_rows_dp", existing_type=sa.Integer(), nullable=False)
        batch_op.alter_column("count_public", existing_type=sa.Boolean(), nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("datasets", schema=None) as batch_op:
        batch_op.drop_column("count_mu")
        batch_op.drop_column("count_public")
        batch_op.drop_column("n_rows_dp")
