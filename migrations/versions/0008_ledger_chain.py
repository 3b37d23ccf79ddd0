"""ledger: entries chained by hash, the chain's head on the running budget

Revision ID: 0008_ledger_chain
Revises: 0007
Create Date: 2026-12-02 01:00:00.000000

`privclust ledger verify` used to replay (kind, job, mu) only, so an entry changed or moved
together with the running budget passed. Each entry now stores `entry_hash`, SHA-256 over the
dataset's previous entry's hash (`prev_hash`; 64 zeros for the first) and the entry's canonical
content with the running budget it leaves, and `dataset_budgets.last_hash` holds the head that
the next entry continues (app.ledger.chain). The upgrade seals the existing entries of each
dataset in id order, with the canonical form and the running budget's fold written out here as
they stand at this revision, so that the migration does not change if that code does. The
downgrade drops the three columns (the entries themselves are untouched either way).
"""

import hashlib
import json
from datetime import UTC, datetime
from fractions import Fraction

import sqlalchemy as sa
from alembic import op

from migrations import steps

revision: str = "0008_ledger_chain"
down_revision: str | None = "0007"

GENESIS = "0" * 64
_FIELDS = (
    "id dataset_id kind job_id sweep_id actor_key_id mu sigma releases epsilon delta note "
    "created_at"
).split()

ledger = steps.view("ledger_entries", *_FIELDS, "prev_hash", "entry_hash")
budgets = steps.view("dataset_budgets", "dataset_id", "last_hash")


class _Fold:
    """The running budget entry by entry, as the ledger service moves it at this revision."""

    def __init__(self) -> None:
        self.mu_cap = 0.0
        self.spent = Fraction(0)
        self.reserved = Fraction(0)
        self.jobs = 0
        self.live: dict = {}

    def step(self, kind: str, job_id: object, mu: float | None) -> None:
        if kind == "cap" and mu is not None:
            self.mu_cap = float(mu)
        elif kind == "count" and mu is not None:
            self.spent += Fraction(float(mu)) ** 2
        elif job_id is None:
            return
        elif kind == "reserve" and mu is not None:
            self.reserved += Fraction(float(mu)) ** 2
            self.jobs += 1
            self.live[job_id] = float(mu)
        elif kind == "commit" and job_id in self.live:
            square = Fraction(self.live.pop(job_id)) ** 2
            self.spent, self.reserved = self.spent + square, self.reserved - square
        elif kind == "refund" and job_id in self.live:
            self.reserved -= Fraction(self.live.pop(job_id)) ** 2


def _id(value: object) -> str | None:
    return None if value is None else str(value)


def _float(value: float | None) -> str | None:
    return None if value is None else float(value).hex()


def _time(value: datetime) -> str:
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return aware.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _seal(prev: str, row: dict, fold: _Fold) -> str:
    ids = zip(
        ("dataset", "job", "sweep", "actor"),
        ("dataset_id", "job_id", "sweep_id", "actor_key_id"),
        strict=True,
    )
    fields: list = [(name, _id(row[column])) for name, column in ids]
    fields.insert(1, ("kind", str(row["kind"])))
    fields += [("mu", _float(row["mu"])), ("sigma", _float(row["sigma"]))]
    fields.append(("releases", row["releases"]))
    fields += [("epsilon", _float(row["epsilon"])), ("delta", _float(row["delta"]))]
    fields += [("note", row["note"]), ("time", _time(row["created_at"]))]
    fields.append(("mu_cap", fold.mu_cap.hex()))
    fields += [(n, f"{q.numerator}/{q.denominator}") for n, q in _sums(fold)]
    fields.append(("jobs", fold.jobs))
    content = json.dumps(fields, separators=(",", ":"), ensure_ascii=True).encode()
    return hashlib.sha256(prev.encode("ascii") + b"\n" + content).hexdigest()


def _sums(fold: _Fold) -> list[tuple[str, Fraction]]:
    return [("spent_sq", fold.spent), ("reserved_sq", fold.reserved)]


# Added nullable, filled entry by entry, then made NOT NULL.
ENTRIES = steps.alter(
    "ledger_entries",
    *steps.columns(
        sa.Column("prev_hash", sa.String(length=64), nullable=True),
        sa.Column("entry_hash", sa.String(length=64), nullable=True),
    ),
)
BUDGETS = steps.alter(
    "dataset_budgets", steps.AddColumn(sa.Column("last_hash", sa.String(length=64), nullable=True))
)


def upgrade() -> None:
    steps.apply([ENTRIES, BUDGETS])
    conn = op.get_bind()
    for (dataset_id,) in conn.execute(sa.select(budgets.c.dataset_id)).all():
        fold, head = _Fold(), GENESIS
        query = sa.select(*(ledger.c[n] for n in _FIELDS)).where(ledger.c.dataset_id == dataset_id)
        for row in conn.execute(query.order_by(ledger.c.id)).mappings().all():
            fold.step(row["kind"], row["job_id"], row["mu"])
            sealed = _seal(head, dict(row), fold)
            conn.execute(
                ledger.update()
                .where(ledger.c.id == row["id"])
                .values(prev_hash=head, entry_hash=sealed)
            )
            head = sealed
        conn.execute(
            budgets.update().where(budgets.c.dataset_id == dataset_id).values(last_hash=head)
        )
    ENTRIES.require("prev_hash", "entry_hash")
    BUDGETS.require("last_hash")


def downgrade() -> None:
    steps.revert([ENTRIES, BUDGETS])
