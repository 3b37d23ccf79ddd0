"""federation: member keys scoped to one dataset, and their seats' X25519 keys

Revision ID: 0010_federation
Revises: 0009_key_budgets
Create Date: 2026-12-02 02:00:00.000000

`api_keys` gains `dataset_id`, the one dataset a key of the new role `member` serves (null for
every existing key, whose roles are scoped by tenant as before). `member_seats` holds each
member key's X25519 key pair, made when a coordinator first asks for the seat; nothing is
backfilled. The downgrade drops both (member keys must be revoked and deleted first: their role
means nothing to the older code).
"""

import sqlalchemy as sa

from migrations import steps

revision: str = "0010_federation"
down_revision: str | None = "0009_key_budgets"

STEPS = (
    steps.alter(
        "api_keys",
        steps.AddColumn(sa.Column("dataset_id", sa.Uuid(), nullable=True)),
        steps.AddForeignKey(
            steps.f("fk_api_keys_dataset_id_datasets"), "datasets", ["dataset_id"], ["id"]
        ),
    ),
    steps.table(
        "member_seats",
        sa.Column("key_id", sa.Uuid(), nullable=False),
        sa.Column("private_key", sa.LargeBinary(length=32), nullable=False),
        sa.Column("public_key", sa.LargeBinary(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        steps.references("member_seats", "key_id", "api_keys"),
        steps.primary_key("member_seats", "key_id"),
        sa.UniqueConstraint("public_key", name=steps.f("uq_member_seats_public_key")),
    ),
)

upgrade, downgrade = steps.migration(STEPS)
