"""jobs: private summaries (sizes, loss); sweeps over k

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24 06:54:34.818141

Jobs gain an opt-in `summaries` flag (existing jobs: false), the part of their mu spent on the
summaries, the released noisy sizes, loss and its standard error, and `sweep_id`: the sweep
that admitted them, if any. A sweep row records what one admission of several jobs asked for.
"""

import sqlalchemy as sa
from alembic import op

from migrations import steps

revision: str = "0003"
down_revision: str | None = "0002"

# `summaries` is added nullable, backfilled (no earlier job had summaries), then NOT NULL.
JOBS = steps.alter(
    "jobs",
    *steps.columns(
        sa.Column("summaries", sa.Boolean(), nullable=True),
        sa.Column("summary_mu", sa.Float(), nullable=True),
        sa.Column("sizes", sa.JSON(), nullable=True),
        sa.Column("loss", sa.Float(), nullable=True),
        sa.Column("loss_se", sa.Float(), nullable=True),
        sa.Column("sweep_id", sa.Uuid(), nullable=True),
    ),
    steps.AddIndex(steps.f("ix_jobs_sweep_id"), ["sweep_id"]),
    steps.AddForeignKey(steps.f("fk_jobs_sweep_id_sweeps"), "sweeps", ["sweep_id"], ["id"]),
)
STEPS = (
    steps.table(
        "sweeps",
        *steps.request_columns(),
        sa.Column("ks", sa.JSON(), nullable=False),
        sa.Column("algorithm", sa.String(length=20), nullable=False),
        *steps.cost_columns(),
        sa.Column("job_mu", sa.Float(), nullable=False),
        *steps.submission_columns(),
        steps.references("sweeps", "dataset_id", "datasets"),
        steps.primary_key("sweeps", "id"),
        steps.idempotent("sweeps"),
        indexes=[
            steps.AddIndex(steps.f("ix_sweeps_dataset_id"), ["dataset_id"]),
            steps.AddIndex(steps.f("ix_sweeps_tenant"), ["tenant"]),
        ],
    ),
    JOBS,
    steps.alter(
        "ledger_entries",
        steps.AddColumn(sa.Column("sweep_id", sa.Uuid(), nullable=True)),
        steps.AddIndex(steps.f("ix_ledger_entries_sweep_id"), ["sweep_id"]),
    ),
)


def upgrade() -> None:
    steps.apply(STEPS)
    jobs = steps.view("jobs", "summaries")
    op.execute(jobs.update().values(summaries=sa.false()))
    JOBS.require("summaries")


def downgrade() -> None:
    steps.revert(STEPS)
