"""member_jobs: centres, the released centres of a federated job that succeeded

Revision ID: 0015_member_job_centres
Revises: 0014_member_states
Create Date: 2026-12-02 10:00:00.000000

`member_jobs` gains `centers` (JSON): the centres a coordinator released for a federated job,
sent to each member with the job's end when it succeeded (public: the same numbers every
analyst of the coordinator reads). The member's owner computes its own rows' labels from them.
It is null for every existing member job and for every job that did not succeed. The downgrade
drops it.
"""

import sqlalchemy as sa

from migrations import steps

revision: str = "0015_member_job_centres"
down_revision: str | None = "0014_member_states"

upgrade, downgrade = steps.adding_columns(
    "member_jobs", sa.Column("centers", sa.JSON(), nullable=True)
)
