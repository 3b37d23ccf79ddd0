"""The default category weight: the transactions table of the tests (6,000 customers of 1 to 40
rows, 5% empty cells, a `plan` column in three segments) shaped as the service shapes it
(missing="drop-row", each customer bounded to 8 rows), clustered with k = 3 by non-private
KMeans and by `auto` at epsilon 1 (per customer), at several weights w.

Prints one row per weight: the largest error of a centre (as a share of its column's range)
and of a category share, against the segments' true centres and plan shares; for `auto`, the
mean and the largest over RUNS runs. Run from the repository: `PYTHONPATH=. python
bench/category_weight.py` (about a minute).
"""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
from sklearn.cluster import KMeans

from privclust.clustering import cluster
from privclust.tabular import TableSpec
from privclust.tabular_rows import Block, TableShaper, bound_units
from tests.support.tables import LOWER, PLANS, UPPER, Transactions, transactions

WEIGHTS = [0.1, 0.2, 0.3, 0.5, 0.7, 1.0]
RUNS = 10
M = 8


def shaped(table: Transactions, weight: float) -> tuple[np.ndarray, list[float], list[float]]:
    """The stored rows of the table (numeric, then one-hot) and their box."""
    spec = TableSpec(
        missing="drop-row",
        categories={"plan": PLANS},
        category_weight=weight,
        privacy_unit="customer",
        max_rows_per_unit=M,
    )
    types = {"amount": pa.float64(), "visits": pa.float64()}
    types |= {"plan": pa.string(), "customer": pa.string()}
    read = pa_csv.read_csv(
        io.BytesIO(table.csv),
        convert_options=pa_csv.ConvertOptions(
            column_types=types, null_values=[""], strings_can_be_null=True
        ),
    )
    numeric = np.column_stack(
        [read.column(c).to_numpy(zero_copy_only=False).astype(float) for c in ("amount", "visits")]
    )
    text = {"plan": np.array(read.column("plan").to_pylist(), dtype=object)}
    units = np.array(read.column("customer").to_pylist(), dtype=object)
    shaper = TableShaper(spec, ["amount", "visits"], [100.0, 25.0])
    rows, kept_units = shaper.shape(Block(numeric, text, units, 1))
    assert kept_units is not None
    keep = bound_units(kept_units, M, np.random.default_rng(0))
    lower, upper = spec.extend_bounds(list(LOWER), list(UPPER))
    return rows[keep], list(lower), list(upper)


def errors(table: Transactions, centres: np.ndarray) -> tuple[float, float]:
    """The largest centre error (share of the range) and share error over the segments."""
    width = np.array(UPPER) - np.array(LOWER)
    centre_error = share_error = 0.0
    for truth, shares in zip(table.centres, table.plan_shares, strict=True):
        j = int(np.argmin(np.linalg.norm((centres[:, :2] - truth) / width, axis=1)))
        centre_error = max(centre_error, float(np.max(np.abs(centres[j, :2] - truth) / width)))
        raw = np.clip(centres[j, 2:], 0.0, 1.0)
        released = raw / raw.sum() if raw.sum() > 0 else np.full(len(PLANS), 1 / len(PLANS))
        share_error = max(share_error, float(np.max(np.abs(released - shares))))
    return centre_error, share_error


def main() -> None:
    table = transactions(6000, seed=1)
    print("| w | KMeans centre | KMeans share | auto centre mean / max | auto share mean / max |")
    print("|---|---|---|---|---|")
    for weight in WEIGHTS:
        rows, lower, upper = shaped(table, weight)
        low, width = np.array(lower), np.array(upper) - np.array(lower)
        fitted = KMeans(3, n_init=10, random_state=0).fit((rows - low) / width)
        exact = errors(table, low + fitted.cluster_centers_ * width)
        private = np.array(
            [
                errors(
                    table,
                    np.array(
                        cluster(
                            rows,
                            3,
                            epsilon=1.0,
                            delta=1e-6,
                            lower=lower,
                            upper=upper,
                            contribution_bound=M,
                            n_public=len(rows),
                            rng=np.random.default_rng(run),
                        ).centers
                    ),
                )
                for run in range(RUNS)
            ]
        )
        print(
            f"| {weight} | {exact[0]:.3f} | {exact[1]:.3f} | {private[:, 0].mean():.3f} / "
            f"{private[:, 0].max():.3f} | {private[:, 1].mean():.3f} / {private[:, 1].max():.3f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
