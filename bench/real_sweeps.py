"""Benchmark: sweeps over k on the real tables of bench/real_tables.py. For each table and
epsilon (the whole sweep's), `--runs` private sweeps over `--ks` (the public count given) and
the elbow rule (privclust.clustering.sweeps.elbow_k) on the exact KMeans(n_init=10) losses of
the same ks in the same scaled space: the private suggestion should be that elbow +- 1, or none
(the issue asks for that in at least 90% of sweeps).

    .venv/bin/python bench/real_sweeps.py --runs 2
"""

from __future__ import annotations

import argparse
import os
import sys

from sklearn.cluster import KMeans

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from real_tables import TABLES

from privclust.clustering import sweep
from privclust.clustering.data.scaling import Box
from privclust.clustering.sweeps import elbow_k


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--tables", nargs="+", default=list(TABLES), choices=list(TABLES))
    parser.add_argument("--epsilons", nargs="+", type=float, default=[1.0, 3.0])
    parser.add_argument("--ks", nargs="+", type=int, default=[2, 3, 4, 5, 6, 7, 8])
    args = parser.parse_args()
    print(f"runs per setting: {args.runs}; ks {args.ks}; load: {os.getloadavg()[0]:.1f}")
    print("| table | epsilon | exact elbow | suggestions | noisy losses (first run) | notes |")
    print("|---|---|---|---|---|---|")
    good = total = 0
    for name in args.tables:
        table = TABLES[name]()
        Z = Box.of(table.lower, table.upper).to_scaled(table.X)
        exact = [KMeans(k, n_init=10).fit(Z).inertia_ / len(Z) for k in args.ks]
        elbow = elbow_k(args.ks, exact, [0.0] * len(exact))
        for epsilon in args.epsilons:
            found, first = [], None
            for _ in range(args.runs):
                result = sweep(
                    table.X, args.ks, lower=table.lower, upper=table.upper,
                    n_public=len(Z), epsilon=epsilon, delta=table.delta,
                )  # fmt: skip
                found.append(result.suggested_k)
                if first is None:
                    first = result
            good += sum(k is None or abs(k - elbow) <= 1 for k in found)
            total += len(found)
            assert first is not None
            losses = ", ".join(f"{r.loss:.3g}" for r in first.results)
            notes = ", ".join(sorted({c.code for c in first.warnings}))
            print(f"| {name} | {epsilon:g} | {elbow} | {found} | {losses} | {notes} |", flush=True)
    print(f"\nsuggestions at the exact elbow +- 1 or none: {good} of {total}")


if __name__ == "__main__":
    main()
