"""datasets: imports by reference, with a status, progress and failure reason

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-28 23:30:00.000000

A dataset may now be imported from Parquet by reference (`POST /v1/datasets` with `source`): a
worker copies the rows into the service's storage and only then releases the noisy row count.
Until then the dataset is `importing`, with no row count yet, so `n_rows` and `n_rows_dp`
become nullable; `status` (`importing`, `ready`, `failed`), `source`, `progress`,
`heartbeat_at` and `failure_reason` record the import. Every existing dataset was uploaded
whole, so it becomes `ready` (the server default) with its counts as they were. The downgrade
drops the new columns; it refuses while a dataset has no row count (an import that has not
finished, or failed before it counted its rows): delete those first.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.add_column(
            sa.Column("status", sa.String(length=16), nullable=False, server_default="ready")
        )
        batch.add_column(sa.Column("source", sa.String(length=2000), nullable=True))
        batch.add_column(sa.Column("progress", sa.Float(), nullable=True))
        batch.add_column(sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("failure_reason", sa.Text(), nullable=True))
        batch.alter_column("n_rows", existing_type=sa.Integer(), nullable=True)
        batch.alter_column("n_rows_dp", existing_type=sa.Integer(), nullable=True)


def downgrade() -> None:
    uncounted = op.get_bind().scalar(
        sa.text("SELECT count(*) FROM datasets WHERE n_rows IS NULL OR n_rows_dp IS NULL")
    )
    if uncounted:
        raise RuntimeError(
            f"{uncounted} datasets have no row count (imports that did not finish); "
            "delete them before downgrading below 0007"
        )
    with op.batch_alter_table("datasets") as batch:
        batch.alter_column("n_rows_dp", existing_type=sa.Integer(), nullable=False)
        batch.alter_column("n_rows", existing_type=sa.Integer(), nullable=False)
        batch.drop_column("failure_reason")
        batch.drop_column("heartbeat_at")
        batch.drop_column("progress")
        batch.drop_column("source")
        batch.drop_column("status")
