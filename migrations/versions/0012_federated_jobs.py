"""federated jobs: a member's joined jobs and answers; a coordinator's federated datasets

Revision ID: 0012_federated_jobs
Revises: 0011_table_terms
Create Date: 2026-12-02 04:30:00.000000

`member_jobs` holds each federated job a member key joined (its public plan, the mu its own
ledger charged, the mu^2 answered so far); `member_answers` the masked words answered for each
release, so that a repeated request gets the same words back. `datasets` gains `kind` (every
existing dataset is "stored") and `federation` (a federated dataset's public terms), and
`federation_member_keys` holds the keys a coordinator calls its members with. The downgrade
drops them (federated datasets must be deleted first: the older code cannot read them).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012_federated_jobs"
down_revision: str | None = "0011_table_terms"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.add_column(
            sa.Column("kind", sa.String(length=16), server_default="stored", nullable=False)
        )
        batch.add_column(sa.Column("federation", sa.JSON(), nullable=True))
    op.create_table(
        "federation_member_keys",
        sa.Column("dataset_id", sa.Uuid(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["datasets.id"], name=op.f("fk_federation_member_keys_dataset_id_datasets")
        ),
        sa.PrimaryKeyConstraint("dataset_id", "position", name=op.f("pk_federation_member_keys")),
    )
    op.create_table(
        "member_jobs",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("key_id", sa.Uuid(), nullable=False),
        sa.Column("dataset_id", sa.Uuid(), nullable=False),
        sa.Column("federation", sa.String(length=100), nullable=False),
        sa.Column("job", sa.String(length=100), nullable=False),
        sa.Column("plan", sa.JSON(), nullable=False),
        sa.Column("mu", sa.Float(), nullable=False),
        sa.Column("answered_sq", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["key_id"], ["api_keys.id"], name=op.f("fk_member_jobs_key_id_api_keys")
        ),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["datasets.id"], name=op.f("fk_member_jobs_dataset_id_datasets")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_member_jobs")),
        sa.UniqueConstraint("key_id", "federation", "job", name="uq_member_jobs"),
    )
    op.create_index(op.f("ix_member_jobs_key_id"), "member_jobs", ["key_id"])
    op.create_index(op.f("ix_member_jobs_dataset_id"), "member_jobs", ["dataset_id"])
    op.create_table(
        "member_answers",
        sa.Column("member_job_id", sa.Uuid(), nullable=False),
        sa.Column("release", sa.Integer(), nullable=False),
        sa.Column("request_digest", sa.String(length=64), nullable=False),
        sa.Column("attempt", sa.String(length=32), nullable=False),
        sa.Column("words", sa.LargeBinary(), nullable=False),
        sa.Column("mu_sq", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["member_job_id"],
            ["member_jobs.id"],
            name=op.f("fk_member_answers_member_job_id_member_jobs"),
        ),
        sa.PrimaryKeyConstraint("member_job_id", "release", name=op.f("pk_member_answers")),
    )


def downgrade() -> None:
    op.drop_table("member_answers")
    op.drop_index(op.f("ix_member_jobs_dataset_id"), table_name="member_jobs")
    op.drop_index(op.f("ix_member_jobs_key_id"), table_name="member_jobs")
    op.drop_table("member_jobs")
    op.drop_table("federation_member_keys")
    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("federation")
        batch.drop_column("kind")
