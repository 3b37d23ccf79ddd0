"""A TypeScript client generated from the live /openapi.json runs the README walk-through in Node.

tests/e2e/ts-client pins its generator and client in package.json and package-lock.json:
openapi-typescript turns the document a running API serves into types (generate.mjs),
openapi-fetch is the typed client, and `tsc` compiles src/walkthrough.ts against those types
(strict: a field renamed or removed in the API breaks the build, not a user's dashboard). The
compiled walk-through then runs in Node against real API and worker processes and prints what it
saw as one JSON line, checked here.

Needs Node 20+ and npm; `npm ci` installs the pinned packages into tests/e2e/ts-client/
node_modules (not in git) when they are missing or older than the lock file. Without Node the
test skips, unless PRIVCLUST_REQUIRE_NODE=1 (CI sets it): then it fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.support.repo import ROOT
from tests.support.services import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

CLIENT_DIR = ROOT / "tests" / "e2e" / "ts-client"
SOURCES = ("package.json", "tsconfig.json", "generate.mjs", "src")
# The README's three customer segments (the walk-through writes the same table in TypeScript)
# and the columns' declared ranges.
SEGMENTS = np.array([[30, 50, 5, 200], [45, 120, 15, 500], [65, 80, 25, 800]], dtype=float)
RANGES = np.array([100.0, 200.0, 30.0, 1000.0])
# 10% of a column's range: the estimate puts each centre's error at about 0.5% of the ranges
# (one standard deviation; bench/RESULTS.md finds it right within a factor of 3), so a centre
# this far off is 6 or more of its worst-case standard deviations away (a chance below 1e-8 per
# coordinate), while a missed segment leaves one 15% to 35% of a range from every centre.
TOLERANCE = 0.1


def _unavailable(reason: str) -> None:
    if os.environ.get("PRIVCLUST_REQUIRE_NODE") == "1":
        pytest.fail(f"{reason} (PRIVCLUST_REQUIRE_NODE=1)")
    pytest.skip(f"TypeScript client test skipped: {reason}")


def _run(
    args: list[str], cwd: Path, timeout: float, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def node_modules() -> Path:
    """The pinned packages, installed with `npm ci` when missing or older than the lock."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        _unavailable("no node and npm on the PATH (Node 20 or newer is needed)")
    assert node is not None and npm is not None
    version = _run([node, "--version"], CLIENT_DIR, 30).stdout.strip()
    major = re.match(r"v(\d+)\.", version)
    if major is None or int(major.group(1)) < 20:
        _unavailable(f"node {version or '?'} is older than 20")
    installed = CLIENT_DIR / "node_modules" / ".package-lock.json"
    lock = CLIENT_DIR / "package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
        done = _run([npm, "ci", "--no-audit", "--no-fund"], CLIENT_DIR, 600)
        if done.returncode != 0:
            _unavailable(f"`npm ci` failed in {CLIENT_DIR}:\n{done.stdout}\n{done.stderr}")
    return CLIENT_DIR / "node_modules"


def _build(work: Path, node_modules: Path, spec_url: str) -> None:
    """Copy the client's sources into `work`, generate the types from the running API, and
    compile the walk-through with them (any type error fails the test)."""
    work.mkdir()
    for name in SOURCES:
        source = CLIENT_DIR / name
        if source.is_dir():
            shutil.copytree(source, work / name)
        else:
            shutil.copy(source, work / name)
    (work / "node_modules").symlink_to(node_modules, target_is_directory=True)
    (work / "generated").mkdir()
    generate = _run(["node", "generate.mjs", spec_url, "generated/privclust.ts"], work, 120)
    assert generate.returncode == 0, generate.stdout + generate.stderr
    assert "warn" not in generate.stderr.lower(), generate.stderr
    tsc = _run(["node", "node_modules/typescript/bin/tsc", "-p", "tsconfig.json"], work, 180)
    assert tsc.returncode == 0, tsc.stdout + tsc.stderr


def test_the_walkthrough_through_a_generated_typescript_client(
    stack: Stack, node_modules: Path, tmp_path: Path
) -> None:
    work = tmp_path / "ts-client"
    _build(work, node_modules, stack.base_url + "/openapi.json")
    walk = _run(
        ["node", "dist/src/walkthrough.js"],
        work,
        400,
        PRIVCLUST=stack.base_url,
        PRIVCLUST_ADMIN=stack.admin_key,
    )
    assert walk.returncode == 0, f"{walk.stdout}\n{walk.stderr}\n{stack.logs()}"
    seen = json.loads(walk.stdout.strip().splitlines()[-1])

    # The analyst saw the released count, never the exact one, and the declared box.
    assert seen["dataset"]["analyst_n_rows"] is None
    assert abs(seen["dataset"]["n_rows_dp"] - 3000) < 300  # count noise std 1/count_mu ~ 15
    assert seen["dataset"]["domain"]["kind"] == "box"
    assert seen["dataset"]["domain"]["upper"] == [100, 200, 30, 1000]
    # The estimate's expected accuracy, and a target's epsilon that meets it.
    accuracy = seen["accuracy"]
    assert len(accuracy["centre_std"]) == 4 and len(accuracy["centre_std_fraction"]) == 4
    assert max(seen["target"]["accuracy"]["centre_std_fraction"]) <= 0.01 + 1e-9
    # The job found the three segments: each has a released centre near it, per column in
    # units of the column's declared range.
    centers = np.array(seen["job"]["centers"])
    assert centers.shape == (3, 4)
    gaps = np.abs(SEGMENTS[:, None, :] - centers[None]) / RANGES
    worst = gaps.max(axis=2).min(axis=1)  # each segment's best-matching centre, worst column
    assert worst.max() < TOLERANCE, (worst, centers)
    assert seen["replayed"] == "true"  # the retry with the same Idempotency-Key
    assert seen["estimate"]["mu"] == pytest.approx(seen["job"]["mu"])

    # The budget and its ledger, and a refusal parsed as the generated Problem type.
    budget = seen["budget"]
    assert budget["jobs"] == 1 and budget["mu_reserved"] == 0
    assert budget["mu_remaining"] < budget["mu_cap"]
    assert seen["ledger_kinds"] == ["cap", "count", "reserve", "commit", "succeeded"]
    assert seen["refused"] == {"status": 409, "code": "budget-exceeded"}

    # The follow-on: a sweep's three jobs, private sizes, and labels for the owner alone.
    assert seen["sweep"]["jobs"] == seen["sweep"]["estimate_jobs"] == 3
    assert len(seen["sweep"]["sizes"]) == 3
    assert seen["labels"] == {"owner_status": 200, "lines": 3001}  # header + one per row
    assert seen["analyst_labels_status"] == 404
