"""initial schema: api keys, datasets, jobs, ledger

Revision ID: 0001
Revises:
Create Date: 2026-11-21 03:11:03.345716
"""

import sqlalchemy as sa

from migrations import steps

revision: str = "0001"
down_revision: str | None = None

STEPS = (
    steps.table(
        "api_keys",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant", sa.String(length=100), nullable=False),
        sa.Column("role", sa.String(length=20), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        steps.primary_key("api_keys", "id"),
        sa.UniqueConstraint("key_hash", name=steps.f("uq_api_keys_key_hash")),
        indexes=[steps.AddIndex(steps.f("ix_api_keys_tenant"), ["tenant"])],
    ),
    steps.table(
        "datasets",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant", sa.String(length=100), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("n_rows", sa.Integer(), nullable=False),
        sa.Column("n_cols", sa.Integer(), nullable=False),
        sa.Column("columns", sa.JSON(), nullable=False),
        sa.Column("center", sa.JSON(), nullable=False),
        sa.Column("radius", sa.Float(), nullable=False),
        sa.Column("epsilon", sa.Float(), nullable=False),
        sa.Column("delta", sa.Float(), nullable=False),
        sa.Column("mu_cap", sa.Float(), nullable=False),
        sa.Column("storage_path", sa.String(length=1000), nullable=True),
        sa.Column("created_by", sa.Uuid(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        steps.primary_key("datasets", "id"),
        indexes=[steps.AddIndex(steps.f("ix_datasets_tenant"), ["tenant"])],
    ),
    steps.table(
        "jobs",
        *steps.request_columns(),
        sa.Column("algorithm", sa.String(length=20), nullable=False),
        sa.Column("k", sa.Integer(), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        *steps.cost_columns(),
        sa.Column("sigma", sa.Float(), nullable=False),
        sa.Column("releases", sa.Integer(), nullable=False),
        sa.Column("iterations", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("progress_iteration", sa.Integer(), nullable=False),
        sa.Column("progress_total", sa.Integer(), nullable=False),
        sa.Column("centers", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        *steps.submission_columns(),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        steps.references("jobs", "dataset_id", "datasets"),
        steps.primary_key("jobs", "id"),
        steps.idempotent("jobs"),
        indexes=[
            steps.AddIndex(steps.f("ix_jobs_dataset_id"), ["dataset_id"]),
            steps.AddIndex("ix_jobs_status_heartbeat", ["status", "heartbeat_at"]),
            steps.AddIndex(steps.f("ix_jobs_tenant"), ["tenant"]),
        ],
    ),
    steps.table(
        "ledger_entries",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("dataset_id", sa.Uuid(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("job_id", sa.Uuid(), nullable=True),
        sa.Column("actor_key_id", sa.Uuid(), nullable=True),
        sa.Column("mu", sa.Float(), nullable=True),
        sa.Column("sigma", sa.Float(), nullable=True),
        sa.Column("releases", sa.Integer(), nullable=True),
        sa.Column("epsilon", sa.Float(), nullable=True),
        sa.Column("delta", sa.Float(), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        steps.references("ledger_entries", "dataset_id", "datasets"),
        steps.primary_key("ledger_entries", "id"),
        indexes=[
            steps.AddIndex(steps.f("ix_ledger_entries_dataset_id"), ["dataset_id"]),
            steps.AddIndex(steps.f("ix_ledger_entries_job_id"), ["job_id"]),
        ],
    ),
)

upgrade, downgrade = steps.migration(STEPS)
