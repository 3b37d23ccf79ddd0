"""datasets: table terms (privacy unit, missing values, categories) and the owner's counts

Revision ID: 0011_table_terms
Revises: 0010_federation
Create Date: 2026-12-02 02:00:00.000000

`datasets` gains `table_spec` (the public table terms: the privacy unit and its
max_rows_per_unit, the missing-value policy and its fills, the categories and their weight) and
`ingest_counts` (owner-only: rows read, dropped or filled by the policy, dropped by the unit
bound). Both are null for every existing dataset: a plain table whose unit is one row, as before.
The downgrade drops them.
"""

import sqlalchemy as sa

from migrations import steps

revision: str = "0011_table_terms"
down_revision: str | None = "0010_federation"

upgrade, downgrade = steps.adding_columns(
    "datasets",
    sa.Column("table_spec", sa.JSON(), nullable=True),
    sa.Column("ingest_counts", sa.JSON(), nullable=True),
)
