"""Benchmark: what a job's private summaries cost its centres, and how accurate they are.

For each data set, seed and epsilon of the Table I protocol (delta = 1/N^1.1, the job releases
its own noisy count with a tenth of its mu, as table1.py does), the same job runs twice at the
same total epsilon: without summaries, and with `summaries=True` (SUMMARY_MU_FRACTION of mu on
the sizes and the loss, or `--fraction`). Printed per data set:

- the centres' loss AUC (exact loss of the released centres) with and without summaries, and
  the relative change (the summaries' price in utility), with the standard error of the mean
  paired change over seeds (both runs of a seed share their random numbers);
- the summaries' error: the median relative error of the noisy loss against the exact loss of
  the same released centres, how often it is within 20%, its stated standard error relative to
  the loss, and the median absolute error of the sizes (in rows) next to N/k.

    .venv/bin/python bench/summaries.py --seeds 3
    .venv/bin/python bench/summaries.py --seeds 2 --datasets iris sklearn_4_4 --fraction 0.2
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ProcessPoolExecutor

import numpy as np

# bench/ for its data sets, the repository's root for the tests' helpers (tests.support)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from datasets import EPSILONS, auc, load

from privclust.clustering import cluster
from privclust.clustering.outputs import summaries
from privclust.clustering.run import options as budget_options
from privclust.clustering.run import schedule
from tests.support.metrics import kmeans_loss

DEFAULT_SETS = [
    ("iris", "pe-means"),
    ("sklearn_4_4", "pe-means"),
    ("sklearn_16_4", "pe-means"),
    ("sklearn_4_16", "pe-means"),
    ("sklearn_16_16", "pe-means"),
    ("sklearn_4_64", "hdpe-means"),
]


def run_one(task: tuple[str, str, int, float | None]) -> dict[str, object]:
    name, algorithm, seed, fraction = task
    if fraction is not None:
        budget_options.SUMMARY_MU_FRACTION = fraction
    data = load(name)
    plain, summarised, loss_errors, ses, size_errors = [], [], [], [], []
    for index, epsilon in enumerate(EPSILONS):
        common = {"algorithm": algorithm, "radius": 1.0, "epsilon": epsilon, "delta": data.delta}
        # Common random numbers: both runs start from the same generator state, so they differ
        # only by the summaries (the centres' noise is the same draws, scaled up by 1/sqrt(1-f^2)).
        a = cluster(data.X, data.k, rng=np.random.default_rng([seed, index]), **common)
        b = cluster(
            data.X, data.k, rng=np.random.default_rng([seed, index]), summaries=True, **common
        )
        plain.append(kmeans_loss(data.X, a.centers))
        exact = kmeans_loss(data.X, b.centers)
        summarised.append(exact)
        assert b.loss is not None and b.loss_se is not None and b.sizes is not None
        loss_errors.append(abs(b.loss - exact) / exact)
        ses.append(b.loss_se / exact)
        counts = summaries.exact_summary(data.X, b.centers, radius=1.0).counts
        size_errors.append(float(np.median(np.abs(b.sizes - counts))))
    return {
        "name": name,
        "algorithm": algorithm,
        "plain": auc(plain),
        "summarised": auc(summarised),
        "loss_errors": loss_errors,
        "ses": ses,
        "size_errors": size_errors,
        "n_per_cluster": len(data.X) / data.k,
    }


def _one_thread() -> None:
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--datasets", nargs="*", help="data sets (default: a Table I subset)")
    parser.add_argument("--fraction", type=float, help="summary share of mu (default: library's)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument(
        "--algorithm",
        help="run this algorithm on every set (e.g. auto, what a job gets by default); "
        "otherwise PE-means, or HDPE-means at d = 64",
    )
    args = parser.parse_args()
    sets = (
        [(n, "hdpe-means" if n.endswith("_64") else "pe-means") for n in args.datasets]
        if args.datasets
        else DEFAULT_SETS
    )
    if args.algorithm:
        sets = [(n, args.algorithm) for n, _ in sets]
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    tasks = [(n, a, seed, args.fraction) for n, a in sets for seed in seeds]
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs, initializer=_one_thread) as pool:
            rows = list(pool.map(run_one, tasks))
    else:
        rows = [run_one(t) for t in tasks]
    fraction = args.fraction or budget_options.SUMMARY_MU_FRACTION
    print(
        f"seeds={args.seeds} summary fraction={fraction} (loss share of it "
        f"{schedule.SUMMARY_LOSS_SHARE}) epsilons={list(EPSILONS)} delta=1/N^1.1"
    )
    print()
    print(
        "| data set | algorithm | AUC without | AUC with summaries | change (SE) | "
        "loss rel. error (median) | within 20% | stated SE / loss (median) | "
        "size abs. error (median) | N/k |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, algorithm in sets:
        mine = [r for r in rows if r["name"] == name and r["algorithm"] == algorithm]
        plain = float(np.mean([r["plain"] for r in mine]))  # type: ignore[misc]
        with_s = float(np.mean([r["summarised"] for r in mine]))  # type: ignore[misc]
        paired = np.array([r["summarised"] - r["plain"] for r in mine]) / plain  # type: ignore[operator]
        change_se = float(paired.std(ddof=1) / np.sqrt(len(paired))) if len(paired) > 1 else 0.0
        errors = np.concatenate([r["loss_errors"] for r in mine])  # type: ignore[misc]
        ses = np.concatenate([r["ses"] for r in mine])  # type: ignore[misc]
        sizes = np.concatenate([r["size_errors"] for r in mine])  # type: ignore[misc]
        print(
            f"| {name} | {algorithm} | {plain:.4f} | {with_s:.4f} | "
            f"{(with_s - plain) / plain:+.1%} ({change_se:.1%}) | {np.median(errors):.1%} | "
            f"{np.mean(errors <= 0.2):.0%} | {np.median(ses):.1%} | {np.median(sizes):.0f} | "
            f"{mine[0]['n_per_cluster']:.0f} |"
        )


if __name__ == "__main__":
    main()
