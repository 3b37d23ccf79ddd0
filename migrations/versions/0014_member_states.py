"""jobs: member_states, each federation member's part in a federated dataset's job

Revision ID: 0014_member_states
Revises: 0013_last_move
Create Date: 2026-12-02 09:30:00.000000

`jobs` gains `member_states` (JSON): for a federated dataset's job, each member's position,
status (pending, joined, answered, finished, refused, failed) and the number of releases it
answered, public facts the coordinator records as the job runs
(app.coordinator.service.FederatedJob.states). It is null for every existing job and for jobs
on a dataset of this server's own rows. The downgrade drops it.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014_member_states"
down_revision: str | None = "0013_last_move"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("member_states", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("member_states")
