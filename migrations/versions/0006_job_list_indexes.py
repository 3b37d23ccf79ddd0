"""jobs and ledger: indexes that serve a page of a job list or of a ledger in its own order

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25 10:30:00.000000

A page of `GET /v1/jobs` (newest first, by tenant, optionally by dataset or status) sorted every
matching job to return fifty: at 100,000 jobs on a dataset, a page cost a sort of 100,000 rows.
Indexes in the list's order (created_at, id) behind each filter let it read only the page. The
one on (tenant, status, created_at, id) also serves the count of a tenant's queued jobs, which
made (tenant, status) redundant. A ledger page (and a ledger's replay) reads a dataset's
entries in id order: (dataset_id, id).
"""

from migrations import steps

revision: str = "0006"
down_revision: str | None = "0005"

STEPS = (
    steps.alter(
        "jobs",
        steps.AddIndex("ix_jobs_tenant_created", ["tenant", "created_at", "id"]),
        steps.AddIndex("ix_jobs_dataset_created", ["dataset_id", "created_at", "id"]),
        steps.AddIndex("ix_jobs_tenant_status_created", ["tenant", "status", "created_at", "id"]),
        steps.Dropped(steps.AddIndex("ix_jobs_tenant_status", ["tenant", "status"])),
    ),
    steps.alter(
        "ledger_entries", steps.AddIndex("ix_ledger_entries_dataset_id_id", ["dataset_id", "id"])
    ),
)

upgrade, downgrade = steps.migration(STEPS)
