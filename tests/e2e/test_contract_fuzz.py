"""The published contract, fuzzed: a schemathesis run of every phase (examples, coverage,
fuzzing, stateful) and every check against a real API and worker, once as an admin, once as an
owner and once as an analyst (on SQLite in `make test`, on Postgres in CI's second pass).

Every answer must be documented (status code, content type, headers) and match its schema;
schema-valid data must be accepted and invalid data refused; no request may get a 500; a method
the document does not list must get 405 with `Allow`; auth must not be ignored. The one
configured allowances are in tests/e2e/schemathesis.toml (what depends on the dataset, and a
DELETE that keeps its resource by contract), and
tests/support/contract.py adds a check that request validation never refuses schema-valid data.

Bounded: EXAMPLES cases per operation and phase, a fixed seed (so a run repeats; set
PRIVCLUST_FUZZ_SEED to explore others), no shrinking. The three roles run at once, in about
15 to 40 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.api import uploaded
from tests.support.data import csv_bytes, two_blobs
from tests.support.repo import ROOT
from tests.support.services import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]

EXAMPLES = 5
SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"
CONFIG = ROOT / "tests" / "e2e" / "schemathesis.toml"


def _real_rows(stack: Stack, owner_key: str, analyst_key: str) -> dict[str, object]:
    """Rows for the fuzzer to find (tests/support/contract.py points cases at them): two
    datasets, a job, two sweeps, a spare key, and a cursor issued by every list."""
    with stack.client(owner_key) as owner, stack.client(analyst_key) as analyst:
        data = csv_bytes(two_blobs(300))
        datasets = [
            uploaded(owner, None, data, name=f"fuzz{i}", epsilon="50", delta="1e-6")["id"]
            for i in range(2)
        ]
        path = f"/v1/datasets/{datasets[0]}"
        job = analyst.post(f"{path}/jobs", json={"k": 2, "epsilon": 0.5})
        assert job.status_code == 202, job.text
        for _ in range(2):
            sweep = analyst.post(f"{path}/sweeps", json={"ks": [2, 3], "epsilon": 0.5})
            assert sweep.status_code == 202, sweep.text
        cursors = {
            p: analyst.get(p, params={"limit": 1}).json()["next_cursor"]
            for p in ("/v1/datasets", "/v1/jobs", "/v1/sweeps")
        }
    with stack.client(stack.admin_key) as admin:
        spare = admin.post("/v1/api-keys", json={"tenant": "acme", "role": "analyst"}).json()
        cursors["/v1/api-keys"] = admin.get("/v1/api-keys", params={"limit": 1}).json()[
            "next_cursor"
        ]
    assert all(cursors.values()), cursors
    return {
        "dataset_id": datasets[0],
        "job_id": job.json()["id"],
        "sweep_id": sweep.json()["id"],
        "key_id": spare["id"],
        "cursors": cursors,
    }


def _start(stack: Stack, key: str, rows: dict[str, object], reports: Path) -> subprocess.Popen[str]:
    """The schemathesis CLI for one role, started (its output into reports/output.txt)."""
    seed = os.environ.get("PRIVCLUST_FUZZ_SEED")
    args = [
        str(SCHEMATHESIS),
        "--config-file",
        str(CONFIG),
        "run",
        f"{stack.base_url}/openapi.json",
        "--header",
        f"Authorization: Bearer {key}",
        "--checks",
        "all",
        # A DELETE here keeps its resource by contract (tests/e2e/schemathesis.toml says why).
        "--exclude-checks",
        "use_after_free",
        "--max-examples",
        str(EXAMPLES),
        "--report-dir",
        str(reports),
        *(["--seed", seed] if seed else []),
    ]
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PRIVCLUST_FUZZ_ROWS": json.dumps(rows),
        "NO_COLOR": "1",
    }
    with open(reports / "output.txt", "w") as out:
        return subprocess.Popen(
            args, cwd=reports, env=env, stdout=out, stderr=subprocess.STDOUT, text=True
        )


def test_the_contract_holds_for_every_role(stack: Stack, tmp_path: Path) -> None:
    owner_key, analyst_key = stack.new_keys()
    rows = _real_rows(stack, owner_key, analyst_key)
    keys = {"admin": stack.admin_key, "owner": owner_key, "analyst": analyst_key}
    # The three roles at once, as a dashboard's users would be: about 15 s in all.
    started = time.monotonic()
    runs = {}
    for role, key in keys.items():
        (tmp_path / role).mkdir()
        runs[role] = _start(stack, key, rows, tmp_path / role)
    failed = []
    for role, proc in runs.items():
        code = proc.wait(timeout=300)
        output = (tmp_path / role / "output.txt").read_text()
        summary = [line for line in output.splitlines() if "generated" in line or " in " in line]
        print(f"\n{role}: {' / '.join(summary[-2:])}")
        if code != 0:
            failed.append(f"--- {role} (exit {code})\n{output[-12000:]}")
    print(f"schemathesis, three roles: {time.monotonic() - started:.1f} s")
    assert not failed, "\n".join(failed) + "\n" + stack.logs()
