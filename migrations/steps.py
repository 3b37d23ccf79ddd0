"""Schema steps that know their own undoing, so a revision declares what it adds only once.

A revision that adds columns, indexes, foreign keys or tables lists them as steps; its
upgrade() applies them in order and its downgrade() reverts them in the reverse order, both
from that one declaration (a column added is dropped by its name, an index or a foreign key by
its name, a table by its name after its indexes). Names are given exactly as the revision
always gave them (`f(...)`, which marks a final name as `op.f(...)` does, or a plain string
where the metadata's naming convention applies), so a revision written with steps issues the
same statements as one that spells each operation out. Data backfills, and checks a downgrade
makes first, stay written out in their revisions.
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
