"""Benchmark: the paper's Table I protocol for PE-means / HDPE-means / FastLloyd (docs section 7).

`--algorithms lsh-coreset` runs the LSH-tree coreset and compares it with the paper's "Google"
column (Chang and Kamath's method); `pe-lloyd` and `auto` (privclust.clustering.auto's pick,
which is printed per epsilon) run beside them, e.g. every method in one run:

    .venv/bin/python bench/table1.py --datasets iris sklearn_4_4 ... \
        --algorithms pe-means hdpe-means fastlloyd lsh-coreset pe-lloyd auto

For every data set and algorithm: loss at epsilon in {0.25, 0.5, 1, 2, 4} with delta = 1/N^1.1,
the loss AUC per seed (trapezoidal rule), and its mean and standard error over the seeds, printed
beside the paper's figure, with non-private scikit-learn KMeans(n_init=10) as the floor. Prints a
markdown table; never fails on the numbers.

Each (data set, epsilon) is a dataset whose whole budget is that epsilon at delta = 1/N^1.1: the
job first releases the noisy row count N~ with a tenth of the budget's mu (the service's
default; `--count-fraction` changes it) and plans with N~, never the exact N. `--count-public`
instead treats N as public (replace-one neighbours, replace-one sensitivities, no count).

    .venv/bin/python bench/table1.py                      # the default subset, 10 seeds
    .venv/bin/python bench/table1.py --seeds 2 --datasets iris sklearn_4_4
    .venv/bin/python bench/table1.py --datasets sklearn_4_24 sklearn_4_32 \\
        --algorithms pe-means hdpe-means                  # the auto-threshold study
    .venv/bin/python bench/table1.py --restarts 1         # selection k-means restarts
    .venv/bin/python bench/table1.py --count-fraction 0.2 # the noisy count's share of mu
    .venv/bin/python bench/table1.py --datasets sklearn_4_16 --algorithms fastlloyd --box-domain

FastLloyd rows are compared with the paper's FastLloyd column. `--box-domain` declares the
domain the published FastLloyd code assumes, the box [-1, 1]^d, which privclust turns into the
ball of its half diagonal: radius sqrt(d) instead of 1 (the same rows, sqrt(d) times the noise).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np
from sklearn.cluster import KMeans

# bench/ for its data sets, the repository's root for the tests' helpers (tests.support)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from datasets import EPSILONS, PAPER, PAPER_FASTLLOYD, PAPER_GOOGLE, auc, load

from privclust.clustering import (
    DEFAULT_MAX_POPULATION,
    cluster,
    fastlloyd,
    hdpe_means,
    lsh_coreset,
    pe_lloyd,
    pe_means,
)
from privclust.clustering.evolution import selection
from privclust.clustering.run.options import DEFAULT_RESEED_RATIO
from privclust.privacy import noise
from tests.support.metrics import kmeans_loss

# Half a unit in the last published digit.
PAPER_ROUNDING = 0.00005

DEFAULT_RUNS = [
    ("iris", "pe-means"),
    ("sklearn_4_4", "pe-means"),
    ("sklearn_16_4", "pe-means"),
    ("sklearn_64_4", "pe-means"),
    ("sklearn_4_16", "pe-means"),
    ("sklearn_16_16", "pe-means"),
    ("sklearn_64_16", "pe-means"),
    ("sklearn_4_64", "hdpe-means"),
    ("sklearn_16_64", "hdpe-means"),
]


@dataclass(frozen=True)
class Task:
    dataset: str
    algorithm: str
    seed: int
    restarts: int | None
    max_population: int
    count_fraction: float | None = None
    count_public: bool = False
    box_domain: bool = False
    reseed: bool = True


def run_task(task: Task) -> tuple[Task, list[float], float, int, list[str]]:
    """Losses over EPSILONS for one seed, seconds per job, the initial population size and the
    algorithm that ran at each epsilon (for "auto": its pick)."""
    if task.restarts is not None:
        selection.KMEANS_RESTARTS = task.restarts
    if task.count_fraction is not None:
        noise.COUNT_MU_FRACTION = task.count_fraction
    data = load(task.dataset)
    losses = []
    ran: list[str] = []
    population = 0
    start = time.perf_counter()
    for index, epsilon in enumerate(EPSILONS):
        common = {
            "epsilon": epsilon,
            "delta": data.delta,
            "rng": np.random.default_rng([task.seed, index]),
            "relation": "replace-one" if task.count_public else "add-remove",
        }
        if task.algorithm == "fastlloyd":
            radius = float(np.sqrt(data.X.shape[1])) if task.box_domain else 1.0
            result = fastlloyd(
                data.X,
                data.k,
                radius=radius,
                reseed_ratio=None if not task.reseed else DEFAULT_RESEED_RATIO,
                **common,  # type: ignore[arg-type]
            )
        elif task.algorithm == "lsh-coreset":
            result = lsh_coreset(data.X, data.k, radius=1.0, **common)  # type: ignore[arg-type]
        elif task.algorithm == "pe-lloyd":
            result = pe_lloyd(data.X, data.k, radius=1.0, **common)  # type: ignore[arg-type]
        elif task.algorithm == "auto":
            result = cluster(data.X, data.k, algorithm="auto", radius=1.0, **common)  # type: ignore[arg-type]
        else:
            run = pe_means if task.algorithm == "pe-means" else hdpe_means
            result = run(
                data.X,
                data.k,
                radius=1.0,
                max_population=task.max_population,
                **common,  # type: ignore[arg-type]
            )
        losses.append(kmeans_loss(data.X, result.centers))
        ran.append(result.algorithm)
        population = result.population_size
    seconds = (time.perf_counter() - start) / len(EPSILONS)
    return task, losses, seconds, population, ran


def _limit_threads() -> None:
    # Several benchmark processes share the cores: one BLAS/OpenMP thread each.
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10, help="seeds per data set (default 10)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--datasets", nargs="*", help="data sets (default: the paper subset)")
    parser.add_argument(
        "--algorithms",
        nargs="*",
        choices=["pe-means", "hdpe-means", "fastlloyd", "lsh-coreset", "pe-lloyd", "auto"],
        help="algorithms for --datasets (default pe-means)",
    )
    parser.add_argument("--restarts", type=int, help="k-means restarts in the selection step")
    parser.add_argument("--max-population", type=int, default=DEFAULT_MAX_POPULATION)
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument(
        "--count-fraction",
        type=float,
        help=f"share of each job's mu spent on the noisy row count "
        f"(default {noise.COUNT_MU_FRACTION})",
    )
    parser.add_argument(
        "--count-public",
        action="store_true",
        help="N is public: replace-one neighbours, no noisy count",
    )
    parser.add_argument(
        "--box-domain",
        action="store_true",
        help="FastLloyd on the box [-1, 1]^d, i.e. the ball of radius sqrt(d), as published",
    )
    parser.add_argument(
        "--no-reseed",
        action="store_true",
        help="FastLloyd without reseeding starving centres (the paper's Lloyd steps alone)",
    )
    args = parser.parse_args()

    if args.datasets:
        runs = [(name, alg) for name in args.datasets for alg in (args.algorithms or ["pe-means"])]
    else:
        runs = DEFAULT_RUNS
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    tasks = [
        Task(
            name,
            alg,
            seed,
            args.restarts,
            args.max_population,
            args.count_fraction,
            args.count_public,
            args.box_domain,
            not args.no_reseed,
        )
        for name, alg in runs
        for seed in seeds
    ]
    results: dict[tuple[str, str], list[tuple[list[float], float, int]]] = {}
    picks: dict[tuple[str, str], list[list[str]]] = {}
    started = time.perf_counter()
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs, initializer=_limit_threads) as pool:
            for task, losses, seconds, population, ran in pool.map(run_task, tasks):
                results.setdefault((task.dataset, task.algorithm), []).append(
                    (losses, seconds, population)
                )
                picks.setdefault((task.dataset, task.algorithm), []).append(ran)
    else:
        for task in tasks:
            _, losses, seconds, population, ran = run_task(task)
            results.setdefault((task.dataset, task.algorithm), []).append(
                (losses, seconds, population)
            )
            picks.setdefault((task.dataset, task.algorithm), []).append(ran)

    print(
        f"seeds={args.seeds} restarts={args.restarts or selection.KMEANS_RESTARTS} "
        f"max_population={args.max_population} epsilons={list(EPSILONS)} delta=1/N^1.1 "
        + (
            "count=public (replace-one)"
            if args.count_public
            else f"count_fraction={args.count_fraction or noise.COUNT_MU_FRACTION}"
        )
        + (" domain=box [-1,1]^d (FastLloyd radius sqrt(d))" if args.box_domain else "")
        + (" no-reseed" if args.no_reseed else "")
    )
    print()
    print(
        "| data set | N | d | k | algorithm | population | KMeans loss (paper) | "
        "loss at eps 0.25 / 1 / 4 | AUC ± SE | paper AUC | verdict | s/job |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, alg in runs:
        data = load(name)
        rows = results[(name, alg)]
        aucs = np.array([auc(losses) for losses, _, _ in rows])
        mean_losses = np.mean([losses for losses, _, _ in rows], axis=0)
        se = aucs.std(ddof=1) / np.sqrt(len(aucs)) if len(aucs) > 1 else float("nan")
        floor = kmeans_loss(
            data.X, KMeans(data.k, n_init=10, random_state=0).fit(data.X).cluster_centers_
        )
        paper = PAPER.get(name)
        paper_auc = None
        if alg == "lsh-coreset":
            paper_auc = PAPER_GOOGLE.get(name)  # the paper's "Google" column
        elif alg == "fastlloyd":
            paper_auc = PAPER_FASTLLOYD.get(name)
        elif paper is not None:
            # pe-lloyd and auto are held to the PE-means column (the bar to meet or beat).
            paper_auc = paper[2] if alg == "hdpe-means" else paper[1]
        if paper_auc is None:
            verdict, paper_text = "-", "-"
        else:
            # The published figures are rounded to 4 decimals: 0.0778 stands for anything
            # below 0.07785, so "better" and "within 1 SE" compare against that upper edge.
            paper_text = f"{paper_auc:.4f}"
            edge = paper_auc + PAPER_ROUNDING
            if aucs.mean() <= edge:
                verdict = "better" if aucs.mean() < paper_auc - PAPER_ROUNDING else "equal"
            elif aucs.mean() - se <= edge:
                verdict = "within 1 SE"
            else:
                verdict = "worse"
        paper_floor = f" ({paper[0]:.4f})" if paper else ""
        n, d = data.X.shape
        print(
            f"| {name} | {n} | {d} | {data.k} | {alg} | {rows[0][2]} | {floor:.4f}{paper_floor} | "
            f"{mean_losses[0]:.4f} / {mean_losses[2]:.4f} / {mean_losses[4]:.4f} | "
            f"{aucs.mean():.5f} ± {se:.5f} | {paper_text} | {verdict} | "
            f"{np.mean([s for _, s, _ in rows]):.2f} |"
        )
    print()
    print(
        "verdict: 'better' = our mean AUC below the published figure by more than its rounding "
        "(0.00005); 'equal' = within that rounding; 'within 1 SE' = our mean minus one standard "
        "error reaches the published figure's rounding edge; 'worse' otherwise."
    )
    print()
    print("Mean loss per epsilon (± standard error over the seeds); for auto, the method it ran:")
    print()
    print(
        "| data set | algorithm | " + " | ".join(f"eps {e:g}" for e in EPSILONS) + " | AUC ± SE |"
    )
    print("|---|---|" + "---|" * (len(EPSILONS) + 1))
    for name, alg in runs:
        rows = results[(name, alg)]
        per_eps = np.array([loss for loss, _, _ in rows])
        aucs = np.array([auc(loss) for loss in per_eps])
        n = len(rows)
        cells = []
        for i in range(len(EPSILONS)):
            se = per_eps[:, i].std(ddof=1) / np.sqrt(n) if n > 1 else float("nan")
            cells.append(f"{per_eps[:, i].mean():.4f} ± {se:.4f}")
        se_auc = aucs.std(ddof=1) / np.sqrt(n) if n > 1 else float("nan")
        print(f"| {name} | {alg} | " + " | ".join(cells) + f" | {aucs.mean():.5f} ± {se_auc:.5f} |")
        if alg == "auto":
            seen = picks[(name, alg)]
            chosen = [sorted({r[i] for r in seen}) for i in range(len(EPSILONS))]
            print(f"| {name} | (auto ran) | " + " | ".join("/".join(c) for c in chosen) + " | |")
    print()
    print(f"total wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
