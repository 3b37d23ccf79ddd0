"""Federated against central accuracy: a federated job's centres beside a central job's on the
pooled rows, same method and epsilon, over `--seeds` seeds.

Each seed is a data set of the paper's protocol (docs/algorithms.md section 9): make_blobs with
sklearn's defaults (`--k` blobs in 2 columns, `--rows` rows, random_state = the seed), centred
and scaled so the largest row norm is 1, then stretched onto the declared ball of radius 10
around 0 (the service clusters in the declared domain; the measure is taken back at radius 1).
Its rows are shuffled and split unevenly (50 / 30 / 20 %) among three members. The defaults
(2,000 rows, k = 6) keep the private loss clear of the non-private one; at 20,000 rows and k = 4
every method sits on it at epsilon 1 and 3 and the comparison says nothing.

Both jobs go through one in-process service (SQLite and an embedded Redis in a temporary
directory), as tests/integration/test_federated_jobs.py does: the members are datasets with
member keys on it, each reached by the coordinator at its own URL through the app's in-process
transport (tests/support/federation.py); the federated dataset names them, and the central
dataset is the pooled rows uploaded as one file (the same CSV values). Every job is submitted
through the API and run in this process by the worker's own `run_job_here`; its noise is drawn
from OS entropy, as in production, so each job's noise is fresh.

The measure is the paper's loss (docs/algorithms.md section 9): the normalised k-means loss
(1/N) sum_i min_j |x_i - c_j|^2 of the released centres on the pooled rows at radius 1, taken as
its excess over the non-private floor, scikit-learn KMeans(n_init=10)'s loss on the same rows
(the seeds' blobs differ, so the floor moves from seed to seed; the excess is what the privacy
costs). Printed per method and epsilon: the excess's mean ± standard error over the seeds,
central and federated, their difference, and whether it is within one standard error of a
difference of the two means (sqrt(SE_central^2 + SE_federated^2)). Each seed's figure is the
mean of `--repeats` jobs a side (fresh noise each), which narrows the noise's share of the SE.
Where federated and central jobs release the same distribution (tests/integration/
test_federated_jobs.py: the same releases bit for bit with the noise fixed), a cell is within
one SE about two times in three, so about 2 of the 6 cells are expected outside by chance alone;
a real gap shows as cells outside 2 SE, or as one side ahead in most cells.

    flock /tmp/bench.lock .venv/bin/python bench/federation_accuracy.py
    .venv/bin/python bench/federation_accuracy.py --seeds 2 --repeats 1 --methods fastlloyd
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from datasets import normalise

from tests.support.api import auth, uploaded
from tests.support.federation import csv, make_members, members_field, parsed, reachable
from tests.support.metrics import kmeans_loss

RADIUS = 10.0
BUDGET = 200  # each dataset's epsilon cap: room for every job of a seed
SHARES = (0.5, 0.3, 0.2)  # of the rows, by member
METHODS = ("fastlloyd", "pe-means", "auto")
EPSILONS = (1.0, 3.0)


@dataclass(frozen=True)
class Seed:
    """One seed's data: each member's rows (radius 10) and the pooled rows as the CSVs carry
    them."""

    seed: int
    parts: list[np.ndarray]
    pooled: np.ndarray


def make_seed(seed: int, rows: int, k: int) -> Seed:
    X, _ = make_blobs(n_samples=rows, n_features=2, centers=k, random_state=seed)
    X = normalise(X) * RADIUS * (1 - 1e-6)  # inside the ball after the CSV's rounding
    order = np.random.default_rng(seed).permutation(rows)
    cuts = np.cumsum([int(share * rows) for share in SHARES[:-1]])
    parts = [X[idx] for idx in np.split(order, cuts)]
    return Seed(seed, parts, np.concatenate([parsed(p) for p in parts]))


@contextmanager
def service(directory: Path) -> Iterator[tuple[Any, dict[str, str]]]:
    """The service in this process on SQLite and an embedded Redis: a TestClient and the keys
    (an admin, and tenant acme's owner and analyst, as tests/support/federation.py expects)."""
    from app.kit.embedded_redis import EmbeddedRedis

    redis = EmbeddedRedis(directory / "redis", persist=False)
    url = f"sqlite:///{directory / 'bench.db'}"
    os.environ.update(
        PRIVCLUST_DATA_DIR=str(directory / "data"),
        PRIVCLUST_DATABASE_URL=url,
        PRIVCLUST_REDIS_URL=redis.start(),
        PRIVCLUST_LEDGER_CHECK_SECONDS="0",
    )
    try:
        from fastapi.testclient import TestClient

        from app.kit.config import get_settings
        from app.kit.db.migrate import upgrade_to_head
        from app.main import create_app
        from tests.support.db import make_key

        upgrade_to_head(url)
        get_settings.cache_clear()
        keys = {
            "admin": make_key(url, "admin", "admin"),
            "owner": make_key(url, "acme", "owner"),
            "analyst": make_key(url, "acme", "analyst"),
        }
        with TestClient(create_app(get_settings())) as client:
            yield client, keys
    finally:
        redis.stop()


def run_job(client: Any, analyst: str, dataset_id: str, body: dict[str, Any]) -> np.ndarray:
    """A job submitted as the analyst and run here by the worker's own function; its centres."""
    from worker.execute import run_job_here

    resp = client.post(f"/v1/datasets/{dataset_id}/jobs", headers=auth(analyst), json=body)
    assert resp.status_code == 202, resp.text
    status = run_job_here(resp.json()["id"])
    job = client.get(f"/v1/jobs/{resp.json()['id']}", headers=auth(analyst)).json()
    assert status == "succeeded", job
    return np.asarray(job["result"]["centers"], dtype=np.float64)


def federated_dataset(client: Any, owner: str, members: list[dict[str, Any]], seed: int) -> str:
    form = {
        "name": f"federated-{seed}", "epsilon": str(BUDGET), "delta": "1e-6",
        "radius": str(RADIUS), "columns": "x,y", "members": json.dumps(members_field(members)),
    }  # fmt: skip
    resp = client.post("/v1/datasets", headers=auth(owner), data=form)
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


def one_seed(
    client: Any, keys: dict[str, str], data: Seed, k: int, methods: list[str], repeats: int
) -> dict[tuple[str, float, str], float]:
    """For each method, epsilon and side (central or federated), the mean loss at radius 1 on
    the pooled rows of `repeats` jobs."""
    central = uploaded(
        client, keys["owner"], csv(np.concatenate(data.parts)), name=f"central-{data.seed}",
        epsilon=BUDGET, radius=RADIUS,
    )["id"]  # fmt: skip
    members = make_members(client, keys, data.parts, epsilon=BUDGET)
    X = data.pooled / RADIUS
    out = {}
    with reachable(client, members):
        federated = federated_dataset(client, keys["owner"], members, data.seed)
        for method in methods:
            for epsilon in EPSILONS:
                body = {"k": k, "algorithm": method, "epsilon": epsilon}
                for where, dataset_id in (("central", central), ("federated", federated)):
                    losses = [
                        kmeans_loss(X, run_job(client, keys["analyst"], dataset_id, body) / RADIUS)
                        for _ in range(repeats)
                    ]
                    out[(method, epsilon, where)] = float(np.mean(losses))
    return out


def mean_se(values: list[float]) -> tuple[float, float]:
    """The mean and its standard error (sample standard deviation / sqrt(n))."""
    a = np.asarray(values, dtype=np.float64)
    return float(a.mean()), float(a.std(ddof=1) / math.sqrt(len(a))) if len(a) > 1 else math.nan


def within(gap: float, se: float) -> str:
    """The smallest of 1 and 2 standard errors the gap is within, or that it is beyond both."""
    return next((f"{n} SE" for n in (1, 2) if gap <= n * se), "> 2 SE")


def table(
    runs: list[dict[tuple[str, float, str], float]], floors: list[float], methods: list[str]
) -> str:
    """Per method and epsilon: each side's excess loss over the seed's floor, mean ± SE."""
    lines = [
        "| method | epsilon | central excess ± SE | federated excess ± SE "
        "| federated - central (SE) | within |",
        "|---|---|---|---|---|---|",
    ]
    for method in methods:
        for epsilon in EPSILONS:
            excess = {
                where: mean_se(
                    [r[(method, epsilon, where)] - f for r, f in zip(runs, floors, strict=True)]
                )
                for where in ("central", "federated")
            }
            (c, c_se), (f, f_se) = excess["central"], excess["federated"]
            se = math.hypot(c_se, f_se)
            lines.append(
                f"| {method} | {epsilon:g} | {c:.5f} ± {c_se:.5f} | {f:.5f} ± {f_se:.5f} "
                f"| {f - c:+.5f} ({se:.5f}) | {within(abs(f - c), se)} |"
            )
    floor, floor_se = mean_se(floors)
    lines.append(f"\nthe floor, KMeans(n_init=10)'s loss: {floor:.5f} ± {floor_se:.5f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--rows", type=int, default=2_000)
    parser.add_argument("--k", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=4, help="jobs per side, seed and cell")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    args = parser.parse_args()
    runs, floors = [], []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, service(Path(tmp)) as (client, keys):
        for seed in range(1, args.seeds + 1):
            data = make_seed(seed, args.rows, args.k)
            runs.append(one_seed(client, keys, data, args.k, args.methods, args.repeats))
            fit = KMeans(args.k, n_init=10, random_state=seed).fit(data.pooled / RADIUS)
            floors.append(float(fit.inertia_) / len(data.pooled))
            print(f"seed {seed} done at {time.perf_counter() - start:.0f} s", file=sys.stderr)
    print(
        f"N = {args.rows} in 2 columns (make_blobs, k = {args.k}), members 50/30/20 %, "
        f"delta 1e-6, {args.seeds} seeds x {args.repeats} jobs a side; loss at radius 1 on "
        "the pooled rows\n"
    )
    print(table(runs, floors, args.methods))
    print(f"\nwall {time.perf_counter() - start:.0f} s, load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
