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

import sqlalchemy as sa

from migrations import steps

revision: str = "0012_federated_jobs"
down_revision: str | None = "0011_table_terms"

STEPS = (
    steps.alter(
        "datasets",
        *steps.columns(
            sa.Column("kind", sa.String(length=16), server_default="stored", nullable=False),
            sa.Column("federation", sa.JSON(), nullable=True),
        ),
    ),
    steps.table(
        "federation_member_keys",
        sa.Column("dataset_id", sa.Uuid(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        steps.references("federation_member_keys", "dataset_id", "datasets"),
        steps.primary_key("federation_member_keys", "dataset_id", "position"),
    ),
    steps.table(
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
        steps.references("member_jobs", "key_id", "api_keys"),
        steps.references("member_jobs", "dataset_id", "datasets"),
        steps.primary_key("member_jobs", "id"),
        sa.UniqueConstraint("key_id", "federation", "job", name="uq_member_jobs"),
        indexes=[
            steps.AddIndex(steps.f("ix_member_jobs_key_id"), ["key_id"]),
            steps.AddIndex(steps.f("ix_member_jobs_dataset_id"), ["dataset_id"]),
        ],
    ),
    steps.table(
        "member_answers",
        sa.Column("member_job_id", sa.Uuid(), nullable=False),
        sa.Column("release", sa.Integer(), nullable=False),
        sa.Column("request_digest", sa.String(length=64), nullable=False),
        sa.Column("attempt", sa.String(length=32), nullable=False),
        sa.Column("words", sa.LargeBinary(), nullable=False),
        sa.Column("mu_sq", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        steps.references("member_answers", "member_job_id", "member_jobs"),
        steps.primary_key("member_answers", "member_job_id", "release"),
    ),
)

upgrade, downgrade = steps.migration(STEPS)
