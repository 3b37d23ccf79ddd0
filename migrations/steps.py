"""Schema steps that know their own undoing, so a revision declares what it adds only once.

A revision that adds columns, indexes, foreign keys or tables lists them as steps; its
upgrade() applies them in order and its downgrade() reverts them in the reverse order, both
from that one declaration (a column added is dropped by its name, an index or a foreign key by
its name, a table by its name after its indexes). Names are given exactly as the revision
always gave them (`f(...)`, which marks a final name as `op.f(...)` does, or a plain string
where the metadata's naming convention applies), so a revision written with steps issues the
same statements as one that spells each operation out. Data backfills, and checks a downgrade
makes first, stay written out in their revisions; the columns a backfill reads and writes come
from `view`, under the types kept here once for every backfill.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import sqlalchemy as sa
from alembic import op
from alembic.operations import BatchOperations
from sqlalchemy.sql.naming import conv


def f(name: str) -> conv:
    """A name the naming convention leaves as given, as `op.f` marks one; unlike `op.f` it can be
    called when the revision's module is loaded, before any migration context exists."""
    return conv(name)


def references(table: str, column: str, referent: str) -> sa.ForeignKeyConstraint:
    """`table.column` referring to `referent.id`, under the name the naming convention gives
    it (fk_<table>_<column>_<referent>), marked final as every revision marks it."""
    return sa.ForeignKeyConstraint(
        [column], [f"{referent}.id"], name=f(f"fk_{table}_{column}_{referent}")
    )


def primary_key(table: str, *columns: str) -> sa.PrimaryKeyConstraint:
    """The table's primary key on `columns`, named pk_<table> (marked final)."""
    return sa.PrimaryKeyConstraint(*columns, name=f(f"pk_{table}"))


def idempotent(table: str) -> sa.UniqueConstraint:
    """One row per tenant and idempotency key: a submission retried with its key finds the row
    its first attempt made."""
    return sa.UniqueConstraint(
        "tenant", "idempotency_key", name=f"uq_{table}_tenant_idempotency_key"
    )


def request_columns() -> tuple[sa.Column, ...]:
    """What leads every row of a tenant's request on a dataset (a job, a sweep): its id, the
    dataset's and the tenant."""
    return (
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("dataset_id", sa.Uuid(), nullable=False),
        sa.Column("tenant", sa.String(length=100), nullable=False),
    )


def cost_columns() -> tuple[sa.Column, ...]:
    """What a job or a sweep costs, as mu and as the (epsilon, delta) it was asked in."""
    return (
        sa.Column("mu", sa.Float(), nullable=False),
        sa.Column("epsilon", sa.Float(), nullable=False),
        sa.Column("delta", sa.Float(), nullable=False),
    )


