"""`privclust cluster FILE`: differentially private k-means of a local CSV, Parquet or .npy
file, no server.

Prints the centres to stdout (CSV with a header row, or JSON) and the privacy spent (mu, epsilon,
delta, sigma, releases) to stderr for CSV output, or inside the JSON document. The noise always
comes from OS entropy; there is deliberately no seed option.

delta defaults to 1e-6 (never derived from the file, whose row count is private); choose one
below 1/N for N rows. d is public; N is private unless --count-public says otherwise, and the run
then spends a tenth of its mu on a noisy row count that it plans with and checks k against.

The domain is a ball (--radius, --center) or per-column bounds (--lower, --upper: the run
clusters each column scaled to its declared range, and centres come back in the columns' own
units). Vectors (--center, --lower, --upper, --columns) are values separated by commas or a
JSON array, as in the service's form fields. The domain limits are the service's.

`--summaries` adds the centres' private sizes and loss, with their noise and warnings where a
figure is not informative. `--k 2,4,8,16` runs a private sweep: one summarised run per k with
the budget split equally between them, printing each k's noisy loss and its standard error and
the suggested k, or why none is (docs/algorithms.md, "sweeps").
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

# The names only: the package loads numpy and the methods on first use of a function, so that
# `privclust worker` can still limit BLAS threads before numpy loads.
from app.commands.cluster_table import add_table_arguments, read_rows_of, table_spec
from app.kit.method_choice import library_keywords
from privclust.clustering import Algorithm, Relation
from privclust.tabular import category_shares

DEFAULT_DELTA = 1e-6


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "cluster",
        help="cluster a local CSV/Parquet/.npy file privately, with no server",
        description="Differentially private k-means of a local file. The domain (--radius and "
        "--center, or --lower and --upper per column) must come from public knowledge, never "
        "from the data. Rows outside it are clipped onto its boundary.",
    )
    p.add_argument(
        "file", type=Path, help="a CSV file with a header row, a Parquet file or a .npy matrix"
    )
    p.add_argument(
        "--columns",
        type=_names,
        help="the columns to use, by name: names separated by commas (x,y) or a JSON array",
    )
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
    p.add_argument("--radius", type=float, help="radius R of a public ball around --center")
    p.add_argument(
        "--center",
        type=_numbers,
        nargs="+",
        metavar="C",
        help="centre of the public ball, one value per column (0,0,1.5 or a JSON array; "
        "default: the origin)",
    )
    for bound in ("lower", "upper"):
        p.add_argument(
            f"--{bound}",
            type=_numbers,
            nargs="+",
            metavar="B",
            help=f"per-column {bound} bounds of the public domain (instead of a ball: each "
            "column is clustered scaled to its declared range)",
        )
    p.add_argument(
        "--algorithm",
        choices=[algorithm.value for algorithm in Algorithm],
        default=Algorithm.AUTO.value,
        help=f"the method (default auto: {_auto_rule()})",
    )
    p.add_argument("--iterations", type=int, help="override the number of PE iterations")
    p.add_argument("--variations", type=int, help="override the initial variations per centre")
    p.add_argument("--projection-dim", type=int, default=16, help="HDPE projection dimension")
    p.add_argument("--format", choices=["csv", "json"], default="csv", help="output format")
    add_table_arguments(p)
    p.set_defaults(func=run)


def _auto_rule() -> str:
    from privclust.clustering.auto import describe_auto  # the names only: no numpy

    return describe_auto()


def _vector_of(what: str) -> Callable[[str], list[Any]]:
    """An option type reading a vector of `what` ("numbers" or "names", as
    privclust.tables.parse_vector takes them); a refusal is argparse's usage error."""

    def parse(text: str) -> list[Any]:
        from privclust.tables import parse_vector

        try:
            return parse_vector(text, what)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from exc

    return parse


_numbers = _vector_of("numbers")
_names = _vector_of("names")


def _vector(parts: list[list[float]] | None) -> list[float] | None:
    """A vector option's values: one argument (0,0,1 or a JSON array) or several (0 0 1)."""
    return None if parts is None else [value for part in parts for value in part]


def _domain(args: argparse.Namespace) -> dict[str, Any]:
    """The library's domain keywords: a ball, or per-column bounds (ClusteringInputError when
    neither or both are given)."""
    from privclust.clustering import ClusteringInputError

    lower, upper = _vector(args.lower), _vector(args.upper)
    if lower is not None or upper is not None:
        if args.radius is not None or args.center is not None:
            raise ClusteringInputError(
                "radius", "give either --radius (and --center) or --lower and --upper"
            )
        if lower is None or upper is None:
            raise ClusteringInputError("lower", "--lower and --upper go together")
        return {"lower": lower, "upper": upper}
    if args.radius is None:
        raise ClusteringInputError(
            "radius", "declare the public domain: --radius (and --center), or --lower and --upper"
        )
    return {"radius": args.radius, "center": _vector(args.center)}


