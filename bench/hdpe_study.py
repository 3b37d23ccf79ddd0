"""Benchmark: where HDPE-means loses utility (bench/RESULTS.md, "HDPE-means: the loss").

For each epsilon and seed it runs HDPE-means step by step (the code of
privclust.clustering.methods.hdpe, with the same generator) and measures, besides the released
centres' loss:
- "labels, exact means": the loss of the exact means of the clusters HDPE's projected labelling
  forms (benchmark only, not private): what the final step would give without noise, so the
  gap to the released loss is the final step's noise and the gap to KMeans is the partition;
- "PE centres in p": whether PE-means in the projection found the clusters (the projected
  loss of its centres against the projected KMeans loss).
Variants: `--sum-weights W...` prices the final noisy sums as W releases (their share of the
budget; default 1, the published split) and `--iterations-rule scaled` gives the PE part
T = eps x floor(4 sqrt(p)) - 2 when eps > 1 (PE-means's own rule in p dimensions) instead of
the fixed 14.

    PYTHONPATH=. .venv/bin/python bench/hdpe_study.py --dataset sklearn_16_64 --seeds 10
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
from sklearn.cluster import KMeans

# bench/ for its data sets, the repository's root for the tests' helpers (tests.support)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from datasets import load

from privclust.clustering.evolution.evolution import evolve
from privclust.clustering.evolution.nearest import nearest_candidates
from privclust.clustering.mechanisms.grid import cluster_grid_sums, release_means
from privclust.clustering.mechanisms.projection import default_projected_iterations, project_rows
from privclust.clustering.methods import hdpe
from privclust.clustering.run.options import Options
from privclust.clustering.run.plan import default_pe_iterations
from privclust.clustering.run.runner import start_run
from tests.support.metrics import kmeans_loss


def exact_means_loss(X: np.ndarray, labels: np.ndarray, k: int) -> float:
    centres = np.zeros((k, X.shape[1]))
    for j in range(k):
        members = X[labels == j]
        if len(members):
            centres[j] = members.mean(axis=0)
    return kmeans_loss(X, centres)


def one_run(
    name: str, epsilon: float, seed: int, rule: str, sum_weight: int
) -> tuple[float, float, float, int]:
    data = load(name)
    p = 16
    iterations = default_projected_iterations(p)
    if rule == "scaled":
        iterations = default_pe_iterations(p, epsilon) - 2
    rng = np.random.default_rng([seed, int(epsilon * 100)])
    options = Options(
        radius=1.0, rng=rng, epsilon=epsilon, delta=data.delta, iterations=iterations,
        projection_dim=p, sum_weight=sum_weight,
    )  # fmt: skip
    run = start_run(hdpe.METHOD, data.X, data.k, options)
    points, plan, noise_rng = run.points, run.plan, run.rng
    matrix = noise_rng.standard_normal(size=(p, points.shape[1]))
    projected = project_rows(points, matrix)
    outcome = evolve(projected, plan, radius=1.0, rng=noise_rng, packing_rng=rng, progress=None)
    labels = nearest_candidates(projected, outcome.centres)
    sums, counts = cluster_grid_sums(points, labels, plan.k, 1.0)
    centres, _ = release_means(sums, counts, plan, 1.0, noise_rng, sum_weight)
    released = kmeans_loss(data.X, centres)
    exact = exact_means_loss(data.X, labels, data.k)
    floor_p = kmeans_loss(
        projected, KMeans(data.k, n_init=3, random_state=0).fit(projected).cluster_centers_
    )
    pe_ratio = kmeans_loss(projected, outcome.centres) / floor_p
    return released, exact, pe_ratio, plan.iterations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="sklearn_16_64")
    parser.add_argument("--epsilons", nargs="*", type=float, default=[1.0, 2.0, 4.0, 8.0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--iterations-rule", choices=["fixed", "scaled"], default="fixed")
    parser.add_argument("--sum-weights", nargs="*", type=int, default=[1])
    args = parser.parse_args()
    data = load(args.dataset)
    floor = kmeans_loss(
        data.X, KMeans(data.k, n_init=10, random_state=0).fit(data.X).cluster_centers_
    )
    print(
        f"{args.dataset}: KMeans loss {floor:.4f}; {args.seeds} seeds; "
        f"T rule {args.iterations_rule}"
    )
    print()
    print(
        "| sum weight | epsilon | PE iterations | released loss ± SE | labels, exact means ± SE | "
        "final-step noise share | PE centres / KMeans in p (median) | seeds > 1.1x floor |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for weight, epsilon in [(w, e) for w in args.sum_weights for e in args.epsilons]:
        rows = np.array(
            [
                one_run(args.dataset, epsilon, s, args.iterations_rule, weight)
                for s in range(args.seeds)
            ]
        )
        released, exact, ratio = rows[:, 0], rows[:, 1], rows[:, 2]
        se = lambda v: v.std(ddof=1) / np.sqrt(len(v))  # noqa: E731
        noise_share = (released.mean() - exact.mean()) / max(released.mean() - floor, 1e-12)
        print(
            f"| {weight} | {epsilon:g} | {int(rows[0, 3])} | "
            f"{released.mean():.4f} ± {se(released):.4f} | "
            f"{exact.mean():.4f} ± {se(exact):.4f} | {noise_share:.2f} | "
            f"{np.median(ratio):.3f} | {int((released > 1.1 * floor).sum())} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
