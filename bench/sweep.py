"""Benchmark: choosing k privately with a sweep (privclust.clustering.sweep).

On a Table I set with a known k (default sklearn_16_16, k = 16), each run sweeps k over
{4, 8, 16, 32} with one epsilon for the whole sweep (default 1, delta = 1/N^1.1; the sweep
releases its own noisy count with a tenth of mu and splits the rest equally between the jobs).
Printed per run: the noisy losses, the exact losses of the same released centres, the suggested
k, and what the same elbow rule would suggest on the exact losses (with their standard errors).
Then how often the suggestion is the true k, and how often every noisy loss of a run is within
20% of its exact loss, and per k the median clip of the loss (loss_bound of the released
centres, in units of R^2: the loss's noise scales with it, against the worst case 4).

    .venv/bin/python bench/sweep.py                   # 10 runs, the issue's protocol
    .venv/bin/python bench/sweep.py --runs 3 --dataset sklearn_4_16 --ks 2 4 8
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

# bench/ for its data sets, the repository's root for the tests' helpers (tests.support)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from datasets import load

from privclust.clustering import suggest_k, sweep
from privclust.clustering.outputs import summaries
from privclust.clustering.run import options as budget_options
from privclust.clustering.run import schedule
from tests.support.metrics import kmeans_loss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="sklearn_16_16")
    parser.add_argument("--ks", type=int, nargs="+", default=[4, 8, 16, 32])
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--algorithm", default="auto")
    parser.add_argument(
        "--fraction",
        type=float,
        default=budget_options.SWEEP_SUMMARY_FRACTION,
        help="summary share of each job's mu (default: the sweeps' SWEEP_SUMMARY_FRACTION)",
    )
    args = parser.parse_args()
    data = load(args.dataset)
    print(
        f"{args.dataset} (true k = {data.k}), ks={args.ks}, epsilon={args.epsilon} for the whole "
        f"sweep, delta=1/N^1.1, summary fraction={args.fraction} "
        f"(loss share {schedule.SUMMARY_LOSS_SHARE}), elbow drop={summaries.ELBOW_DROP}, "
        f"{summaries.ELBOW_SE_MULTIPLIER} SE"
    )
    print()
    header = " | ".join(f"k={k} noisy / exact (SE)" for k in args.ks)
    print(f"| run | {header} | suggested | on exact losses | all within 20% | seconds |")
    print("|---" * (len(args.ks) + 5) + "|")
    hits = within = 0
    per_k_within = np.zeros(len(args.ks))
    bounds: list[list[float]] = [[] for _ in args.ks]
    for run in range(args.first_seed, args.first_seed + args.runs):
        started = time.process_time()
        result = sweep(
            data.X,
            args.ks,
            radius=1.0,
            algorithm=args.algorithm,
            epsilon=args.epsilon,
            delta=data.delta,
            rng=np.random.default_rng(run),
            summary_fraction=args.fraction,
        )
        seconds = time.process_time() - started
        noisy = [float(r.loss or 0.0) for r in result.results]
        ses = [float(r.loss_se or 0.0) for r in result.results]
        exact = [kmeans_loss(data.X, r.centers) for r in result.results]
        close = [abs(n - e) <= 0.2 * e for n, e in zip(noisy, exact, strict=True)]
        for i, r in enumerate(result.results):
            bounds[i].append(summaries.loss_bound(r.centers, 1.0))
        per_k_within += close
        hits += result.suggested_k == data.k
        within += all(close)
        cells = " | ".join(
            f"{n:.4f} / {e:.4f} ({s:.4f})" for n, e, s in zip(noisy, exact, ses, strict=True)
        )
        print(
            f"| {run} | {cells} | {result.suggested_k} | "
            f"{suggest_k(result.ks, exact, ses)} | {'yes' if all(close) else 'no'} | "
            f"{seconds:.0f} |"
        )
    print()
    print(f"suggested k == {data.k}: {hits}/{args.runs}")
    print(f"every noisy loss within 20% of its exact loss: {within}/{args.runs}")
    print(
        "per k, within 20%: "
        + ", ".join(
            f"k={k}: {int(c)}/{args.runs}" for k, c in zip(args.ks, per_k_within, strict=True)
        )
    )
    print("(seconds: CPU time of the sweep, process_time)")
    print(
        "loss clip B / R^2 (median over runs): "
        + ", ".join(f"k={k}: {np.median(b):.3f}" for k, b in zip(args.ks, bounds, strict=True))
    )


if __name__ == "__main__":
    main()
