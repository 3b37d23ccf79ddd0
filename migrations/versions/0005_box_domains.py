"""datasets: the declared box of a dataset with per-column bounds

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25 09:30:00.000000

Datasets declared with per-column bounds are now clustered in the scaled space (each column
mapped onto [0, 1] by its bounds), which needs the bounds themselves: `domain_kind` ("ball" or
"box") and the box's `lower` and `upper`. Datasets uploaded before this revision keep working as
balls: a box was stored only as the ball around it (its centre and radius), from which the box
cannot be recovered, so every existing row gets `domain_kind = "ball"` and null bounds, and its
jobs run exactly as before. The downgrade drops the three columns (a box dataset then behaves as
the ball around it, as before this revision).
"""

import sqlalchemy as sa

from migrations import steps

revision: str = "0005"
down_revision: str | None = "0004"

upgrade, downgrade = steps.adding_columns(
    "datasets",
    sa.Column("domain_kind", sa.String(length=8), nullable=False, server_default="ball"),
    sa.Column("lower", sa.JSON(), nullable=True),
    sa.Column("upper", sa.JSON(), nullable=True),
)
