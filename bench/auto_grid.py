"""Benchmark: every method on the Table I sets over an epsilon grid, and the `auto` rule on it.

`run` appends one JSON line per (data set, method, epsilon, seed) to a results file (skipping
lines already there, so an interrupted run resumes); `report` reads such files and prints, per
data set, the mean loss of every method at every epsilon, its AUC over the grid and over the
paper's epsilons, the best method per epsilon, and what `auto` (privclust.clustering.auto) picks
there with the loss of its pick.

Protocol as bench/table1.py: data centred and scaled to max row norm 1, R = 1, delta = 1/N^1.1,
each (data set, epsilon) a dataset whose whole budget is that epsilon (the job first releases
N~ with a tenth of its mu and plans with it), generators seeded [seed, epsilon index] so every
method sees the same seeds. Methods: pe-means, hdpe-means, fastlloyd, lsh-coreset, pe-lloyd
(defaults), and pe-lloyd:SHARE:STEPS[:RULE] (the Lloyd steps' share of mu^2, their number and
the step radius rule, privclust.clustering.methods.lloyd_chain.step_radii).

    PYTHONPATH=. .venv/bin/python bench/auto_grid.py run --out grid.jsonl --seeds 3 \\
        --datasets sklearn_4_4 --methods pe-means pe-lloyd:0.3:2
    PYTHONPATH=. .venv/bin/python bench/auto_grid.py report grid.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor

import numpy as np

# bench/ for its data sets, the repository's root for the tests' helpers (tests.support)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from datasets import EPSILONS, TABLE_I_SETS, auc, load

from privclust.clustering import (
    choose_algorithm,
    fastlloyd,
    hdpe_means,
    lsh_coreset,
    pe_lloyd,
    pe_means,
)
from privclust.privacy.gdp import mu_from_epsilon_delta
from tests.support.metrics import kmeans_loss

GRID = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
PRODUCT_METHODS = ("pe-means", "hdpe-means", "fastlloyd", "lsh-coreset", "pe-lloyd")


def run_one(task: tuple[str, str, int, int]) -> dict[str, object]:
    name, method, seed, index = task
    data = load(name)
    epsilon = GRID[index]
    common = {
        "epsilon": epsilon,
        "delta": data.delta,
        "rng": np.random.default_rng([seed, index]),
    }
    started = time.process_time()
    if method.startswith("pe-lloyd"):
        parts = method.split(":")
        options: dict[str, object] = {}
        if len(parts) > 1:
            options["lloyd_share"] = float(parts[1])
        if len(parts) > 2:
            options["lloyd_steps"] = int(parts[2])
        if len(parts) > 3:
            options["step_rule"] = parts[3]
        result = pe_lloyd(data.X, data.k, radius=1.0, **common, **options)  # type: ignore[arg-type]
    else:
        run = {
            "pe-means": pe_means,
            "hdpe-means": hdpe_means,
            "fastlloyd": fastlloyd,
            "lsh-coreset": lsh_coreset,
        }[method]
        result = run(data.X, data.k, radius=1.0, **common)  # type: ignore[operator]
    return {
        "dataset": name,
        "method": method,
        "seed": seed,
        "epsilon": epsilon,
        "loss": kmeans_loss(data.X, result.centers),
        "cpu_s": time.process_time() - started,
        "releases": result.releases,
    }


def _limit_threads() -> None:
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)


def command_run(args: argparse.Namespace) -> None:
    done: set[tuple[str, str, int, float]] = set()
    if os.path.exists(args.out):
        with open(args.out) as handle:
            for line in handle:
                row = json.loads(line)
                done.add((row["dataset"], row["method"], row["seed"], row["epsilon"]))
    epsilons = [GRID.index(e) for e in (args.epsilons or GRID)]
    tasks = [
        (name, method, seed, index)
        for seed in range(args.first_seed, args.first_seed + args.seeds)
        for name in args.datasets
        for method in args.methods
        for index in epsilons
        if (name, method, seed, GRID[index]) not in done
    ]
    print(f"{len(tasks)} jobs to run", flush=True)
    started = time.perf_counter()
    with open(args.out, "a") as handle:
        if args.jobs > 1:
            with ProcessPoolExecutor(args.jobs, initializer=_limit_threads) as pool:
                for row in pool.map(run_one, tasks):
                    handle.write(json.dumps(row) + "\n")
                    handle.flush()
        else:
            _limit_threads()
            for task in tasks:
                handle.write(json.dumps(run_one(task)) + "\n")
                handle.flush()
    print(f"done in {time.perf_counter() - started:.0f} s wall", flush=True)


def load_rows(
    paths: list[str], aliases: dict[str, str] | None = None
) -> dict[tuple[str, str, float], dict[int, float]]:
    """(data set, method, epsilon) -> {seed: loss}; `aliases` maps a recorded method name to
    the name to report it under (e.g. pe-lloyd:0.1:1 -> pe-lloyd when that variant has the
    defaults)."""
    out: dict[tuple[str, str, float], dict[int, float]] = defaultdict(dict)
    for path in paths:
        with open(path) as handle:
            for line in handle:
                row = json.loads(line)
                method = (aliases or {}).get(row["method"], row["method"])
                out[(row["dataset"], method, row["epsilon"])][row["seed"]] = row["loss"]
    return dict(out)


def auto_pick(name: str, epsilon: float) -> str:
    """What `auto` runs for this data set at this epsilon (N~ taken as N: the planning count
    differs from N by a few rows)."""
    data = load(name)
    n, d = data.X.shape
    return choose_algorithm(n, d, data.k, mu_from_epsilon_delta(epsilon, data.delta))


def command_report(args: argparse.Namespace) -> None:
    aliases = dict(a.split("=", 1)[::-1] for a in args.alias or [])
    rows = load_rows(args.files, aliases)
    datasets = sorted({key[0] for key in rows}, key=lambda n: (n != "iris", n))
    grid = tuple(args.epsilons or GRID)
    paper_eps = tuple(e for e in EPSILONS if e in grid)
    summary = []
    for name in datasets:
        methods = [m for m in args.methods if all((name, m, e) in rows for e in grid)]
        if not methods:
            continue
        # Every figure of a data set averages the same seeds: those every method has.
        common = set.intersection(*(set(rows[(name, m, e)]) for m in methods for e in grid))
        if not common:
            continue
        means = {
            m: [float(np.mean([rows[(name, m, e)][s] for s in common])) for e in grid]
            for m in methods
        }
        seeds = len(common)
        print(f"\n### {name} (mean loss over {seeds} seeds)\n")
        print("| method | " + " | ".join(f"eps {e:g}" for e in grid) + " | AUC grid | AUC 0.25-4 |")
        print("|---|" + "---|" * (len(grid) + 2))
        aucs = {}
        for m in methods:
            grid_auc = auc(means[m], grid)
            t1 = auc([means[m][grid.index(e)] for e in paper_eps], paper_eps)
            aucs[m] = (grid_auc, t1)
            cells = " | ".join(f"{v:.4f}" for v in means[m])
            print(f"| {m} | {cells} | {grid_auc:.4f} | {t1:.4f} |")
        product = [m for m in methods if m in PRODUCT_METHODS]
        if product:
            picks = [auto_pick(name, e) for e in grid]
            if all(p in means for p in picks):
                auto_losses = [means[p][i] for i, p in enumerate(picks)]
                grid_auc = auc(auto_losses, grid)
                t1 = auc([auto_losses[grid.index(e)] for e in paper_eps], paper_eps)
                cells = " | ".join(f"{v:.4f}" for v in auto_losses)
                print(f"| **auto** | {cells} | {grid_auc:.4f} | {t1:.4f} |")
                print("| auto picks | " + " | ".join(picks) + " | | |")
                best = min(product, key=lambda m: aucs[m][0])
                best_t1 = min(product, key=lambda m: aucs[m][1])
                summary.append(
                    (
                        name,
                        best,
                        aucs[best][0],
                        grid_auc,
                        aucs.get("pe-means", (float("nan"),))[0],
                        best_t1,
                        aucs[best_t1][1],
                        t1,
                        aucs.get("pe-means", (0.0, float("nan")))[1],
                        sum(
                            auto_losses[i] < means["pe-means"][i]
                            for i in range(len(grid))
                            if "pe-means" in means
                        ),
                    )
                )
            print(
                "| best | "
                + " | ".join(min(product, key=lambda m: means[m][i]) for i in range(len(grid)))
                + " | | |"
            )
    if summary:
        print(
            "\n| data set | best single (grid) | its AUC | auto AUC | auto / best | PE AUC | "
            "best single (0.25-4) | its AUC | auto AUC | auto / best | PE AUC | "
            "epsilons where auto < PE |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for name, best, b, a, pe, best1, b1, a1, pe1, wins in summary:
            print(
                f"| {name} | {best} | {b:.4f} | {a:.4f} | {a / b:.3f} | {pe:.4f} | {best1} | "
                f"{b1:.4f} | {a1:.4f} | {a1 / b1:.3f} | {pe1:.4f} | {wins} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run jobs, appending JSON lines to --out")
    run.add_argument("--out", required=True)
    run.add_argument("--datasets", nargs="*", default=list(TABLE_I_SETS))
    run.add_argument("--methods", nargs="*", default=list(PRODUCT_METHODS))
    run.add_argument("--epsilons", nargs="*", type=float, help=f"subset of {GRID}")
    run.add_argument("--seeds", type=int, default=3)
    run.add_argument("--first-seed", type=int, default=0)
    run.add_argument("--jobs", type=int, default=1)
    report = sub.add_parser("report", help="print the tables from result files")
    report.add_argument("files", nargs="+")
    report.add_argument("--methods", nargs="*", default=list(PRODUCT_METHODS))
    report.add_argument("--epsilons", nargs="*", type=float, help=f"subset of {GRID}")
    report.add_argument(
        "--alias",
        nargs="*",
        metavar="NAME=RECORDED",
        help="report the recorded method RECORDED as NAME (e.g. pe-lloyd=pe-lloyd:0.1:1)",
    )
    args = parser.parse_args()
    if args.command == "run":
        command_run(args)
    else:
        command_report(args)


if __name__ == "__main__":
    main()