def submission_columns() -> tuple[sa.Column, ...]:
    """Who submitted a job or a sweep and when, and the idempotency key and request fingerprint
    that a retry of that submission is matched by."""
    return (
        sa.Column("idempotency_key", sa.String(length=200), nullable=True),
        sa.Column("request_fingerprint", sa.String(length=64), nullable=True),
        sa.Column("created_by", sa.Uuid(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def running_budget_columns() -> tuple[sa.Column, ...]:
    """A running budget (a dataset's, a key's on a dataset): its cap, the exact sums of squares
    of spent and reserved mu as "numerator/denominator", and the jobs it admitted."""
    return (
        sa.Column("mu_cap", sa.Float(), nullable=False),
        sa.Column("spent_sq", sa.Text(), nullable=False),
        sa.Column("reserved_sq", sa.Text(), nullable=False),
        sa.Column("jobs", sa.Integer(), nullable=False),
    )


# The types under which the data migrations (backfills) read and write each table's columns,
# grouped by type: the types the revisions that made the columns gave them, without lengths (a
# view only binds and reads values; it creates nothing). A revision that changed a column's type
# would read it under a name of its own here, so that no earlier backfill changes.
_VIEW_TYPES: dict[str, tuple[tuple[sa.types.TypeEngine, str], ...]] = {
    "datasets": (
        (sa.Uuid(), "id"),
        (sa.Integer(), "n_rows n_rows_dp"),
        (sa.Boolean(), "count_public"),
    ),
    "jobs": ((sa.Boolean(), "summaries"),),
    "ledger_entries": (
        (sa.Integer(), "id releases"),
        (sa.Uuid(), "dataset_id job_id sweep_id actor_key_id"),
        (sa.String(), "kind prev_hash entry_hash"),
        (sa.Float(), "mu sigma epsilon delta"),
        (sa.Text(), "note"),
        (sa.DateTime(timezone=True), "created_at"),
    ),
    "dataset_budgets": (
        (sa.Uuid(), "dataset_id"),
        (sa.Float(), "mu_cap"),
        (sa.Text(), "spent_sq reserved_sq"),
        (sa.Integer(), "jobs"),
        (sa.DateTime(timezone=True), "updated_at"),
        (sa.String(), "last_hash"),
    ),
}


def view(table: str, *names: str) -> sa.TableClause:
    """`table` as a backfill sees it: the columns `names`, in that order (the order an insert
    or an update names them in), each under its type in _VIEW_TYPES."""
    types = {name: type_ for type_, group in _VIEW_TYPES[table] for name in group.split()}
    return sa.table(table, *(sa.column(name, types[name]) for name in names))


class Change(Protocol):
    """One change to one table, made inside its batch and undone inside the downgrade's."""

    def apply(self, batch: BatchOperations) -> None: ...

    def revert(self, batch: BatchOperations) -> None: ...


class Step(Protocol):
    """One step of a revision: what its upgrade does and what its downgrade undoes."""

    def apply(self) -> None: ...

    def revert(self) -> None: ...


@dataclass(frozen=True)
class AddColumn:
    column: sa.Column

    def apply(self, batch: BatchOperations) -> None:
        batch.add_column(self.column)

    def revert(self, batch: BatchOperations) -> None:
        batch.drop_column(self.column.name)


@dataclass(frozen=True)
class AddIndex:
    name: str
    columns: Sequence[str]

    def apply(self, batch: BatchOperations) -> None:
        batch.create_index(self.name, list(self.columns), unique=False)

    def revert(self, batch: BatchOperations) -> None:
        batch.drop_index(self.name)


@dataclass(frozen=True)
class AddForeignKey:
    name: str
    referent: str
    local: Sequence[str]
    remote: Sequence[str]

    def apply(self, batch: BatchOperations) -> None:
        batch.create_foreign_key(self.name, self.referent, list(self.local), list(self.remote))

    def revert(self, batch: BatchOperations) -> None:
        batch.drop_constraint(self.name, type_="foreignkey")


@dataclass(frozen=True)
class MakeNullable:
    """A NOT NULL column made nullable; the downgrade makes it NOT NULL again."""

    name: str
    type: sa.types.TypeEngine

    def apply(self, batch: BatchOperations) -> None:
        batch.alter_column(self.name, existing_type=self.type, nullable=True)

    def revert(self, batch: BatchOperations) -> None:
        batch.alter_column(self.name, existing_type=self.type, nullable=False)


@dataclass(frozen=True)
class Dropped:
    """The inverse of a change: what it adds, the upgrade removes and the downgrade restores."""

    change: Change

    def apply(self, batch: BatchOperations) -> None:
        self.change.revert(batch)

    def revert(self, batch: BatchOperations) -> None:
        self.change.apply(batch)


def columns(*added: sa.Column) -> tuple[AddColumn, ...]:
    return tuple(AddColumn(column) for column in added)


@dataclass(frozen=True)
class Alter:
    """Changes to one existing table, made in one batch (SQLite rebuilds the table at most once)."""

    table: str
    changes: Sequence[Change]

    def apply(self) -> None:
        with op.batch_alter_table(self.table, schema=None) as batch:
            for change in self.changes:
                change.apply(batch)

    def revert(self) -> None:
        with op.batch_alter_table(self.table, schema=None) as batch:
            for change in reversed(self.changes):
                change.revert(batch)

    def require(self, *names: str) -> None:
        """Make columns this step added nullable (and a revision then backfilled) NOT NULL."""
        added = {c.column.name: c.column for c in self.changes if isinstance(c, AddColumn)}
        with op.batch_alter_table(self.table, schema=None) as batch:
            for name in names:
                batch.alter_column(name, existing_type=added[name].type, nullable=False)


def alter(table: str, *changes: Change) -> Alter:
    return Alter(table, changes)


@dataclass(frozen=True)
class CreateTable:
    """A new table (its columns and constraints) and the indexes made on it right after."""

    name: str
    elements: Sequence[sa.SchemaItem]
    indexes: Sequence[AddIndex] = ()

    def apply(self) -> None:
        op.create_table(self.name, *self.elements)
        if self.indexes:
            Alter(self.name, self.indexes).apply()

    def revert(self) -> None:
        if self.indexes:
            Alter(self.name, self.indexes).revert()
        op.drop_table(self.name)


def table(name: str, *elements: sa.SchemaItem, indexes: Sequence[AddIndex] = ()) -> CreateTable:
    return CreateTable(name, elements, tuple(indexes))


def apply(steps: Sequence[Step]) -> None:
    """The upgrade: every step in the order declared."""
    for step in steps:
        step.apply()


def revert(steps: Sequence[Step]) -> None:
    """The downgrade: every step undone, the last declared first."""
    for step in reversed(steps):
        step.revert()


def migration(steps: Sequence[Step]) -> tuple[Callable[[], None], Callable[[], None]]:
    """The upgrade() and downgrade() of a revision made only of `steps`, both from that one
    declaration: `upgrade, downgrade = steps.migration(STEPS)`."""

    def upgrade() -> None:
        apply(steps)

    def downgrade() -> None:
        revert(steps)

    return upgrade, downgrade


def adding_columns(table: str, *added: sa.Column) -> tuple[Callable[[], None], Callable[[], None]]:
    """The upgrade() and downgrade() of a revision that only adds `added` to one table."""
    return migration((alter(table, *columns(*added)),))
