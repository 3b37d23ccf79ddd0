"""`privclust ledger verify`: replay ledgers and compare them with the running budgets."""

from __future__ import annotations

import argparse
import sys
import uuid


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("ledger", help="check the privacy ledger")
    sub = p.add_subparsers(dest="ledger_command", metavar="ACTION", required=True)
    verify = sub.add_parser(
        "verify",
        help="replay every dataset's ledger (or one's) and compare it with its running budget",
        description="Replays each dataset's append-only ledger and compares the result, exactly, "
        "with the running budget that every read and admission uses; follows the entries' hash "
        "chain; and compares every commit with its job row and the job's plan made again. "
        "Prints one line per dataset (with its chain's head, to keep outside the database); "
        "exits 1 if any differs, naming the dataset and each entry at fault.",
    )
    verify.add_argument("--dataset", type=uuid.UUID, help="check only this dataset (its id)")
    verify.add_argument(
        "--quiet", action="store_true", help="print only the datasets that do not agree"
    )
    verify.set_defaults(func=run_verify)


def run_verify(args: argparse.Namespace) -> int:
    from app.jobs.planning import plan_mismatch
    from app.kit.config import get_settings
    from app.kit.db.session import session_factory
    from app.ledger import verify

    sessions = session_factory(get_settings().resolved_database_url)
    if args.dataset is not None:
        found = verify.check(sessions, args.dataset, plan_mismatch)
        if found is None:
            print(f"no dataset {args.dataset}", file=sys.stderr)
            return 2
        checks = [found]
    else:
        checks = list(verify.check_all(sessions, plan_check=plan_mismatch))
    bad = [c for c in checks if not c.agrees]
    for c in checks:
        if not (args.quiet and c.agrees):
            print(c.describe(), file=sys.stdout if c.agrees else sys.stderr, flush=True)
    entries = sum(c.entries for c in checks)
    summary = f"{len(checks)} datasets, {entries} ledger entries replayed: "
    print(summary + (f"{len(bad)} MISMATCHED" if bad else "all agree"), flush=True)
    return 1 if bad else 0
