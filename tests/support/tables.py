"""Tables as they come, for the tests: customers with many rows, gaps and a categorical column."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

import numpy as np

PLANS = ["basic", "premium", "family"]
# Three customer segments: (amount, visits) and the share of each plan among their customers.
SEGMENTS = {
    "amount_visits": np.array([[40.0, 8.0], [110.0, 30.0], [170.0, 12.0]]),
    "plan_shares": np.array([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6]]),
}
LOWER, UPPER = [0.0, 0.0], [200.0, 50.0]


@dataclass(frozen=True)
class Transactions:
    """A transactions table's CSV and the truth it was drawn from."""

    csv: bytes
    centres: np.ndarray
    plan_shares: np.ndarray
    n_rows: int


def transactions(
    customers: int, seed: int, *, gaps: float = 0.05, max_rows: int = 40
) -> Transactions:
    """Customers with 1 to `max_rows` rows each, in one of SEGMENTS; each customer keeps one
    plan; a fraction `gaps` of the data cells (not the customer id) are empty."""
    rng = np.random.default_rng(seed)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["customer", "amount", "visits", "plan"])
    centres, shares = SEGMENTS["amount_visits"], SEGMENTS["plan_shares"]
    n_rows = 0
    for customer in range(customers):
        segment = customer % len(centres)
        plan = PLANS[rng.choice(len(PLANS), p=shares[segment])]
        rows = int(rng.integers(1, max_rows + 1))
        values = centres[segment] + rng.normal(0.0, [6.0, 2.0], (rows, 2))
        values = np.clip(values, LOWER, UPPER)
        for amount, visits in values:
            cells = [f"{amount:.2f}", f"{visits:.2f}", plan]
            cells = ["" if rng.random() < gaps else c for c in cells]
            writer.writerow([f"c{customer}", *cells])
        n_rows += rows
    return Transactions(out.getvalue().encode(), centres, shares, n_rows)
