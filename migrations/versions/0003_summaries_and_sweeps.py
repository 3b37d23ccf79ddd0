"""jobs: private summaries (sizes, loss); sweeps over k

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24 06:54:34.818141

Jobs gain an opt-in `summaries` flag (existing jobs: false), the part of their mu spent on the
summaries, the released noisy sizes, loss and its standard error, and `sweep_id`: the sweep
that admitted them, if any. A sweep row records what one admission of several jobs asked for.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "sweeps",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("dataset_id", sa.Uuid(), nullable=False),
        sa.Column("tenant", sa.String(length=100), nullable=False),
        sa.Column("ks", sa.JSON(), nullable=False),
        sa.Column("algorithm", sa.String(length=20), nullable=False),
        sa.Column("mu", sa.Float(), nullable=False),
        sa.Column("epsilon", sa.Float(), nullable=False),
        sa.Column("delta", sa.Float(), nullable=False),
        sa.Column("job_mu", sa.Float(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=200), nullable=True),
        sa.Column("request_fingerprint", sa.String(length=64), nullable=True),
        sa.Column("created_by", sa.Uuid(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["datasets.id"], name=op.f("fk_sweeps_dataset_id_datasets")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sweeps")),
        sa.UniqueConstraint("tenant", "idempotency_key", name="uq_sweeps_tenant_idempotency_key"),
    )
    with op.batch_alter_table("sweeps", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_sweeps_dataset_id"), ["dataset_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_sweeps_tenant"), ["tenant"], unique=False)

    # `summaries` is added nullable, backfilled (no earlier job had summaries), then NOT NULL.
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("summaries", sa.Boolean(), nullable=True))
        batch_op.add_column(sa.Column("summary_mu", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("sizes", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("loss", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("loss_se", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("sweep_id", sa.Uuid(), nullable=True))
        batch_op.create_index(batch_op.f("ix_jobs_sweep_id"), ["sweep_id"], unique=False)
        batch_op.create_foreign_key(
            batch_op.f("fk_jobs_sweep_id_sweeps"), "sweeps", ["sweep_id"], ["id"]
        )
    with op.batch_alter_table("ledger_entries", schema=None) as batch_op:
        batch_op.add_column(sa.Column("sweep_id", sa.Uuid(), nullable=True))
        batch_op.create_index(batch_op.f("ix_ledger_entries_sweep_id"), ["sweep_id"], unique=False)
    jobs = sa.table("jobs", sa.column("summaries", sa.Boolean()))
    op.execute(jobs.update().values(summaries=sa.false()))
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.alter_column("summaries", existing_type=sa.Boolean(), nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("ledger_entries", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_ledger_entries_sweep_id"))
        batch_op.drop_column("sweep_id")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("fk_jobs_sweep_id_sweeps"), type_="foreignkey")
        batch_op.drop_index(batch_op.f("ix_jobs_sweep_id"))
        batch_op.drop_column("sweep_id")
        batch_op.drop_column("loss_se")
        batch_op.drop_column("loss")
        batch_op.drop_column("sizes")
        batch_op.drop_column("summary_mu")
        batch_op.drop_column("summaries")

    with op.batch_alter_table("sweeps", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_sweeps_tenant"))
        batch_op.drop_index(batch_op.f("ix_sweeps_dataset_id"))

    op.drop_table("sweeps")
