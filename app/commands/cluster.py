"""`privclust cluster FILE`: differentially private k-means of a local CSV or .npy file, no server.

Prints the centres to stdout (CSV with a header row, or JSON) and the privacy spent (mu, epsilon,
delta, sigma, releases) to stderr for CSV output, or inside the JSON document. The noise always
comes from OS entropy; there is deliberately no seed option.

delta defaults to min(1e-6, 1/N^1.1) for N rows: below 1/N, as the usual guidance asks, and
never looser than 1e-6. N and d are treated as public, as in the service.

`--summaries` adds the centres' private sizes and loss. `--k 2,4,8,16` runs a private sweep:
one summarised run per k with the budget split equally between them, printing each k's noisy
loss and its standard error and the suggested k (docs/algorithms.md, "sweeps").
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

# The names only: the package loads numpy and the methods on first use of a function, so that
# `privclust worker` can still limit BLAS threads before numpy loads.
from privclust.clustering import Algorithm, Relation

DEFAULT_DELTA = 1e-6


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "cluster",
        help="cluster a local CSV/.npy file privately, with no server",
        description="Differentially private k-means of a local file. The domain (--radius and "
        "--center) must come from public knowledge, never from the data. Rows outside it are "
        "clipped onto its boundary.",
    )
    p.add_argument("file", type=Path, help="a CSV file with a header row, or a .npy matrix")
    p.add_argument(
        "--k",
        type=_ks,
        required=True,
        help="number of clusters, or a comma-separated list (2,4,8,16) for a private sweep "
        "that suggests one",
    )
    p.add_argument(
        "--summaries",
        action="store_true",
        help="also release private cluster sizes and loss (paid out of the same budget)",
    )
    budget = p.add_mutually_exclusive_group(required=True)
    budget.add_argument("--epsilon", type=float, help="privacy budget epsilon of this run")
    budget.add_argument("--mu", type=float, help="privacy budget as mu-GDP (instead of epsilon)")
    p.add_argument(
        "--delta",
        type=float,
        help="delta for --epsilon (default 1e-6; choose one below 1/N for N rows). It is "
        "never derived from the file, whose row count is private",
    )
    p.add_argument(
        "--count-public",
        action="store_true",
        help="the file's row count is already public: neighbouring datasets then replace one "
        "row (replace-one sensitivities) and no noisy count is released; by default a tenth "
        "of mu is spent on a noisy row count that the run plans with",
    )
    p.add_argument("--radius", type=float, required=True, help="radius R of the public domain")
    p.add_argument(
        "--center",
        type=float,
        nargs="+",
        metavar="C",
        help="centre of the public domain, one value per column (default: the origin)",
    )
    p.add_argument(
        "--algorithm",
        choices=[algorithm.value for algorithm in Algorithm],
        default=Algorithm.AUTO.value,
        help="auto = chosen from d, the row count, k and mu (docs/algorithms.md; default auto)",
    )
    p.add_argument("--iterations", type=int, help="override the number of PE iterations")
    p.add_argument("--variations", type=int, help="override the initial variations per centre")
    p.add_argument("--projection-dim", type=int, default=16, help="HDPE projection dimension")
    p.add_argument("--format", choices=["csv", "json"], default="csv", help="output format")
    p.set_defaults(func=run)


def _ks(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an integer list: {text!r}") from exc
    if not values:
        raise argparse.ArgumentTypeError("give at least one k")
    return values


def _read_matrix(path: Path) -> tuple[Any, list[str]]:
    """(N x d float64 array, column names) from a .npy file or a CSV file with a header row."""
    import numpy as np

    with path.open("rb") as handle:
        is_npy = handle.read(6) == b"\x93NUMPY"
    if is_npy:
        matrix = np.load(path, mmap_mode="r", allow_pickle=False)
        if matrix.ndim != 2:
            raise ValueError(f"{path} holds a {matrix.ndim}-D array; a 2-D matrix is needed")
        return matrix, [f"c{i}" for i in range(matrix.shape[1])]

    import pyarrow as pa
    import pyarrow.csv as pa_csv

    table = pa_csv.read_csv(path)
    columns = [str(name) for name in table.column_names]
    if not columns or table.num_rows == 0:
        raise ValueError(f"{path} has no data rows")
    matrix = np.empty((table.num_rows, len(columns)), dtype=np.float64)
    for j, name in enumerate(columns):
        column = table.column(j)
        if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
            raise ValueError(f"column {name!r} is not numeric ({column.type})")
        if column.null_count:
            raise ValueError(f"column {name!r} has {column.null_count} empty values")
        matrix[:, j] = column.to_numpy()
    return matrix, columns


def run(args: argparse.Namespace) -> int:
    if args.mu is not None and args.delta is not None:
        print("privclust cluster: error: --delta goes with --epsilon, not --mu", file=sys.stderr)
        return 2
    try:
        X, columns = _read_matrix(args.file)
    except (OSError, ValueError, ArithmeticError) as exc:
        print(f"privclust cluster: error: cannot read {args.file}: {exc}", file=sys.stderr)
        return 2
    delta = args.delta
    if args.epsilon is not None and delta is None:
        delta = DEFAULT_DELTA
    if len(args.k) > 1:
        return _run_sweep(args, X, delta)
    return _run_once(args, X, columns, delta)


def _run_once(args: argparse.Namespace, X: Any, columns: list[str], delta: float | None) -> int:
    """One private run: the centres (CSV or JSON) and the privacy spent."""
    import numpy as np

    from privclust.clustering import ClusteringInputError, cluster
    from privclust.privacy.gdp import PrivacyParameterError

    try:
        result = cluster(
            X,
            args.k[0],
            algorithm=args.algorithm,
            radius=args.radius,
            center=None if args.center is None else np.asarray(args.center),
            epsilon=args.epsilon,
            delta=delta if args.epsilon is not None else None,
            mu=args.mu,
            iterations=args.iterations,
            variations=args.variations,
            projection_dim=args.projection_dim,
            relation=_relation(args),
            summaries=args.summaries,
        )
    except (ClusteringInputError, PrivacyParameterError) as exc:
        return _error(exc)
    privacy = result.privacy_spent()
    centres = result.centers.tolist()
    summary = None
    if result.sizes is not None:
        summary = {
            "sizes": [int(v) for v in result.sizes],
            "loss": result.loss,
            "loss_se": result.loss_se,
        }
    if args.format == "json":
        document: dict[str, Any] = {
            "algorithm": result.algorithm,
            "k": len(centres),
            "columns": columns,
            "centers": centres,
            "privacy": privacy,
        }
        if summary is not None:
            document.update(summary)
        print(json.dumps(document, indent=2))
        return 0
    print(",".join(_csv_field(name) for name in columns))
    for centre in centres:
        print(",".join(repr(value) for value in centre))
    if summary is not None:
        print(
            f"sizes={summary['sizes']} loss={summary['loss']:.6g} "
            f"(standard error {summary['loss_se']:.3g})",
            file=sys.stderr,
        )
    spent = ", ".join(f"{key}={value}" for key, value in privacy.items())
    print(f"{result.algorithm}: privacy spent: {spent}", file=sys.stderr)
    return 0


def _relation(args: argparse.Namespace) -> Relation:
    """Replace-one neighbours when the file's row count is declared public."""
    return Relation.REPLACE_ONE if args.count_public else Relation.ADD_REMOVE


