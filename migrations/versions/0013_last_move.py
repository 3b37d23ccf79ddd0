"""jobs: last_move, how far a run's last noisy Lloyd step moved its centres against its noise

Revision ID: 0013_last_move
Revises: 0012_federated_jobs
Create Date: 2026-12-02 05:00:00.000000

`jobs` gains `last_move` and `last_shift` (privclust.clustering.mechanisms.lloyd.last_move_ratio:
how far the last noisy Lloyd step moved a centre against that step's noise, and that centre's
move; post-processing of the run's released values), which the result's `not-converged`
warning reads. It is null for
every existing job and for methods that end without a Lloyd step: no such warning then. The
downgrade drops it.
"""

import sqlalchemy as sa

from migrations import steps

revision: str = "0013_last_move"
down_revision: str | None = "0012_federated_jobs"

upgrade, downgrade = steps.adding_columns(
    "jobs",
    sa.Column("last_move", sa.Float(), nullable=True),
    sa.Column("last_shift", sa.Float(), nullable=True),
)
