"""Benchmark: the empirical privacy audit of tests/unit/test_privacy_audit.py at 10^7 samples.

Runs the same audits (the same releases, events, Bonferroni-corrected one-sided Clopper-Pearson
bounds at 99% family-wise confidence, claimed epsilon at delta 1e-6) with more samples per side
and prints a markdown table: release, event, p0, p1, eps_lb, claimed eps, verdict. Never fails
on the numbers; the unit test does.

    .venv/bin/python bench/audit.py                       # the current code, 10^7 per side
    .venv/bin/python bench/audit.py --samples 1000000     # quicker
    .venv/bin/python bench/audit.py --target old --app-root /path/to/checkout-of-8d08953

--target old audits the code before the noise fix through the test file's `old_code_target`
adapter; --app-root names the checkout whose `app` package is audited (default: this one).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import time
from types import ModuleType

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AUDIT_TESTS = os.path.join(REPO, "tests", "unit", "test_privacy_audit.py")


def load_audit_module(app_root: str) -> ModuleType:
    """The audit test module, importing `app` from `app_root`."""
    sys.path.insert(0, os.path.abspath(app_root))
    spec = importlib.util.spec_from_file_location("privclust_privacy_audit", AUDIT_TESTS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def describe_checkout(path: str) -> str:
    try:
        commit = subprocess.run(
            ["git", "-C", path, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown commit"
    return f"{os.path.abspath(path)} ({commit})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=10_000_000, help="releases per side")
    parser.add_argument("--target", choices=["new", "old"], default="new")
    parser.add_argument("--app-root", default=REPO, help="checkout whose app package to audit")
    parser.add_argument("--chunk-rows", type=int, default=250_000)
    args = parser.parse_args()

    audit = load_audit_module(args.app_root)
    import app

    target = audit.load_target(args.target)
    print(f"target {args.target}: app from {os.path.dirname(app.__file__)}")
    print(f"checkout {describe_checkout(args.app_root)}; {args.samples:,} samples per side")
    print(f"delta {audit.DELTA:g}; family-wise confidence {1 - audit.ALPHA:.0%} per release\n")
    results = []
    for make_audit in audit.AUDITS:
        started = time.perf_counter()
        # seed_offset=1: draws independent of the unit test's.
        found = audit.run_audit(
            make_audit(target), args.samples, chunk_rows=args.chunk_rows, seed_offset=1
        )
        print(f"{found[0].release}: {time.perf_counter() - started:.1f} s", file=sys.stderr)
        results.extend(found)
    print(audit.format_table(results, args.target))


if __name__ == "__main__":
    main()
