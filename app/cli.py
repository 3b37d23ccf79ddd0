"""The `privclust` command line: serve, api, worker, migrate, keys, ledger, cluster.

Heavy imports (numpy, FastAPI, RQ) happen inside each command so that `privclust worker` can
set BLAS thread limits before numpy loads, and `--help` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from app import __version__
from app.commands import cluster, keys, ledger, migrate, serve, server, worker

COMMANDS = (serve, server, worker, migrate, keys, ledger, cluster)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="privclust",
        description="Differentially private k-means clustering as a self-hosted service. "
        "Settings come from PRIVCLUST_* environment variables (see the README).",
    )
    parser.add_argument("--version", action="version", version=f"privclust {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS:
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
