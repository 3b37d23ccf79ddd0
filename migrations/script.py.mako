"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}
"""

import sqlalchemy as sa
from alembic import op
${imports if imports else ""}
# A revision that only adds columns, indexes, foreign keys or tables can declare them once as
# migrations.steps and take both upgrade and downgrade from that declaration (see 0005_box_domains).

revision: str = ${repr(up_revision)}
down_revision: str | None = ${repr(down_revision)}
% if branch_labels:
branch_labels: str | tuple[str, ...] = ${repr(branch_labels)}
% endif
% if depends_on:
depends_on: str | tuple[str, ...] = ${repr(depends_on)}
% endif


def upgrade() -> None:
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    ${downgrades if downgrades else "pass"}
