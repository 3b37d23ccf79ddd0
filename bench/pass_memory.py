"""A pass's working memory per method, in copies of the partition it reads.

What app.kit.cluster.TASK_COPIES plans with: for each method (k = 16, epsilon 1), one run in a
fresh process over one in-memory partition of `--rows` x 16 float64 rows (bench/scale.py's
blobs), its passes timed by nothing but measured by the kernel: before each pass the process's
peak resident set is reset (/proc/self/clear_refs), after it the peak above the resident set
before the pass is that pass's working memory (NumPy's, numba's and BLAS's alike). Printed per
method: the largest pass, and what the run's passes left derived from the partition (kept with
it while it is cached), both over the partition's float64 bytes (`--rows` x 16 x 8).

    .venv/bin/python bench/pass_memory.py --rows 1048576
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

D, K = 16, 16
METHODS = ("hdpe-means", "pe-lloyd", "fastlloyd", "pe-means", "lsh-coreset")


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) << 10
    raise RuntimeError(f"no {field} in /proc/self/status")


def _measure(method: str, n: int) -> None:
    import numpy as np
    from sklearn.datasets import make_blobs

    from privclust.clustering import cluster
    from privclust.clustering.data import rows as rows_module

    _, _, centres = make_blobs(
        n_samples=K, n_features=D, centers=K, random_state=1, return_centers=True
    )
    shift = centres.mean(axis=0)
    scale = float(np.linalg.norm(centres - shift, axis=1).max()) + 6.0
    rng = np.random.default_rng(1)
    X = (centres[rng.integers(0, K, n)] + rng.normal(0.0, 1.0, (n, D)) - shift) / scale
    passes: list[int] = []
    held: list[int] = []
    plain = rows_module.WorkingCopy.total

    def measured(self: rows_module.WorkingCopy, statistic: rows_module.Statistic) -> object:
        before = _status("VmRSS:")
        Path("/proc/self/clear_refs").write_text("5")
        try:
            return plain(self, statistic)
        finally:
            passes.append(_status("VmHWM:") - before)
            held.append(sum(p.points.nbytes for p in self.part._derived.values()))

    rows_module.WorkingCopy.total = measured  # type: ignore[method-assign]
    cluster(
        X, K, algorithm=method, epsilon=1.0, delta=1e-9, radius=1.0, rng=np.random.default_rng(1)
    )
    partition = n * D * 8
    print(
        f"| {method} | {n:,} | {len(passes)} | {max(passes) / partition:.2f} "
        f"| {max(held) / partition:.2f} |",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1 << 20)
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        _measure(args.one, args.rows)
        return
    print("| method | rows | passes | largest pass / partition | derived kept / partition |")
    print("| --- | --- | --- | --- | --- |", flush=True)
    for method in args.methods:
        subprocess.run(
            [sys.executable, __file__, "--rows", str(args.rows), "--one", method], check=True
        )


if __name__ == "__main__":
    main()