def _error(exc: Exception) -> int:
    field = getattr(exc, "field", None)
    where = f" ({field})" if field else ""
    print(f"privclust cluster: error{where}: {exc}", file=sys.stderr)
    return 2


def _run_sweep(args: argparse.Namespace, X: Any, delta: float | None) -> int:
    """A private sweep over the ks: a table of each k's noisy loss (CSV or JSON) and the
    suggested k."""
    import numpy as np

    from privclust.clustering import ClusteringInputError, sweep
    from privclust.privacy.gdp import PrivacyParameterError

    try:
        result = sweep(
            X,
            args.k,
            radius=args.radius,
            center=None if args.center is None else np.asarray(args.center),
            algorithm=args.algorithm,
            epsilon=args.epsilon,
            delta=delta if args.epsilon is not None else None,
            mu=args.mu,
            relation=_relation(args),
            iterations=args.iterations,
            variations=args.variations,
            projection_dim=args.projection_dim,
        )
    except (ClusteringInputError, PrivacyParameterError) as exc:
        return _error(exc)
    rows = [
        {"k": k, "loss": r.loss, "loss_se": r.loss_se, "sizes": [int(v) for v in r.sizes]}
        for k, r in zip(result.ks, result.results, strict=True)
        if r.sizes is not None
    ]
    privacy = {
        "mu": result.mu,
        "job_mu": result.job_mu,
        "epsilon": args.epsilon,
        "delta": delta if args.epsilon is not None else None,
        "relation": result.relation,
        "count_mu": result.count_mu,
        "n_rows_dp": None if args.count_public else result.n_public,
    }
    if args.format == "json":
        document = {"ks": list(result.ks), "suggested_k": result.suggested_k, "runs": rows}
        print(json.dumps({**document, "privacy": privacy}, indent=2))
    else:
        print("k,loss,loss_se")
        for row in rows:
            print(f"{row['k']},{row['loss']!r},{row['loss_se']!r}")
        print(f"suggested k: {result.suggested_k}", file=sys.stderr)
        spent = ", ".join(f"{key}={value}" for key, value in privacy.items())
        print(f"sweep: privacy spent: {spent}", file=sys.stderr)
    return 0


def _csv_field(text: str) -> str:
    if any(ch in text for ch in ',"\n\r'):
        return '"' + text.replace('"', '""') + '"'
    return text