def _ks(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an integer list: {text!r}") from exc
    if not values:
        raise argparse.ArgumentTypeError("give at least one k")
    return values


def run(args: argparse.Namespace) -> int:
    if args.mu is not None and args.delta is not None:
        print("privclust cluster: error: --delta goes with --epsilon, not --mu", file=sys.stderr)
        return 2
    try:
        X, columns = read_rows_of(args, _domain)
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

    from privclust.clustering import ClusteringInputError, cluster
    from privclust.clustering.outputs.uncertainty import sizes_noise_std
    from privclust.privacy.gdp import PrivacyParameterError

    try:
        domain = _domain(args)
        result = cluster(
            X,
            args.k[0],
            **library_keywords(args, delta),
            relation=_relation(args),
            summaries=args.summaries,
            check_k=True,  # k above the noisy row count is refused, as the service does
            contribution_bound=args.contribution_bound,
            **domain,
        )
    except (ClusteringInputError, PrivacyParameterError) as exc:
        return _error(exc)
    privacy = result.privacy_spent()
    centres = result.centers.tolist()
    shares = category_shares(centres, columns, table_spec(args))
    summary: dict[str, Any] | None = None
    if result.sizes is not None:
        summary = {
            "sizes": [int(v) for v in result.sizes],
            "sizes_se": sizes_noise_std(result.summary_mu, result.relation),
            "loss": result.loss,
            "loss_se": result.loss_se,
            "loss_space": result.loss_space,
            "warnings": [vars(w) for w in _warnings(result, domain)],
        }
    if args.format == "json":
        document: dict[str, Any] = {
            "algorithm": result.algorithm,
            "k": len(centres),
            "columns": columns,
            "centers": centres,
            "privacy": privacy,
        }
        if shares is not None:
            document["category_shares"] = shares
        if summary is not None:
            document.update(summary)
        print(json.dumps(document, indent=2))
        return 0
    print(",".join(_csv_field(name) for name in columns))
    for centre in centres:
        print(",".join(repr(value) for value in centre))
    if summary is not None:
        print(
            f"sizes={summary['sizes']} (noise std {summary['sizes_se']:.3g}) "
            f"loss={summary['loss']:.6g} (standard error {summary['loss_se']:.3g}, "
            f"{summary['loss_space']} space)",
            file=sys.stderr,
        )
        for warning in summary["warnings"]:
            print(f"warning ({warning['code']}): {warning['detail']}", file=sys.stderr)
    spent = ", ".join(f"{key}={value}" for key, value in privacy.items())
    print(f"{result.algorithm}: privacy spent: {spent}", file=sys.stderr)
    return 0


def _warnings(result: Any, domain: dict[str, Any]) -> list[Any]:
    """The warnings of a run's released figures (privclust.clustering.outputs.uncertainty)."""
    import numpy as np

    from privclust.clustering.outputs.uncertainty import run_warnings

    if "lower" in domain:
        lower, upper = np.asarray(domain["lower"]), np.asarray(domain["upper"])
    else:
        c = np.zeros(result.centers.shape[1]) if domain["center"] is None else domain["center"]
        lower, upper = np.asarray(c) - domain["radius"], np.asarray(c) + domain["radius"]
    return run_warnings(result, lower, upper)


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

    from privclust.clustering import ClusteringInputError, sweep
    from privclust.privacy.gdp import PrivacyParameterError

    try:
        result = sweep(
            X,
            args.k,
            **_domain(args),
            **library_keywords(args, delta),
            relation=_relation(args),
            check_k=True,
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
    warnings = [vars(w) for w in result.warnings]
    if args.format == "json":
        document = {
            "ks": list(result.ks),
            "suggested_k": result.suggested_k,
            "warnings": warnings,
            "loss_space": result.results[0].loss_space,
            "runs": rows,
        }
        print(json.dumps({**document, "privacy": privacy}, indent=2))
    else:
        print("k,loss,loss_se")
        for row in rows:
            print(f"{row['k']},{row['loss']!r},{row['loss_se']!r}")
        print(f"suggested k: {result.suggested_k}", file=sys.stderr)
        for warning in warnings:
            print(f"warning ({warning['code']}): {warning['detail']}", file=sys.stderr)
        spent = ", ".join(f"{key}={value}" for key, value in privacy.items())
        print(f"sweep: privacy spent: {spent}", file=sys.stderr)
    return 0


def _csv_field(text: str) -> str:
    if any(ch in text for ch in ',"\n\r'):
        return '"' + text.replace('"', '""') + '"'
    return text
