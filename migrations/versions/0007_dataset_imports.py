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

import sqlalchemy as sa
from alembic import op

from migrations import steps

revision: str = "0007"
down_revision: str | None = "0006"

STEPS = (
    steps.alter(
        "datasets",
        *steps.columns(
            sa.Column("status", sa.String(length=16), nullable=False, server_default="ready"),
            sa.Column("source", sa.String(length=2000), nullable=True),
            sa.Column("progress", sa.Float(), nullable=True),
            sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
            sa.Column("failure_reason", sa.Text(), nullable=True),
        ),
        steps.MakeNullable("n_rows", sa.Integer()),
        steps.MakeNullable("n_rows_dp", sa.Integer()),
    ),
)


def upgrade() -> None:
    steps.apply(STEPS)


def downgrade() -> None:
    uncounted = op.get_bind().scalar(
        sa.text("SELECT count(*) FROM datasets WHERE n_rows IS NULL OR n_rows_dp IS NULL")
    )
    if uncounted:
        raise RuntimeError(
            f"{uncounted} datasets have no row count (imports that did not finish); "
            "delete them before downgrading below 0007"
        )
    steps.revert(STEPS)
